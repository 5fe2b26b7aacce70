"""The backward's dK/dV and dQ kernels in Triton's Gluon dialect for Hopper (sm90), in the design
of the Gluon forward (mha.kernels.forward_gluon): deterministic (no atomics), so they serve
both values of the caller's `deterministic` flag.

Selected as data: an sm90 backward bucket's `gluon` config names the Triton versions that run
them (mha.config); mha.launch runs mha.kernels.backward for inputs they cannot take. Gluon is
absent from Triton 3.4: import this module only where a config selects it. docs/configs.md,
"Gluon backward", has the design and the measurements. The delta = rowsum(dO * O) they read is
the Triton preprocess kernel's (mha.kernels.backward.attn_bwd_preprocess).

attn_bwd_dkdv_gluon: one program = one 128-key tile of one (batch, KV head), three partitions:
- two consumer warpgroups (4 warps each), keys [0, 64) and [64, 128) of the tile, each keeping
  its keys' dK and dV accumulators (64 x D float32) in registers for the whole program;
- a loader warp: K and V of the tile once, then Q, dO, lse and delta blocks of BLOCK_M query
  rows by TMA into a STAGES-deep ring over the query heads of the GQA group and the query
  blocks of the tile's band, each slot guarded by a "ready" mbarrier (TMA byte count) and an
  "empty" one (one arrive per consumer). lse and delta come through the ring too: as pointer
  loads their vectors took registers the consumers do not have.
A consumer step, for a query block: S^T = K_c Q^T and dP^T = V_c dO^T as two async wgmma, then
P^T = exp2(S^T * scale - lse) (masked on the diagonal blocks only), dS^T = P^T (dP^T - delta),
and dV += P^T dO, dK += dS^T Q with P^T and dS^T as register A operands. The epilogue writes
dK * sm_scale and dV through the consumer's K and V slots and TMA stores. The grid is
(batch * KV heads, key tiles) for causal, so every slice's longest key tiles start first.

attn_bwd_dq_gluon: one program = one 128-row query tile of one (batch, query head): two
consumer warpgroups of 64 rows with dQ in registers, a loader warp with Q and dO once and K and
V rings. A step, for key block j: S = Q K_j^T and dP = dO V_j^T as async wgmma, P, dS = P (dP -
delta), dQ += dS K_j. The epilogue writes dQ * sm_scale through the consumer's Q slot by TMA.
Causal grids run the longest query tiles first, as the forward's.

What the host side must guarantee (mha.launch.gluon_backward_inputs_ok checks it): q/do
(B, Sq, Hq, D), k/v (B, Sk, Hk, D) contiguous fp16/bf16 and TMA-readable, D in {64, 128},
Hq % Hk == 0, Sq and Sk positive multiples of 128, for causal Sk >= Sq; lse and delta float32
(B, Hq, Sq) contiguous, lse the natural-log row logsumexp of the forward.
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# Two consumer warpgroups and a loader warp, as the forward: its register budget and host helpers.
from .forward_gluon import (CONSUMER_REGS, LOADER_REGS, NUM_CONSUMERS, desc_type, matrix_desc,
                            query_tile_key_blocks, shared_layout)
# The forward's tile: both kernels' grids are mha.launch.tile_grid's (key tiles of the KV heads for dK/dV).
from .forward_gluon import BLOCK_M as TILE_ROWS

DQ_ROWS = TILE_ROWS    # query rows per dQ program
DKDV_KEYS = TILE_ROWS  # keys per dK/dV program
# Lengths and head counts never change the code; the lengths are multiples of 128 here, which
# the JIT would otherwise specialize on.
DKDV_DO_NOT_SPECIALIZE = ("seqlen_q", "seqlen_k", "num_heads_k", "group")
DQ_DO_NOT_SPECIALIZE = ("seqlen_q", "seqlen_k", "num_heads_q", "group")

LOG2E: gl.constexpr = gl.constexpr(1.4426950408889634)


# ----------------------------------------------------------------------------- dK/dV
@gluon.jit
def _dkdv_loader(q_desc, do_desc, k_desc, v_desc, lse_desc, delta_desc, q_smem, do_smem, k_smem, v_smem, lse_smem,
                 delta_smem, kv_bar, ready, empty, kv_row, k_col, v_col, q_row0, hq0, lse_b, seqlen_q, group, m_lo,
                 n_blocks,
                 HEAD_DIM: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                 NUM_CONSUMERS: gl.constexpr, ROWS: gl.constexpr):
    mbarrier.expect(kv_bar, NUM_CONSUMERS * (k_desc.block_type.nbytes + v_desc.block_type.nbytes))
    for c in gl.static_range(NUM_CONSUMERS):
        tma.async_copy_global_to_shared(k_desc, [kv_row + c * ROWS, k_col], kv_bar, k_smem.index(c))
        tma.async_copy_global_to_shared(v_desc, [kv_row + c * ROWS, v_col], kv_bar, v_smem.index(c))
    t = 0
    for g in range(group):
        h = hq0 + g
        for i in range(n_blocks):
            st = t % STAGES
            ph = (t // STAGES) & 1
            # A fresh barrier has completed the phase before phase 0: the first round passes.
            mbarrier.wait(empty.index(st), ph ^ 1)
            mbarrier.expect(ready.index(st), q_desc.block_type.nbytes + do_desc.block_type.nbytes
                            + lse_desc.block_type.nbytes + delta_desc.block_type.nbytes)
            m = m_lo + i * BLOCK_M
            tma.async_copy_global_to_shared(q_desc, [q_row0 + m, h * HEAD_DIM], ready.index(st), q_smem.index(st))
            tma.async_copy_global_to_shared(do_desc, [q_row0 + m, h * HEAD_DV], ready.index(st), do_smem.index(st))
            # lse and delta rows of the block (B, Hq, Sq flattened): read from shared memory by
            # the consumers, so no pointer vectors live in their registers.
            lrow = (lse_b + h) * seqlen_q + m
            tma.async_copy_global_to_shared(lse_desc, [lrow], ready.index(st), lse_smem.index(st))
            tma.async_copy_global_to_shared(delta_desc, [lrow], ready.index(st), delta_smem.index(st))
            t += 1


@gluon.jit
def _dkdv_step(t, m, k_c, v_c, q_smem, do_smem, lse_smem, delta_smem, ready, empty, dk, dv, qk_scale, keys, diff,
               MASK: gl.constexpr, STAGES: gl.constexpr, BLOCK_M: gl.constexpr,
               s_layout: gl.constexpr, dk_layout: gl.constexpr, dv_layout: gl.constexpr):
    """Query block at row m (slot t of the ring): dV += P^T dO, dK += dS^T Q for this consumer's keys."""
    R: gl.constexpr = k_c.shape[0]
    st = t % STAGES
    ph = (t // STAGES) & 1
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    mbarrier.wait(ready.index(st), ph)
    q = q_smem.index(st)
    do = do_smem.index(st)
    zero = gl.zeros([R, BLOCK_M], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(k_c, q.permute((1, 0)), zero, use_acc=False, is_async=True)
    dp_tok = warpgroup_mma(v_c, do.permute((1, 0)), zero, use_acc=False, is_async=True)
    # lse (natural log; base 2 here) of the block's rows, read while the two wgmma run. Each
    # vector costs a thread 16 registers in the accumulator's column layout, so delta is read
    # only once lse is dead.
    lse2 = lse_smem.index(st).load(col_layout) * LOG2E
    st_ = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    pt = gl.exp2(st_ * qk_scale - lse2[None, :])
    if MASK:
        # key n is visible to query m where m + diff >= n (bottom-right aligned causal diagonal)
        qrows = m + gl.arange(0, BLOCK_M, layout=col_layout)
        keep = (qrows + diff)[None, :] >= keys[:, None]
        pt = gl.where(keep, pt, 0.0)
    # dV += P^T dO starts while dS^T is computed.
    p_op = gl.convert_layout(pt.to(k_c.dtype), gl.DotOperandLayout(operand_index=0, parent=dv_layout, k_width=2))
    dv_tok = warpgroup_mma(p_op, do, dv, is_async=True)
    delta = delta_smem.index(st).load(col_layout)
    # wgmma groups retire in order: with one left outstanding (the dV one), dP^T is done.
    dpt = warpgroup_mma_wait(num_outstanding=1, deps=(dp_tok, ))
    dst = pt * (dpt - delta[None, :])
    ds_op = gl.convert_layout(dst.to(k_c.dtype), gl.DotOperandLayout(operand_index=0, parent=dk_layout, k_width=2))
    dk_tok = warpgroup_mma(ds_op, q, dk, is_async=True)
    dv, dk, p_op, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dv_tok, dk_tok, p_op, ds_op))
    mbarrier.arrive(empty.index(st), count=1)
    return dk, dv


@gluon.jit
def _dkdv_consumer(CID: gl.constexpr, dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, delta_smem, kv_bar,
                   ready, empty, qk_scale, sm_scale, kv_row, k_col, v_col, n0, diff, group, m_lo, n_diag, n_blocks,
                   HEAD_DIM: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                   ROWS: gl.constexpr, CAUSAL: gl.constexpr):
    NW: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    dk_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    dv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                        instr_shape=[16, HEAD_DV, 16])
    keys = n0 + CID * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    k_c = k_smem.index(CID)
    v_c = v_smem.index(CID)
    dk = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=dk_layout)
    dv = gl.zeros([ROWS, HEAD_DV], gl.float32, layout=dv_layout)
    mbarrier.wait(kv_bar, 0)
    t = 0
    for g in range(group):
        if CAUSAL:
            for i in range(n_diag):
                dk, dv = _dkdv_step(t, m_lo + i * BLOCK_M, k_c, v_c, q_smem, do_smem, lse_smem, delta_smem, ready,
                                    empty, dk, dv, qk_scale, keys, diff, True, STAGES, BLOCK_M, s_layout, dk_layout,
                                    dv_layout)
                t += 1
        for i in range(n_diag, n_blocks):
            dk, dv = _dkdv_step(t, m_lo + i * BLOCK_M, k_c, v_c, q_smem, do_smem, lse_smem, delta_smem, ready, empty,
                                dk, dv, qk_scale, keys, diff, False, STAGES, BLOCK_M, s_layout, dk_layout, dv_layout)
            t += 1
    # The K and V slots are this consumer's staging buffers now: their last readers (the final
    # S^T and dP^T wgmma) have retired. Generic-proxy stores, a fence, then the TMA stores.
    k_c.store((dk * sm_scale).to(k_c.dtype))
    v_c.store(dv.to(v_c.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [kv_row + CID * ROWS, k_col], k_c)
    tma.async_copy_shared_to_global(dv_desc, [kv_row + CID * ROWS, v_col], v_c)
    tma.store_wait(pendings=0)


@gluon.jit
def dkdv_key_tile(num_heads_k, seqlen_q, seqlen_k, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """This program's batch b, KV head hk and first key n0, and the query blocks that see its keys:
    n_blocks blocks of BLOCK_M rows from row m_lo, the first n_diag of them on the causal diagonal
    (masked). diff = seqlen_k - seqlen_q puts the diagonal at the bottom right."""
    if CAUSAL:
        # Grid (slices, key tiles): every slice's first key tiles (those that see the most
        # queries) start in the first waves.
        pid_bh = gl.program_id(0)
        pid_n = gl.program_id(1)
    else:
        pid_n = gl.program_id(0)
        pid_bh = gl.program_id(1)
    b = pid_bh // num_heads_k
    hk = pid_bh % num_heads_k
    n0 = pid_n * BLOCK_N
    diff = seqlen_k - seqlen_q
    if CAUSAL:
        # Queries that see key n0 start at n0 - diff (a multiple of 128 here); those before
        # n0 + BLOCK_N - diff miss some keys of the tile (the diagonal blocks, masked).
        m_lo = gl.maximum(n0 - diff, 0)
        m_full = gl.minimum(gl.maximum(n0 + BLOCK_N - diff, 0), seqlen_q)
        n_diag = (m_full - m_lo) // BLOCK_M
    else:
        m_lo = 0
        n_diag = 0
    n_blocks = (seqlen_q - m_lo) // BLOCK_M
    return b, hk, n0, diff, m_lo, n_diag, n_blocks


@gluon.jit
def dkdv_barriers(STAGES: gl.constexpr, NUM_CONSUMERS: gl.constexpr):
    """kv_bar: the K/V tile has landed; ready[i] / empty[i]: ring slot i filled by the loader /
    released by every consumer."""
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=NUM_CONSUMERS)
    return kv_bar, ready, empty


@gluon.jit(do_not_specialize=DKDV_DO_NOT_SPECIALIZE)
def attn_bwd_dkdv_gluon(q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, lse_desc, delta_desc, qk_scale, sm_scale,
                        seqlen_q, seqlen_k, num_heads_k, group,
                        HEAD_DIM: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_M: gl.constexpr,
                        BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                        NUM_CONSUMERS: gl.constexpr, LOADER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    ROWS: gl.constexpr = BLOCK_N // NUM_CONSUMERS
    dtype: gl.constexpr = k_desc.dtype
    b, hk, n0, diff, m_lo, n_diag, n_blocks = dkdv_key_tile(num_heads_k, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, CAUSAL)
    kv_row = b * seqlen_k + n0
    k_col = hk * HEAD_DIM
    v_col = hk * HEAD_DV
    q_row0 = b * seqlen_q
    hq0 = hk * group
    lse_b = b * num_heads_k * group

    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DV], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, HEAD_DV], v_desc.layout)
    lse_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], lse_desc.layout)
    delta_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], delta_desc.layout)
    kv_bar, ready, empty = dkdv_barriers(STAGES, NUM_CONSUMERS)

    gl.warp_specialize([
        (_dkdv_consumer, (0, dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, delta_smem, kv_bar,
                          ready, empty, qk_scale, sm_scale, kv_row, k_col, v_col, n0, diff, group, m_lo, n_diag,
                          n_blocks, HEAD_DIM, HEAD_DV, BLOCK_M, STAGES, ROWS, CAUSAL)),
        (_dkdv_consumer, (1, dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, delta_smem, kv_bar,
                          ready, empty, qk_scale, sm_scale, kv_row, k_col, v_col, n0, diff, group, m_lo, n_diag,
                          n_blocks, HEAD_DIM, HEAD_DV, BLOCK_M, STAGES, ROWS, CAUSAL)),
        (_dkdv_loader, (q_desc, do_desc, k_desc, v_desc, lse_desc, delta_desc, q_smem, do_smem, k_smem, v_smem,
                        lse_smem, delta_smem, kv_bar, ready, empty, kv_row, k_col, v_col, q_row0, hq0, lse_b,
                        seqlen_q, group, m_lo, n_blocks, HEAD_DIM, HEAD_DV, BLOCK_M, STAGES, NUM_CONSUMERS, ROWS)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


# ----------------------------------------------------------------------------- dQ

@gluon.jit
def _dq_loader(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready,
               v_empty, q_row, q_col, do_col, kv_row, k_col, v_col, n_total,
               NUM_CONSUMERS: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    mbarrier.expect(q_bar, NUM_CONSUMERS * (q_desc.block_type.nbytes + do_desc.block_type.nbytes))
    for c in gl.static_range(NUM_CONSUMERS):
        tma.async_copy_global_to_shared(q_desc, [q_row + c * ROWS, q_col], q_bar, q_smem.index(c))
        tma.async_copy_global_to_shared(do_desc, [q_row + c * ROWS, do_col], q_bar, do_smem.index(c))
    for j in range(n_total):
        st = j % STAGES
        ph = (j // STAGES) & 1
        # V first: dP = dO V^T is the first product a consumer can finish.
        mbarrier.wait(v_empty.index(st), ph ^ 1)
        mbarrier.expect(v_ready.index(st), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [kv_row + j * BLOCK_N, v_col], v_ready.index(st), v_smem.index(st))
        mbarrier.wait(k_empty.index(st), ph ^ 1)
        mbarrier.expect(k_ready.index(st), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, k_col], k_ready.index(st), k_smem.index(st))


@gluon.jit
def _dq_step(j, q, do, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, dq, lse2, delta, qk_scale, rows, cols0,
             diag_off, MASK: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
             s_layout: gl.constexpr, dq_layout: gl.constexpr):
    R: gl.constexpr = q.shape[0]
    st = j % STAGES
    ph = (j // STAGES) & 1
    k = k_smem.index(st)
    mbarrier.wait(k_ready.index(st), ph)
    zero = gl.zeros([R, BLOCK_N], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(q, k.permute((1, 0)), zero, use_acc=False, is_async=True)
    mbarrier.wait(v_ready.index(st), ph)
    dp_tok = warpgroup_mma(do, v_smem.index(st).permute((1, 0)), zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    p = gl.exp2(s * qk_scale - lse2[:, None])
    if MASK:
        keep = (j * BLOCK_N + cols0)[None, :] <= (rows + diag_off)[:, None]
        p = gl.where(keep, p, 0.0)
    dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp_tok, ))
    mbarrier.arrive(v_empty.index(st), count=1)
    ds = p * (dp - delta[:, None])
    ds_op = gl.convert_layout(ds.to(q.dtype), gl.DotOperandLayout(operand_index=0, parent=dq_layout, k_width=2))
    dq_tok = warpgroup_mma(ds_op, k, dq, is_async=True)
    dq, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ds_op))
    mbarrier.arrive(k_empty.index(st), count=1)
    return dq


@gluon.jit
def _dq_consumer(CID: gl.constexpr, dq_desc, q_smem, do_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
                 Lse, Delta, qk_scale, sm_scale, q_row, q_col, lse_off, m0, diag_off, n_full, n_total,
                 ROWS: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                 CAUSAL: gl.constexpr):
    NW: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    rows = m0 + CID * ROWS + gl.arange(0, ROWS, layout=row_layout)
    cols0 = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    # A thread holds few rows of the accumulator: lse and delta cost it a couple of registers.
    lse2 = gl.load(Lse + lse_off + rows) * LOG2E
    delta = gl.load(Delta + lse_off + rows)
    q = q_smem.index(CID)
    do = do_smem.index(CID)
    dq = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=dq_layout)
    mbarrier.wait(q_bar, 0)
    for j in range(0, n_full):
        dq = _dq_step(j, q, do, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, dq, lse2, delta, qk_scale, rows,
                      cols0, diag_off, False, STAGES, BLOCK_N, s_layout, dq_layout)
    if CAUSAL:
        for j in range(n_full, n_total):
            dq = _dq_step(j, q, do, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, dq, lse2, delta, qk_scale,
                          rows, cols0, diag_off, True, STAGES, BLOCK_N, s_layout, dq_layout)
    # This consumer's Q slot is its staging buffer now (its last reader, the final S wgmma, has
    # retired): generic-proxy stores, a fence, then the TMA store.
    q.store((dq * sm_scale).to(q.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dq_desc, [q_row + CID * ROWS, q_col], q)
    tma.store_wait(pendings=0)


@gluon.jit(do_not_specialize=DQ_DO_NOT_SPECIALIZE)
def attn_bwd_dq_gluon(q_desc, do_desc, k_desc, v_desc, dq_desc, Lse, Delta, qk_scale, sm_scale, seqlen_q, seqlen_k,
                      num_heads_q, group,
                      HEAD_DIM: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                      STAGES: gl.constexpr, CAUSAL: gl.constexpr, NUM_CONSUMERS: gl.constexpr,
                      LOADER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    ROWS: gl.constexpr = BLOCK_M // NUM_CONSUMERS
    dtype: gl.constexpr = q_desc.dtype
    if CAUSAL:
        # as the forward: the longest query tiles (the last ones) first
        pid_bh = gl.program_id(0)
        pid_m = gl.num_programs(1) - 1 - gl.program_id(1)
    else:
        pid_m = gl.program_id(0)
        pid_bh = gl.program_id(1)
    b = pid_bh // num_heads_q
    h = pid_bh % num_heads_q
    hk = h // group
    m0 = pid_m * BLOCK_M
    q_row = b * seqlen_q + m0
    kv_row = b * seqlen_k
    lse_off = pid_bh * seqlen_q
    diag_off = seqlen_k - seqlen_q
    n_full, n_total = query_tile_key_blocks(m0, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, CAUSAL)

    q_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, HEAD_DV], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DV], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=NUM_CONSUMERS)
        mbarrier.init(v_empty.index(i), count=NUM_CONSUMERS)

    gl.warp_specialize([
        (_dq_consumer, (0, dq_desc, q_smem, do_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
                        Lse, Delta, qk_scale, sm_scale, q_row, h * HEAD_DIM, lse_off, m0, diag_off, n_full, n_total,
                        ROWS, HEAD_DIM, BLOCK_N, STAGES, CAUSAL)),
        (_dq_consumer, (1, dq_desc, q_smem, do_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
                        Lse, Delta, qk_scale, sm_scale, q_row, h * HEAD_DIM, lse_off, m0, diag_off, n_full, n_total,
                        ROWS, HEAD_DIM, BLOCK_N, STAGES, CAUSAL)),
        (_dq_loader, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, q_bar, k_ready, k_empty,
                      v_ready, v_empty, q_row, h * HEAD_DIM, h * HEAD_DV, kv_row, hk * HEAD_DIM, hk * HEAD_DV,
                      n_total, NUM_CONSUMERS, ROWS, BLOCK_N, STAGES)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


# ----------------------------------------------------------------------------- host side
def dkdv_signature_types(dtype: str, head_dim: int, block_m: int) -> dict:
    """Descriptor argument types of attn_bwd_dkdv_gluon: q/do boxes of BLOCK_M rows, k/v/dk/dv
    boxes of one consumer's 64 keys, lse/delta boxes of BLOCK_M floats."""
    q_type = desc_type(dtype, (block_m, head_dim))
    k_type = desc_type(dtype, (DKDV_KEYS // NUM_CONSUMERS, head_dim))
    row_type = desc_type("fp32", (block_m,))
    return {"q_desc": q_type, "do_desc": q_type, "k_desc": k_type, "v_desc": k_type, "dk_desc": k_type,
            "dv_desc": k_type, "lse_desc": row_type, "delta_desc": row_type}


def dq_signature_types(dtype: str, head_dim: int, block_n: int) -> dict:
    """Descriptor argument types of attn_bwd_dq_gluon: q/do/dq boxes of one consumer's 64 rows,
    k/v boxes of BLOCK_N keys."""
    q_type = desc_type(dtype, (DQ_ROWS // NUM_CONSUMERS, head_dim))
    k_type = desc_type(dtype, (block_n, head_dim))
    return {"q_desc": q_type, "do_desc": q_type, "k_desc": k_type, "v_desc": k_type, "dq_desc": q_type}


def _common_constexprs(head_dim: int, stages: int, causal: bool) -> dict:
    return {"HEAD_DIM": head_dim, "HEAD_DV": head_dim, "STAGES": stages, "CAUSAL": causal,
            "NUM_CONSUMERS": NUM_CONSUMERS, "LOADER_REGS": LOADER_REGS, "CONSUMER_REGS": CONSUMER_REGS}


def dkdv_constexprs(head_dim: int, block_m: int, stages: int, causal: bool) -> dict:
    return _common_constexprs(head_dim, stages, causal) | {"BLOCK_M": block_m, "BLOCK_N": DKDV_KEYS}


def dq_constexprs(head_dim: int, block_n: int, stages: int, causal: bool) -> dict:
    return _common_constexprs(head_dim, stages, causal) | {"BLOCK_M": DQ_ROWS, "BLOCK_N": block_n}


def row_desc(t: torch.Tensor, block_m: int) -> TensorDescriptor:
    """A descriptor over contiguous float32 (B, H, S) `t` as one row of B*H*S, boxes of block_m."""
    flat = t.view(-1)
    return TensorDescriptor(flat, [flat.numel()], [1], [block_m], shared_layout("fp32", (block_m,)))


def dkdv_descriptors(q, k, v, do, dk, dv, lse, delta, dtype: str, block_m: int):
    keys = DKDV_KEYS // NUM_CONSUMERS
    return (matrix_desc(q, dtype, block_m), matrix_desc(do, dtype, block_m), matrix_desc(k, dtype, keys),
            matrix_desc(v, dtype, keys), matrix_desc(dk, dtype, keys), matrix_desc(dv, dtype, keys),
            row_desc(lse, block_m), row_desc(delta, block_m))


def dq_descriptors(q, k, v, do, dq, dtype: str, block_n: int):
    rows = DQ_ROWS // NUM_CONSUMERS
    return (matrix_desc(q, dtype, rows), matrix_desc(do, dtype, rows), matrix_desc(k, dtype, block_n),
            matrix_desc(v, dtype, block_n), matrix_desc(dq, dtype, rows))
