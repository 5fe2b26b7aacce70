"""Lab: the product's Gluon backward kernels (mha.kernels.backward_gluon) for the `pe` bucket's
Dqk 192 / Dv 128 problems, with the q/k head dim as two power-of-two parts, DQK0 = Dv = 128 and
DQK1 = 64 (Gluon's shared buffers take power-of-two shapes; attn_fwd_gluon_pe.py does the same):

- Q and K come as two TMA boxes into two buffers, and S (S^T) is two async wgmma into one
  accumulator;
- dQ (dK) is two accumulators, 64 x 128 and 64 x 64, each with its own wgmma from the same dS
  (dS^T) operand, and each stored through its own slot and descriptor.

Everything else is the product kernels': the rings, the barriers, the masks on diagonal blocks
only, lse and delta through the dK/dV ring, the TMA-store epilogues, the grids. The register
budget is the question: dK/dV holds 64 x (192 + 128) float32 accumulators a consumer warpgroup
(160 registers a thread) before S^T and dP^T, so the AOT compile (aot.py) tries query blocks of
32 as well as 64.

Host guarantees as for the product kernels; Dqk = 192 and Dv = 128 here.
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

from mha.kernels.forward_gluon import CONSUMER_REGS, LOADER_REGS, MAXNREG, NUM_CONSUMERS  # noqa: E402

DKDV_KEYS = 128
DQ_ROWS = 128
DO_NOT_SPECIALIZE = ("seqlen_q", "seqlen_k", "num_heads", "group")
LOG2E: gl.constexpr = gl.constexpr(1.4426950408889634)


# ----------------------------------------------------------------------------- dK/dV
@gluon.jit
def _dkdv_loader(q_desc, q2_desc, do_desc, k_desc, k2_desc, v_desc, lse_desc, delta_desc, q_smem, q2_smem, do_smem,
                 k_smem, k2_smem, v_smem, lse_smem, delta_smem, kv_bar, ready, empty, kv_row, k_col, v_col, q_row0,
                 hq0, lse_b, seqlen_q, group, m_lo, n_blocks,
                 HEAD_DQK: gl.constexpr, DQK0: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_M: gl.constexpr,
                 STAGES: gl.constexpr, NUM_CONSUMERS: gl.constexpr, ROWS: gl.constexpr):
    mbarrier.expect(kv_bar, NUM_CONSUMERS * (k_desc.block_type.nbytes + k2_desc.block_type.nbytes
                                             + v_desc.block_type.nbytes))
    for c in gl.static_range(NUM_CONSUMERS):
        tma.async_copy_global_to_shared(k_desc, [kv_row + c * ROWS, k_col], kv_bar, k_smem.index(c))
        tma.async_copy_global_to_shared(k2_desc, [kv_row + c * ROWS, k_col + DQK0], kv_bar, k2_smem.index(c))
        tma.async_copy_global_to_shared(v_desc, [kv_row + c * ROWS, v_col], kv_bar, v_smem.index(c))
    t = 0
    for g in range(group):
        h = hq0 + g
        for i in range(n_blocks):
            st = t % STAGES
            ph = (t // STAGES) & 1
            mbarrier.wait(empty.index(st), ph ^ 1)
            mbarrier.expect(ready.index(st), q_desc.block_type.nbytes + q2_desc.block_type.nbytes
                            + do_desc.block_type.nbytes + lse_desc.block_type.nbytes + delta_desc.block_type.nbytes)
            m = m_lo + i * BLOCK_M
            tma.async_copy_global_to_shared(q_desc, [q_row0 + m, h * HEAD_DQK], ready.index(st), q_smem.index(st))
            tma.async_copy_global_to_shared(q2_desc, [q_row0 + m, h * HEAD_DQK + DQK0], ready.index(st),
                                            q2_smem.index(st))
            tma.async_copy_global_to_shared(do_desc, [q_row0 + m, h * HEAD_DV], ready.index(st), do_smem.index(st))
            lrow = (lse_b + h) * seqlen_q + m
            tma.async_copy_global_to_shared(lse_desc, [lrow], ready.index(st), lse_smem.index(st))
            tma.async_copy_global_to_shared(delta_desc, [lrow], ready.index(st), delta_smem.index(st))
            t += 1


@gluon.jit
def _dkdv_step(t, m, k_c, k2_c, v_c, q_smem, q2_smem, do_smem, lse_smem, delta_smem, ready, empty, dk, dk2, dv,
               qk_scale, keys, diff, MASK: gl.constexpr, STAGES: gl.constexpr, BLOCK_M: gl.constexpr,
               s_layout: gl.constexpr, dk_layout: gl.constexpr, dk2_layout: gl.constexpr, dv_layout: gl.constexpr):
    R: gl.constexpr = k_c.shape[0]
    st = t % STAGES
    ph = (t // STAGES) & 1
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    mbarrier.wait(ready.index(st), ph)
    q = q_smem.index(st)
    q2 = q2_smem.index(st)
    do = do_smem.index(st)
    zero = gl.zeros([R, BLOCK_M], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(k_c, q.permute((1, 0)), zero, use_acc=False, is_async=True)
    s_tok = warpgroup_mma(k2_c, q2.permute((1, 0)), s_tok, is_async=True)
    dp_tok = warpgroup_mma(v_c, do.permute((1, 0)), zero, use_acc=False, is_async=True)
    lse2 = lse_smem.index(st).load(col_layout) * LOG2E
    st_ = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    pt = gl.exp2(st_ * qk_scale - lse2[None, :])
    if MASK:
        qrows = m + gl.arange(0, BLOCK_M, layout=col_layout)
        keep = (qrows + diff)[None, :] >= keys[:, None]
        pt = gl.where(keep, pt, 0.0)
    p_op = gl.convert_layout(pt.to(k_c.dtype), gl.DotOperandLayout(operand_index=0, parent=dv_layout, k_width=2))
    dv_tok = warpgroup_mma(p_op, do, dv, is_async=True)
    delta = delta_smem.index(st).load(col_layout)
    dpt = warpgroup_mma_wait(num_outstanding=1, deps=(dp_tok, ))
    dst = (pt * (dpt - delta[None, :])).to(k_c.dtype)
    ds_op = gl.convert_layout(dst, gl.DotOperandLayout(operand_index=0, parent=dk_layout, k_width=2))
    dk_tok = warpgroup_mma(ds_op, q, dk, is_async=True)
    ds2_op = gl.convert_layout(dst, gl.DotOperandLayout(operand_index=0, parent=dk2_layout, k_width=2))
    dk2_tok = warpgroup_mma(ds2_op, q2, dk2, is_async=True)
    dv, dk, dk2, p_op, ds_op, ds2_op = warpgroup_mma_wait(num_outstanding=0,
                                                          deps=(dv_tok, dk_tok, dk2_tok, p_op, ds_op, ds2_op))
    mbarrier.arrive(empty.index(st), count=1)
    return dk, dk2, dv


@gluon.jit
def _dkdv_consumer(CID: gl.constexpr, dk_desc, dk2_desc, dv_desc, q_smem, q2_smem, do_smem, k_smem, k2_smem, v_smem,
                   lse_smem, delta_smem, kv_bar, ready, empty, qk_scale, sm_scale, kv_row, k_col, v_col, n0, diff,
                   group, m_lo, n_diag, n_blocks,
                   DQK0: gl.constexpr, DQK1: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_M: gl.constexpr,
                   STAGES: gl.constexpr, ROWS: gl.constexpr, CAUSAL: gl.constexpr):
    NW: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    dk_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                        instr_shape=[16, DQK0, 16])
    dk2_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                         instr_shape=[16, DQK1, 16])
    dv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                        instr_shape=[16, HEAD_DV, 16])
    keys = n0 + CID * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    k_c = k_smem.index(CID)
    k2_c = k2_smem.index(CID)
    v_c = v_smem.index(CID)
    dk = gl.zeros([ROWS, DQK0], gl.float32, layout=dk_layout)
    dk2 = gl.zeros([ROWS, DQK1], gl.float32, layout=dk2_layout)
    dv = gl.zeros([ROWS, HEAD_DV], gl.float32, layout=dv_layout)
    mbarrier.wait(kv_bar, 0)
    t = 0
    for g in range(group):
        if CAUSAL:
            for i in range(n_diag):
                dk, dk2, dv = _dkdv_step(t, m_lo + i * BLOCK_M, k_c, k2_c, v_c, q_smem, q2_smem, do_smem, lse_smem,
                                         delta_smem, ready, empty, dk, dk2, dv, qk_scale, keys, diff, True, STAGES,
                                         BLOCK_M, s_layout, dk_layout, dk2_layout, dv_layout)
                t += 1
        for i in range(n_diag, n_blocks):
            dk, dk2, dv = _dkdv_step(t, m_lo + i * BLOCK_M, k_c, k2_c, v_c, q_smem, q2_smem, do_smem, lse_smem,
                                     delta_smem, ready, empty, dk, dk2, dv, qk_scale, keys, diff, False, STAGES,
                                     BLOCK_M, s_layout, dk_layout, dk2_layout, dv_layout)
            t += 1
    k_c.store((dk * sm_scale).to(k_c.dtype))
    k2_c.store((dk2 * sm_scale).to(k_c.dtype))
    v_c.store(dv.to(v_c.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [kv_row + CID * ROWS, k_col], k_c)
    tma.async_copy_shared_to_global(dk2_desc, [kv_row + CID * ROWS, k_col + DQK0], k2_c)
    tma.async_copy_shared_to_global(dv_desc, [kv_row + CID * ROWS, v_col], v_c)
    tma.store_wait(pendings=0)


@gluon.jit(do_not_specialize=DO_NOT_SPECIALIZE)
def attn_bwd_dkdv_gluon_pe(q_desc, q2_desc, do_desc, k_desc, k2_desc, v_desc, dk_desc, dk2_desc, dv_desc, lse_desc,
                           delta_desc, qk_scale, sm_scale, seqlen_q, seqlen_k, num_heads, group,
                           HEAD_DQK: gl.constexpr, DQK0: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_M: gl.constexpr,
                           BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                           NUM_CONSUMERS: gl.constexpr, LOADER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    ROWS: gl.constexpr = BLOCK_N // NUM_CONSUMERS
    DQK1: gl.constexpr = HEAD_DQK - DQK0
    dtype: gl.constexpr = k_desc.dtype
    if CAUSAL:
        pid_bh = gl.program_id(0)
        pid_n = gl.program_id(1)
    else:
        pid_n = gl.program_id(0)
        pid_bh = gl.program_id(1)
    b = pid_bh // num_heads
    hk = pid_bh % num_heads
    n0 = pid_n * BLOCK_N
    kv_row = b * seqlen_k + n0
    k_col = hk * HEAD_DQK
    v_col = hk * HEAD_DV
    q_row0 = b * seqlen_q
    hq0 = hk * group
    lse_b = b * num_heads * group
    diff = seqlen_k - seqlen_q
    if CAUSAL:
        m_lo = gl.maximum(n0 - diff, 0)
        m_full = gl.minimum(gl.maximum(n0 + BLOCK_N - diff, 0), seqlen_q)
        n_diag = (m_full - m_lo) // BLOCK_M
    else:
        m_lo = 0
        n_diag = 0
    n_blocks = (seqlen_q - m_lo) // BLOCK_M

    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, DQK0], q_desc.layout)
    q2_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, DQK1], q2_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DV], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, DQK0], k_desc.layout)
    k2_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, DQK1], k2_desc.layout)
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
        (_dkdv_consumer, (0, dk_desc, dk2_desc, dv_desc, q_smem, q2_smem, do_smem, k_smem, k2_smem, v_smem, lse_smem,
                          delta_smem, kv_bar, ready, empty, qk_scale, sm_scale, kv_row, k_col, v_col, n0, diff,
                          group, m_lo, n_diag, n_blocks, DQK0, DQK1, HEAD_DV, BLOCK_M, STAGES, ROWS, CAUSAL)),
        (_dkdv_consumer, (1, dk_desc, dk2_desc, dv_desc, q_smem, q2_smem, do_smem, k_smem, k2_smem, v_smem, lse_smem,
                          delta_smem, kv_bar, ready, empty, qk_scale, sm_scale, kv_row, k_col, v_col, n0, diff,
                          group, m_lo, n_diag, n_blocks, DQK0, DQK1, HEAD_DV, BLOCK_M, STAGES, ROWS, CAUSAL)),
        (_dkdv_loader, (q_desc, q2_desc, do_desc, k_desc, k2_desc, v_desc, lse_desc, delta_desc, q_smem, q2_smem,
                        do_smem, k_smem, k2_smem, v_smem, lse_smem, delta_smem, kv_bar, ready, empty, kv_row, k_col,
                        v_col, q_row0, hq0, lse_b, seqlen_q, group, m_lo, n_blocks, HEAD_DQK, DQK0, HEAD_DV,
                        BLOCK_M, STAGES, NUM_CONSUMERS, ROWS)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


# ----------------------------------------------------------------------------- dQ
@gluon.jit
def _dq_loader(q_desc, q2_desc, do_desc, k_desc, k2_desc, v_desc, q_smem, q2_smem, do_smem, k_smem, k2_smem, v_smem,
               q_bar, k_ready, k_empty, v_ready, v_empty, q_row, q_col, do_col, kv_row, k_col, v_col, n_total,
               NUM_CONSUMERS: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
               DQK0: gl.constexpr):
    mbarrier.expect(q_bar, NUM_CONSUMERS * (q_desc.block_type.nbytes + q2_desc.block_type.nbytes
                                            + do_desc.block_type.nbytes))
    for c in gl.static_range(NUM_CONSUMERS):
        tma.async_copy_global_to_shared(q_desc, [q_row + c * ROWS, q_col], q_bar, q_smem.index(c))
        tma.async_copy_global_to_shared(q2_desc, [q_row + c * ROWS, q_col + DQK0], q_bar, q2_smem.index(c))
        tma.async_copy_global_to_shared(do_desc, [q_row + c * ROWS, do_col], q_bar, do_smem.index(c))
    for j in range(n_total):
        st = j % STAGES
        ph = (j // STAGES) & 1
        mbarrier.wait(v_empty.index(st), ph ^ 1)
        mbarrier.expect(v_ready.index(st), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [kv_row + j * BLOCK_N, v_col], v_ready.index(st), v_smem.index(st))
        mbarrier.wait(k_empty.index(st), ph ^ 1)
        mbarrier.expect(k_ready.index(st), k_desc.block_type.nbytes + k2_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, k_col], k_ready.index(st), k_smem.index(st))
        tma.async_copy_global_to_shared(k2_desc, [kv_row + j * BLOCK_N, k_col + DQK0], k_ready.index(st),
                                        k2_smem.index(st))


@gluon.jit
def _dq_step(j, q, q2, do, k_smem, k2_smem, v_smem, k_ready, k_empty, v_ready, v_empty, dq, dq2, lse2, delta,
             qk_scale, rows, cols0, diag_off, MASK: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
             s_layout: gl.constexpr, dq_layout: gl.constexpr, dq2_layout: gl.constexpr):
    R: gl.constexpr = q.shape[0]
    st = j % STAGES
    ph = (j // STAGES) & 1
    k = k_smem.index(st)
    k2 = k2_smem.index(st)
    mbarrier.wait(k_ready.index(st), ph)
    zero = gl.zeros([R, BLOCK_N], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(q, k.permute((1, 0)), zero, use_acc=False, is_async=True)
    s_tok = warpgroup_mma(q2, k2.permute((1, 0)), s_tok, is_async=True)
    mbarrier.wait(v_ready.index(st), ph)
    dp_tok = warpgroup_mma(do, v_smem.index(st).permute((1, 0)), zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    p = gl.exp2(s * qk_scale - lse2[:, None])
    if MASK:
        keep = (j * BLOCK_N + cols0)[None, :] <= (rows + diag_off)[:, None]
        p = gl.where(keep, p, 0.0)
    dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp_tok, ))
    mbarrier.arrive(v_empty.index(st), count=1)
    ds = (p * (dp - delta[:, None])).to(q.dtype)
    ds_op = gl.convert_layout(ds, gl.DotOperandLayout(operand_index=0, parent=dq_layout, k_width=2))
    dq_tok = warpgroup_mma(ds_op, k, dq, is_async=True)
    ds2_op = gl.convert_layout(ds, gl.DotOperandLayout(operand_index=0, parent=dq2_layout, k_width=2))
    dq2_tok = warpgroup_mma(ds2_op, k2, dq2, is_async=True)
    dq, dq2, ds_op, ds2_op = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, dq2_tok, ds_op, ds2_op))
    mbarrier.arrive(k_empty.index(st), count=1)
    return dq, dq2


@gluon.jit
def _dq_consumer(CID: gl.constexpr, dq_desc, dq2_desc, q_smem, q2_smem, do_smem, k_smem, k2_smem, v_smem, q_bar,
                 k_ready, k_empty, v_ready, v_empty, Lse, Delta, qk_scale, sm_scale, q_row, q_col, lse_off, m0,
                 diag_off, n_full, n_total,
                 ROWS: gl.constexpr, DQK0: gl.constexpr, DQK1: gl.constexpr, BLOCK_N: gl.constexpr,
                 STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    NW: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                        instr_shape=[16, DQK0, 16])
    dq2_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                         instr_shape=[16, DQK1, 16])
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    rows = m0 + CID * ROWS + gl.arange(0, ROWS, layout=row_layout)
    cols0 = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    lse2 = gl.load(Lse + lse_off + rows) * LOG2E
    delta = gl.load(Delta + lse_off + rows)
    q = q_smem.index(CID)
    q2 = q2_smem.index(CID)
    do = do_smem.index(CID)
    dq = gl.zeros([ROWS, DQK0], gl.float32, layout=dq_layout)
    dq2 = gl.zeros([ROWS, DQK1], gl.float32, layout=dq2_layout)
    mbarrier.wait(q_bar, 0)
    for j in range(0, n_full):
        dq, dq2 = _dq_step(j, q, q2, do, k_smem, k2_smem, v_smem, k_ready, k_empty, v_ready, v_empty, dq, dq2, lse2,
                           delta, qk_scale, rows, cols0, diag_off, False, STAGES, BLOCK_N, s_layout, dq_layout,
                           dq2_layout)
    if CAUSAL:
        for j in range(n_full, n_total):
            dq, dq2 = _dq_step(j, q, q2, do, k_smem, k2_smem, v_smem, k_ready, k_empty, v_ready, v_empty, dq, dq2,
                               lse2, delta, qk_scale, rows, cols0, diag_off, True, STAGES, BLOCK_N, s_layout,
                               dq_layout, dq2_layout)
    q.store((dq * sm_scale).to(q.dtype))
    q2.store((dq2 * sm_scale).to(q.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dq_desc, [q_row + CID * ROWS, q_col], q)
    tma.async_copy_shared_to_global(dq2_desc, [q_row + CID * ROWS, q_col + DQK0], q2)
    tma.store_wait(pendings=0)


@gluon.jit(do_not_specialize=DO_NOT_SPECIALIZE)
def attn_bwd_dq_gluon_pe(q_desc, q2_desc, do_desc, k_desc, k2_desc, v_desc, dq_desc, dq2_desc, Lse, Delta, qk_scale,
                         sm_scale, seqlen_q, seqlen_k, num_heads, group,
                         HEAD_DQK: gl.constexpr, DQK0: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_M: gl.constexpr,
                         BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                         NUM_CONSUMERS: gl.constexpr, LOADER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    ROWS: gl.constexpr = BLOCK_M // NUM_CONSUMERS
    DQK1: gl.constexpr = HEAD_DQK - DQK0
    dtype: gl.constexpr = q_desc.dtype
    if CAUSAL:
        pid_bh = gl.program_id(0)
        pid_m = gl.num_programs(1) - 1 - gl.program_id(1)
    else:
        pid_m = gl.program_id(0)
        pid_bh = gl.program_id(1)
    b = pid_bh // num_heads
    h = pid_bh % num_heads
    hk = h // group
    m0 = pid_m * BLOCK_M
    q_row = b * seqlen_q + m0
    kv_row = b * seqlen_k
    lse_off = pid_bh * seqlen_q
    diag_off = seqlen_k - seqlen_q
    if CAUSAL:
        n_full = (m0 + diag_off) // BLOCK_N
        n_total = (m0 + diag_off + BLOCK_M) // BLOCK_N
    else:
        n_full = seqlen_k // BLOCK_N
        n_total = n_full

    q_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, DQK0], q_desc.layout)
    q2_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, DQK1], q2_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, HEAD_DV], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, DQK0], k_desc.layout)
    k2_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, DQK1], k2_desc.layout)
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
        (_dq_consumer, (0, dq_desc, dq2_desc, q_smem, q2_smem, do_smem, k_smem, k2_smem, v_smem, q_bar, k_ready,
                        k_empty, v_ready, v_empty, Lse, Delta, qk_scale, sm_scale, q_row, h * HEAD_DQK, lse_off, m0,
                        diag_off, n_full, n_total, ROWS, DQK0, DQK1, BLOCK_N, STAGES, CAUSAL)),
        (_dq_consumer, (1, dq_desc, dq2_desc, q_smem, q2_smem, do_smem, k_smem, k2_smem, v_smem, q_bar, k_ready,
                        k_empty, v_ready, v_empty, Lse, Delta, qk_scale, sm_scale, q_row, h * HEAD_DQK, lse_off, m0,
                        diag_off, n_full, n_total, ROWS, DQK0, DQK1, BLOCK_N, STAGES, CAUSAL)),
        (_dq_loader, (q_desc, q2_desc, do_desc, k_desc, k2_desc, v_desc, q_smem, q2_smem, do_smem, k_smem, k2_smem,
                      v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, q_row, h * HEAD_DQK, h * HEAD_DV, kv_row,
                      hk * HEAD_DQK, hk * HEAD_DV, n_total, NUM_CONSUMERS, ROWS, BLOCK_N, STAGES, DQK0)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


# ----------------------------------------------------------------------------- host side
GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


def layout(box, el):
    return gl.NVMMASharedLayout.get_default_for(list(box), el)


def _desc(t, rows, cols, el):
    """(B*S, H*D) view of contiguous (B, S, H, D) `t`, boxes of rows x cols."""
    flat = t.view(t.shape[0] * t.shape[1], t.shape[2] * t.shape[3])
    return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [rows, cols], layout((rows, cols), el))


def _row_desc(t, block_m):
    flat = t.view(-1)
    return TensorDescriptor(flat, [flat.numel()], [1], [block_m], layout((block_m,), gl.float32))


def constexprs(dqk, dv, block_m, block_n, stages, causal):
    return {"HEAD_DQK": dqk, "DQK0": dv, "HEAD_DV": dv, "BLOCK_M": block_m, "BLOCK_N": block_n, "STAGES": stages,
            "CAUSAL": causal, "NUM_CONSUMERS": NUM_CONSUMERS, "LOADER_REGS": LOADER_REGS,
            "CONSUMER_REGS": CONSUMER_REGS}


def run_dkdv(q, k, v, do, lse, delta, causal, sm_scale, block_m=32, stages=2):
    batch, seqlen_q, heads_q, dqk = q.shape
    seqlen_k, heads_k, dv_ = k.shape[1], k.shape[2], v.shape[3]
    el = GL_DTYPES[q.dtype]
    d0, d1 = dv_, dqk - dv_
    rows = DKDV_KEYS // NUM_CONSUMERS
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    descs = (_desc(q, block_m, d0, el), _desc(q, block_m, d1, el), _desc(do, block_m, dv_, el),
             _desc(k, rows, d0, el), _desc(k, rows, d1, el), _desc(v, rows, dv_, el),
             _desc(dk, rows, d0, el), _desc(dk, rows, d1, el), _desc(dv, rows, dv_, el),
             _row_desc(lse, block_m), _row_desc(delta, block_m))
    tiles = seqlen_k // DKDV_KEYS
    grid = (batch * heads_k, tiles) if causal else (tiles, batch * heads_k)
    attn_bwd_dkdv_gluon_pe[grid](*descs, sm_scale * 1.4426950408889634, sm_scale, seqlen_q, seqlen_k, heads_k,
                                 heads_q // heads_k, **constexprs(dqk, dv_, block_m, DKDV_KEYS, stages, causal),
                                 num_warps=4, maxnreg=MAXNREG)
    return dk, dv


def run_dq(q, k, v, do, lse, delta, causal, sm_scale, block_n=64, stages=2):
    batch, seqlen_q, heads_q, dqk = q.shape
    seqlen_k, heads_k, dv_ = k.shape[1], k.shape[2], v.shape[3]
    el = GL_DTYPES[q.dtype]
    d0, d1 = dv_, dqk - dv_
    rows = DQ_ROWS // NUM_CONSUMERS
    dq = torch.empty_like(q)
    descs = (_desc(q, rows, d0, el), _desc(q, rows, d1, el), _desc(do, rows, dv_, el),
             _desc(k, block_n, d0, el), _desc(k, block_n, d1, el), _desc(v, block_n, dv_, el),
             _desc(dq, rows, d0, el), _desc(dq, rows, d1, el))
    tiles = seqlen_q // DQ_ROWS
    grid = (batch * heads_q, tiles) if causal else (tiles, batch * heads_q)
    attn_bwd_dq_gluon_pe[grid](*descs, lse, delta, sm_scale * 1.4426950408889634, sm_scale, seqlen_q, seqlen_k,
                               heads_q, heads_q // heads_k, **constexprs(dqk, dv_, DQ_ROWS, block_n, stages, causal),
                               num_warps=4, maxnreg=MAXNREG)
    return dq
