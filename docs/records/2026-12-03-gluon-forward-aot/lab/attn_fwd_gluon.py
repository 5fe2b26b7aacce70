"""Prototype attention forward in Triton's Gluon dialect for Hopper (sm90), FA3-style.

Written against Triton 3.8.0 (triton.experimental.gluon). Not part of the product; a lab kernel
(docs/records/2026-12-03-gluon-forward-aot/README.md says what was checked and what was not).

Design (one CTA = one 128-row query tile of one (batch, q-head)):
- gl.warp_specialize with three partitions:
    default  : consumer warpgroup 0 (4 warps), query rows [0, 64) of the tile
    worker 0 : consumer warpgroup 1 (4 warps), query rows [64, 128)
    worker 1 : loader (1 warp): TMA loads of Q (once) and of K/V blocks into a STAGES-deep
               ring, each slot guarded by a "ready" mbarrier (TMA tx-count) and an "empty"
               mbarrier (one arrive per consumer).
  NUM_CONSUMERS=1 gives the first step: one consumer partition of 4 warps owning all 128 rows.
- K and V have separate rings (own ready/empty barriers) so QK^T of a block can start before
  its V has landed, and a K slot is handed back as soon as QK^T has read it.
- Consumers use async warpgroup_mma. Iteration j issues S_j = Q K_j^T and O += P_{j-1} V_{j-1}
  back to back, waits only for S_j (wait(1)), runs the softmax of block j while the PV wgmma of
  block j-1 is still running, then waits for the PV and rescales O. P stays in registers: it
  is the A operand of the PV wgmma in a DotOperandLayout whose parent is O's wgmma layout.
- Online softmax in the log2 domain: the scale is folded with log2(e) (qk_scale), exp2 only.
  lse is written in natural log (flash-attn convention): (m + log2(l)) * ln(2).
- Causal (bottom-right aligned like flash-attn / mha: query i sees keys <= i + Sk - Sq):
  key blocks wholly left of the tile's diagonal run in an unmasked loop, the 1-2 blocks that
  cross the diagonal in a masked loop; blocks right of the diagonal are not loaded at all.
- Epilogue: O / l goes to shared memory (the consumer's own Q slot, free by then) and out
  through a TMA store; lse through a plain store.

Tensor layout: q (B, Sq, Hq, D), k/v (B, Sk, Hk, D), contiguous, bf16 or fp16, Hq % Hk == 0,
D in {64, 128}. Descriptors see q/k/v/o as 2-D (B*S, H*D) matrices: a [rows, D] box at
(b*S + s, h*D) is one head's rows. That is why Sq and Sk must be multiples of 128 (a tile may
not straddle two batches: the box would read the next batch's rows instead of zero padding).
"""
import math

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

LOG2E = 1.4426950408889634
LN2: gl.constexpr = gl.constexpr(0.6931471805599453)
BLOCK_M = 128


# ----------------------------------------------------------------------------- loader partition
@gluon.jit
def _loader(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
            q_row, q_col, kv_row, kv_col, n_total,
            NUM_CONSUMERS: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    # Q: one box per consumer, one barrier for all (both consumers start together anyway).
    mbarrier.expect(q_bar, NUM_CONSUMERS * q_desc.block_type.nbytes)
    for c in gl.static_range(NUM_CONSUMERS):
        tma.async_copy_global_to_shared(q_desc, [q_row + c * ROWS, q_col], q_bar, q_smem.index(c))
    for j in range(n_total):
        st = j % STAGES
        ph = (j // STAGES) & 1
        # A fresh mbarrier counts as having completed the phase before phase 0, so the first
        # round (ph = 0) waits for parity 1 and passes at once: all slots start empty.
        mbarrier.wait(k_empty.index(st), ph ^ 1)
        mbarrier.expect(k_ready.index(st), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, kv_col], k_ready.index(st), k_smem.index(st))
        mbarrier.wait(v_empty.index(st), ph ^ 1)
        mbarrier.expect(v_ready.index(st), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [kv_row + j * BLOCK_N, kv_col], v_ready.index(st), v_smem.index(st))


# ----------------------------------------------------------------------------- consumer partition
@gluon.jit
def _step(j, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, acc, p_op, m_i, l_i, qk_scale,
          rows, cols0, diag_off,
          MASK: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
          s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr):
    """Key block j: S_j = Q K_j^T, O += P_{j-1} V_{j-1}, softmax of S_j overlapping that PV."""
    ROWS: gl.constexpr = q.shape[0]
    st = j % STAGES
    ph = (j // STAGES) & 1
    pj = j - 1
    pst = pj % STAGES
    pph = (pj // STAGES) & 1

    mbarrier.wait(k_ready.index(st), ph)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(q, k_smem.index(st).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    mbarrier.wait(v_ready.index(pst), pph)
    acc_tok = warpgroup_mma(p_op, v_smem.index(pst), acc, is_async=True)
    # wgmma groups retire in order: with one left outstanding, S_j is done, PV_{j-1} may run on.
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    mbarrier.arrive(k_empty.index(st), count=1)

    s = s * qk_scale
    if MASK:
        keep = (j * BLOCK_N + cols0)[None, :] <= (rows + diag_off)[:, None]
        s = gl.where(keep, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1))
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    p_new = gl.convert_layout(p.to(q.dtype), p_layout)

    # p_op is a dependency of the wait so its registers stay untouched until the wgmma reading
    # them has retired.
    acc, p_old = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, p_op))
    mbarrier.arrive(v_empty.index(pst), count=1)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    return acc, p_new, m_new, l_i


@gluon.jit
def _consumer(CID: gl.constexpr, o_desc, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Lse,
              qk_scale, q_row, q_col, lse_off, m0, diag_off, n_full, n_total,
              ROWS: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              CAUSAL: gl.constexpr):
    NW: gl.constexpr = gl.num_warps()
    # wgmma accumulator layouts: m16 x n x k16 (16-bit inputs), warps stacked along rows.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    # P as the register A operand of the PV wgmma (k_width: 2 16-bit elements per 32 bits).
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)

    q = q_smem.index(CID)
    rows = m0 + CID * ROWS + gl.arange(0, ROWS, layout=row_layout)   # query positions
    cols0 = gl.arange(0, BLOCK_N, layout=col_layout)

    # Block 0 alone: nothing to overlap with yet. Masked when causal (a no-op unless block 0 is
    # on the diagonal; cheaper than a run-time branch between two prologues).
    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_ready.index(0), 0)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
    mbarrier.arrive(k_empty.index(0), count=1)
    s = s * qk_scale
    if CAUSAL:
        s = gl.where(cols0[None, :] <= (rows + diag_off)[:, None], s, float("-inf"))
    m_i = gl.max(s, axis=1)
    p = gl.exp2(s - m_i[:, None])
    l_i = gl.sum(p, axis=1)
    p_op = gl.convert_layout(p.to(q.dtype), p_layout)
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=o_layout)

    # Off-band blocks: no mask.
    for j in range(1, n_full):
        acc, p_op, m_i, l_i = _step(j, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, acc, p_op, m_i, l_i,
                                    qk_scale, rows, cols0, diag_off, False, STAGES, BLOCK_N, s_layout, o_layout,
                                    p_layout)
    if CAUSAL:
        # Diagonal blocks: masked.
        for j in range(gl.maximum(n_full, 1), n_total):
            acc, p_op, m_i, l_i = _step(j, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, acc, p_op, m_i,
                                        l_i, qk_scale, rows, cols0, diag_off, True, STAGES, BLOCK_N, s_layout,
                                        o_layout, p_layout)

    # Last PV.
    last = n_total - 1
    lst = last % STAGES
    mbarrier.wait(v_ready.index(lst), (last // STAGES) & 1)
    acc_tok = warpgroup_mma(p_op, v_smem.index(lst), acc, is_async=True)
    acc, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, p_op))
    mbarrier.arrive(v_empty.index(lst), count=1)

    # lse (natural log) per row; every causal row sees key 0.. so l_i > 0 here.
    lse = (m_i + gl.log2(l_i)) * LN2
    gl.store(Lse + lse_off + rows, lse)

    out = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    # Reuse this consumer's Q slot as the O staging buffer: its last reader (the final QK^T
    # wgmma) has retired. Generic-proxy stores, then a fence before the async-proxy TMA store.
    q.store(out.to(q.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [q_row + CID * ROWS, q_col], q)
    tma.store_wait(pendings=0)


# ----------------------------------------------------------------------------- kernel
@gluon.jit
def attn_fwd_kernel(q_desc, k_desc, v_desc, o_desc, Lse, qk_scale, seqlen_q, seqlen_k, num_heads_q, group,
                    HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                    CAUSAL: gl.constexpr, NUM_CONSUMERS: gl.constexpr, LOADER_REGS: gl.constexpr,
                    CONSUMER_REGS: gl.constexpr):
    ROWS: gl.constexpr = BLOCK_M // NUM_CONSUMERS
    dtype: gl.constexpr = q_desc.dtype
    pid_m = gl.program_id(0)
    pid_bh = gl.program_id(1)
    b = pid_bh // num_heads_q
    h = pid_bh % num_heads_q
    hk = h // group                       # GQA: q-heads [hk*group, (hk+1)*group) share K/V head hk
    m0 = pid_m * BLOCK_M
    q_row = b * seqlen_q + m0
    q_col = h * HEAD_DIM
    kv_row = b * seqlen_k
    kv_col = hk * HEAD_DIM
    lse_off = pid_bh * seqlen_q            # lse is (B, Hq, Sq)
    diag_off = seqlen_k - seqlen_q          # bottom-right aligned causal diagonal
    if CAUSAL:
        # Blocks wholly visible to row m0 (hence to all rows of the tile), then up to the last
        # key row m0 + BLOCK_M - 1 can see.
        n_full = (m0 + diag_off) // BLOCK_N
        n_total = (m0 + diag_off + BLOCK_M) // BLOCK_N
    else:
        n_full = seqlen_k // BLOCK_N
        n_total = n_full

    q_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        # one arrive per consumer partition frees a slot
        mbarrier.init(k_empty.index(i), count=NUM_CONSUMERS)
        mbarrier.init(v_empty.index(i), count=NUM_CONSUMERS)

    # Argument tuples are written out at each call: a tuple assigned to a name first has its
    # constexprs turned into int32 scalars (Triton 3.8 assignment semantics).
    if NUM_CONSUMERS == 2:
        gl.warp_specialize([
            (_consumer, (0, o_desc, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Lse, qk_scale,
                         q_row, q_col, lse_off, m0, diag_off, n_full, n_total, ROWS, HEAD_DIM, BLOCK_N, STAGES,
                         CAUSAL)),
            (_consumer, (1, o_desc, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Lse, qk_scale,
                         q_row, q_col, lse_off, m0, diag_off, n_full, n_total, ROWS, HEAD_DIM, BLOCK_N, STAGES,
                         CAUSAL)),
            (_loader, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
                       q_row, q_col, kv_row, kv_col, n_total, NUM_CONSUMERS, ROWS, BLOCK_N, STAGES)),
        ], [4, 1], [CONSUMER_REGS, LOADER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (0, o_desc, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Lse, qk_scale,
                         q_row, q_col, lse_off, m0, diag_off, n_full, n_total, ROWS, HEAD_DIM, BLOCK_N, STAGES,
                         CAUSAL)),
            (_loader, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
                       q_row, q_col, kv_row, kv_col, n_total, NUM_CONSUMERS, ROWS, BLOCK_N, STAGES)),
        ], [1], [LOADER_REGS])


# ----------------------------------------------------------------------------- host side
# Per-head-dim defaults (BLOCK_N, STAGES): see the README's table for what each compiles to.
DEFAULTS = {64: (128, 3), 128: (128, 2)}
REGISTER_FILE = 65536


def launch_options(num_consumers):
    """(num_warps, maxnreg, loader_regs, consumer_regs). Registers are given per warpgroup: 4
    consumer warps + 1 loader warp (a warpgroup of its own) = 3 warpgroups for 2 consumers, 2 for
    one. maxnreg * threads must fit the 64K register file; setmaxnreg then moves registers from
    the loader to the consumers (FA3: 24-ish for the producer, 240 for the consumers)."""
    groups = num_consumers + 1
    maxnreg = (REGISTER_FILE // (groups * 128)) // 8 * 8
    loader_regs = 24
    consumer_regs = 240 if num_consumers == 2 else 256 - 8
    return 4, maxnreg, loader_regs, consumer_regs


def gl_dtype(torch_dtype):
    return {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}[torch_dtype]


def make_descs(q, k, v, o, rows_per_consumer, block_n):
    """TMA descriptors over the (B*S, H*D) views (see the module docstring)."""
    B, Sq, Hq, D = q.shape
    _, Sk, Hk, _ = k.shape
    el = gl_dtype(q.dtype)
    q_layout = gl.NVMMASharedLayout.get_default_for([rows_per_consumer, D], el)
    kv_layout = gl.NVMMASharedLayout.get_default_for([block_n, D], el)
    q2, o2 = q.view(B * Sq, Hq * D), o.view(B * Sq, Hq * D)
    k2, v2 = k.view(B * Sk, Hk * D), v.view(B * Sk, Hk * D)
    q_desc = TensorDescriptor(q2, list(q2.shape), list(q2.stride()), [rows_per_consumer, D], q_layout)
    o_desc = TensorDescriptor(o2, list(o2.shape), list(o2.stride()), [rows_per_consumer, D], q_layout)
    k_desc = TensorDescriptor(k2, list(k2.shape), list(k2.stride()), [block_n, D], kv_layout)
    v_desc = TensorDescriptor(v2, list(v2.shape), list(v2.stride()), [block_n, D], kv_layout)
    return q_desc, k_desc, v_desc, o_desc


def attention(q, k, v, causal=False, sm_scale=None, block_n=None, stages=None, num_consumers=2):
    """(out (B, Sq, Hq, D), lse (B, Hq, Sq) float32) for q (B, Sq, Hq, D), k/v (B, Sk, Hk, D)."""
    B, Sq, Hq, D = q.shape
    Bk, Sk, Hk, Dk = k.shape
    assert q.dtype in (torch.bfloat16, torch.float16) and k.dtype == q.dtype and v.dtype == q.dtype
    assert v.shape == k.shape and Bk == B and Dk == D, "dense, Dqk == Dv only"
    assert D in (64, 128), "head dims 64 and 128 only"
    assert Hq % Hk == 0, "GQA needs Hq a multiple of Hk"
    assert Sq % BLOCK_M == 0 and Sk % BLOCK_M == 0, "Sq and Sk must be multiples of 128 (prototype)"
    assert not causal or Sk >= Sq, "causal needs Sk >= Sq (no fully masked rows in this prototype)"
    assert num_consumers in (1, 2)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    dn, ds = DEFAULTS[D]
    block_n = block_n or dn
    stages = stages or ds
    o = torch.empty_like(q)
    lse = torch.empty((B, Hq, Sq), device=q.device, dtype=torch.float32)
    rows = BLOCK_M // num_consumers
    q_desc, k_desc, v_desc, o_desc = make_descs(q, k, v, o, rows, block_n)
    num_warps, maxnreg, loader_regs, consumer_regs = launch_options(num_consumers)
    grid = (Sq // BLOCK_M, B * Hq)
    attn_fwd_kernel[grid](q_desc, k_desc, v_desc, o_desc, lse, sm_scale * LOG2E, Sq, Sk, Hq, Hq // Hk,
                          HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=block_n, STAGES=stages, CAUSAL=causal,
                          NUM_CONSUMERS=num_consumers, LOADER_REGS=loader_regs, CONSUMER_REGS=consumer_regs,
                          num_warps=num_warps, maxnreg=maxnreg)
    return o, lse
