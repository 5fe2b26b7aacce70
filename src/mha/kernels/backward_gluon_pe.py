"""The Gluon dK/dV kernel for the `pe` bucket's Dqk 192 / Dv 128 problems (sm90): the kernel of
mha.kernels.backward_gluon with the q/k head dim in two power-of-two parts, DQK0 = Dv = 128 and
DQK1 = 64, because Gluon's shared buffers take power-of-two shapes:

- Q and K come as two TMA boxes into two buffers, and S^T is two async wgmma into one accumulator;
- dK is two accumulators, ROWS x 128 and ROWS x 64, each with its own wgmma from the same dS^T
  operand, each stored through its own slot and descriptor.

Everything else is attn_bwd_dkdv_gluon's: the K/V tile loaded once, the Q/dO/lse/delta ring over
the GQA group's heads, masks on the diagonal blocks only, the TMA-store epilogue, the grid. The
consumers hold 64 x (192 + 128) float32 accumulators, so query blocks are 32 rows (64 spills).
Its dQ partner is the Triton kernel (mha.kernels.backward.attn_bwd_dq): a Gluon dQ in the same
form was slower than it on this shape. docs/configs.md, "Gluon backward", has the measurements.

Selected as data (the `pe` backward bucket's `gluon` config, mha.config); Triton with Gluon only.
Host guarantees as attn_bwd_dkdv_gluon's (mha.launch.gluon_backward_inputs_ok), with q/k of
head dim HEAD_DQK = DQK0 + DQK1 and v/do of HEAD_DV = DQK0.
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from .backward_gluon import DKDV_DO_NOT_SPECIALIZE, DKDV_KEYS, LOG2E, dkdv_barriers, dkdv_key_tile, row_desc
from .forward_gluon import CONSUMER_REGS, LOADER_REGS, NUM_CONSUMERS, desc_type, matrix_desc

# The head-dim parts: what the kernel's buffers take (powers of two), and what it serves.
HEAD_DQK, HEAD_DV = 192, 128
DQK0, DQK1 = HEAD_DV, HEAD_DQK - HEAD_DV


# ----------------------------------------------------------------------------- kernel
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


@gluon.jit(do_not_specialize=DKDV_DO_NOT_SPECIALIZE)
def attn_bwd_dkdv_gluon_pe(q_desc, q2_desc, do_desc, k_desc, k2_desc, v_desc, dk_desc, dk2_desc, dv_desc, lse_desc,
                           delta_desc, qk_scale, sm_scale, seqlen_q, seqlen_k, num_heads_k, group,
                           HEAD_DQK: gl.constexpr, DQK0: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_M: gl.constexpr,
                           BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                           NUM_CONSUMERS: gl.constexpr, LOADER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    ROWS: gl.constexpr = BLOCK_N // NUM_CONSUMERS
    DQK1: gl.constexpr = HEAD_DQK - DQK0
    dtype: gl.constexpr = k_desc.dtype
    b, hk, n0, diff, m_lo, n_diag, n_blocks = dkdv_key_tile(num_heads_k, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, CAUSAL)
    kv_row = b * seqlen_k + n0
    k_col = hk * HEAD_DQK
    v_col = hk * HEAD_DV
    q_row0 = b * seqlen_q
    hq0 = hk * group
    lse_b = b * num_heads_k * group

    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, DQK0], q_desc.layout)
    q2_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, DQK1], q2_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DV], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, DQK0], k_desc.layout)
    k2_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, DQK1], k2_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, HEAD_DV], v_desc.layout)
    lse_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], lse_desc.layout)
    delta_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], delta_desc.layout)
    kv_bar, ready, empty = dkdv_barriers(STAGES, NUM_CONSUMERS)

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


# ----------------------------------------------------------------------------- host side
def dkdv_signature_types(dtype: str, block_m: int) -> dict:
    """Descriptor argument types of attn_bwd_dkdv_gluon_pe: q/q2/do boxes of BLOCK_M rows by the
    parts' widths, k/k2/v/dk/dk2/dv boxes of one consumer's 64 keys, lse/delta of BLOCK_M floats."""
    keys = DKDV_KEYS // NUM_CONSUMERS
    row_type = desc_type("fp32", (block_m,))
    return {"q_desc": desc_type(dtype, (block_m, DQK0)), "q2_desc": desc_type(dtype, (block_m, DQK1)),
            "do_desc": desc_type(dtype, (block_m, HEAD_DV)),
            **{f"{t}_desc": desc_type(dtype, (keys, DQK0)) for t in ("k", "dk")},
            **{f"{t}2_desc": desc_type(dtype, (keys, DQK1)) for t in ("k", "dk")},
            **{f"{t}_desc": desc_type(dtype, (keys, HEAD_DV)) for t in ("v", "dv")},
            "lse_desc": row_type, "delta_desc": row_type}


def dkdv_constexprs(block_m: int, stages: int, causal: bool) -> dict:
    return {"HEAD_DQK": HEAD_DQK, "DQK0": DQK0, "HEAD_DV": HEAD_DV, "BLOCK_M": block_m, "BLOCK_N": DKDV_KEYS,
            "STAGES": stages, "CAUSAL": causal, "NUM_CONSUMERS": NUM_CONSUMERS, "LOADER_REGS": LOADER_REGS,
            "CONSUMER_REGS": CONSUMER_REGS}


def dkdv_descriptors(q, k, v, do, dk, dv, lse, delta, dtype: str, block_m: int):
    """In the kernel's argument order; the second part's boxes start DQK0 columns into each head."""
    keys = DKDV_KEYS // NUM_CONSUMERS
    return (matrix_desc(q, dtype, block_m, DQK0), matrix_desc(q, dtype, block_m, DQK1), matrix_desc(do, dtype, block_m),
            matrix_desc(k, dtype, keys, DQK0), matrix_desc(k, dtype, keys, DQK1), matrix_desc(v, dtype, keys),
            matrix_desc(dk, dtype, keys, DQK0), matrix_desc(dk, dtype, keys, DQK1), matrix_desc(dv, dtype, keys),
            row_desc(lse, block_m), row_desc(delta, block_m))
