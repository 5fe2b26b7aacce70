"""Lab: the dK/dV kernel of the backward in Triton's Gluon dialect for Hopper (sm90), in the
design of the product's Gluon forward (mha.kernels.forward_gluon), turned around.

One program = one 128-key tile of one (batch, KV head), three partitions (gl.warp_specialize):
- two consumer warpgroups (4 warps each), keys [0, 64) and [64, 128) of the tile; each keeps
  its keys' dK and dV accumulators (64 x D float32) in registers for the whole program;
- a loader warp: K and V of the tile once, then Q and dO blocks of BLOCK_M query rows through
  TMA into a STAGES-deep ring over the query heads of the GQA group and the query blocks of the
  key tile's band, each slot guarded by a "ready" mbarrier (TMA byte count) and an "empty" one
  (one arrive per consumer).
A consumer step, for a query block: S^T = K_c Q^T and dP^T = V_c dO^T as two async wgmma, then
P^T = exp2(S^T * scale - lse) (masked on the diagonal blocks only), dS^T = P^T (dP^T - delta),
and dV += P^T dO, dK += dS^T Q with P^T and dS^T as register A operands. The epilogue stores
dK * sm_scale and dV through the consumer's K and V slots and TMA stores.

What the host must guarantee: q/do (B, Sq, Hq, D), k/v/dk/dv (B, Sk, Hk, D) contiguous fp16/bf16,
Sq and Sk multiples of 128, Hq % Hk == 0, lse and delta float32 (B, Hq, Sq) contiguous, lse the
natural-log row logsumexp of the forward, delta = rowsum(dO * O); for causal Sk >= Sq.
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

# Two consumer warpgroups and a loader warp, as the product's Gluon forward: its register budget.
from mha.kernels.forward_gluon import CONSUMER_REGS, LOADER_REGS, MAXNREG, NUM_CONSUMERS  # noqa: E402

BLOCK_N = 128          # keys per program
ROWS = BLOCK_N // NUM_CONSUMERS
DO_NOT_SPECIALIZE = ("seqlen_q", "seqlen_k", "num_heads_k", "group")

LOG2E: gl.constexpr = gl.constexpr(1.4426950408889634)


@gluon.jit
def _loader(q_desc, do_desc, k_desc, v_desc, lse_desc, delta_desc, q_smem, do_smem, k_smem, v_smem, lse_smem,
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
def _step(t, m, k_c, v_c, q_smem, do_smem, lse_smem, delta_smem, ready, empty, dk, dv, qk_scale, keys, diff,
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
def _consumer(CID: gl.constexpr, dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, delta_smem, kv_bar,
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
                dk, dv = _step(t, m_lo + i * BLOCK_M, k_c, v_c, q_smem, do_smem, lse_smem, delta_smem, ready,
                               empty, dk, dv, qk_scale, keys, diff, True, STAGES, BLOCK_M, s_layout, dk_layout,
                               dv_layout)
                t += 1
        for i in range(n_diag, n_blocks):
            dk, dv = _step(t, m_lo + i * BLOCK_M, k_c, v_c, q_smem, do_smem, lse_smem, delta_smem, ready, empty,
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


@gluon.jit(do_not_specialize=DO_NOT_SPECIALIZE)
def attn_bwd_dkdv_gluon(q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, lse_desc, delta_desc, qk_scale, sm_scale,
                        seqlen_q, seqlen_k, num_heads_k, group,
                        HEAD_DIM: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_M: gl.constexpr,
                        BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                        NUM_CONSUMERS: gl.constexpr, LOADER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    ROWS: gl.constexpr = BLOCK_N // NUM_CONSUMERS
    dtype: gl.constexpr = k_desc.dtype
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
    kv_row = b * seqlen_k + n0
    k_col = hk * HEAD_DIM
    v_col = hk * HEAD_DV
    q_row0 = b * seqlen_q
    hq0 = hk * group
    lse_b = b * num_heads_k * group
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

    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DV], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, HEAD_DV], v_desc.layout)
    lse_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], lse_desc.layout)
    delta_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], delta_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=NUM_CONSUMERS)

    gl.warp_specialize([
        (_consumer, (0, dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, delta_smem, kv_bar, ready,
                     empty, qk_scale, sm_scale, kv_row, k_col, v_col, n0, diff, group, m_lo, n_diag, n_blocks, HEAD_DIM, HEAD_DV, BLOCK_M, STAGES, ROWS, CAUSAL)),
        (_consumer, (1, dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, delta_smem, kv_bar, ready,
                     empty, qk_scale, sm_scale, kv_row, k_col, v_col, n0, diff, group, m_lo, n_diag, n_blocks, HEAD_DIM, HEAD_DV, BLOCK_M, STAGES, ROWS, CAUSAL)),
        (_loader, (q_desc, do_desc, k_desc, v_desc, lse_desc, delta_desc, q_smem, do_smem, k_smem, v_smem, lse_smem,
                   delta_smem, kv_bar, ready, empty, kv_row, k_col, v_col, q_row0, hq0, lse_b, seqlen_q, group, m_lo,
                   n_blocks, HEAD_DIM, HEAD_DV, BLOCK_M, STAGES,
                   NUM_CONSUMERS, ROWS)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


# ----------------------------------------------------------------------------- host side
GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


def layout(rows: int, dim: int, el):
    return gl.NVMMASharedLayout.get_default_for([rows, dim], el)


def row_layout(block_m: int):
    return gl.NVMMASharedLayout.get_default_for([block_m], gl.float32)


def row_desc(t, block_m: int):
    """A descriptor over a float32 (B, H, S) tensor seen as one row of B*H*S, boxes of block_m."""
    flat = t.view(-1)
    return TensorDescriptor(flat, [flat.numel()], [1], [block_m], row_layout(block_m))


def run(q, k, v, do, lse, delta, causal: bool, sm_scale: float, block_m: int = 64, stages: int = 2):
    """dK, dV for contiguous (B, S, H, D) q/k/v/do and (B, Hq, Sq) float32 lse/delta."""
    batch, seqlen_q, heads_q, d = q.shape
    seqlen_k, heads_k, dv_ = k.shape[1], k.shape[2], v.shape[3]
    el = GL_DTYPES[q.dtype]
    dk, dv = torch.empty_like(k), torch.empty_like(v)

    def desc(t, length, heads, dim, box):
        flat = t.view(batch * length, heads * dim)
        return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [box, dim], layout(box, dim, el))

    descs = (desc(q, seqlen_q, heads_q, d, block_m), desc(do, seqlen_q, heads_q, dv_, block_m),
             desc(k, seqlen_k, heads_k, d, ROWS), desc(v, seqlen_k, heads_k, dv_, ROWS),
             desc(dk, seqlen_k, heads_k, d, ROWS), desc(dv, seqlen_k, heads_k, dv_, ROWS),
             row_desc(lse, block_m), row_desc(delta, block_m))
    tiles = seqlen_k // BLOCK_N
    grid = (batch * heads_k, tiles) if causal else (tiles, batch * heads_k)
    attn_bwd_dkdv_gluon[grid](*descs, sm_scale * 1.4426950408889634, sm_scale, seqlen_q, seqlen_k,
                              heads_k, heads_q // heads_k, HEAD_DIM=d, HEAD_DV=dv_, BLOCK_M=block_m, BLOCK_N=BLOCK_N,
                              STAGES=stages, CAUSAL=causal, NUM_CONSUMERS=NUM_CONSUMERS, LOADER_REGS=LOADER_REGS,
                              CONSUMER_REGS=CONSUMER_REGS, num_warps=4, maxnreg=MAXNREG)
    return dk, dv
