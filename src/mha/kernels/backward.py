"""Backward attention kernels: delta = rowsum(dO * O), then dK/dV per key block (looping over
the query heads of its GQA group, so no atomics) and dQ per query block."""
import triton
import triton.language as tl

from .common import (FULL, LEADING_EDGE, LOG2E, TRAILING_EDGE, dropout_keep, key_ranges, query_ranges,
                     sequence_bounds, slice_offset, stage_span, visible)


# Values that vary per call but never change the code: not specialized (see mha.launch).
PREPROCESS_DO_NOT_SPECIALIZE = ("seqlen_q", "num_heads_q")
DKDV_DO_NOT_SPECIALIZE = ("seqlen_q", "seqlen_k", "num_heads_k", "group_size", "window_left", "window_right",
                          "rng_seed", "rng_offset", "rng_stride")
DQ_DO_NOT_SPECIALIZE = ("seqlen_q", "seqlen_k", "num_heads_q", "group_size", "window_left", "window_right",
                        "rng_seed", "rng_offset", "rng_stride")


@triton.jit(do_not_specialize=PREPROCESS_DO_NOT_SPECIALIZE)
def attn_bwd_preprocess(Out, DOut, Delta, CuSeqlensQ,
                        stride_ob, stride_os, stride_oh, stride_dob, stride_dos, stride_doh,
                        stride_lb, stride_lh, seqlen_q, num_heads_q,
                        HEAD_DV: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_M: tl.constexpr,
                        IS_VARLEN: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // num_heads_q
    h = bh % num_heads_q
    q_start, seqlen_q = sequence_bounds(CuSeqlensQ, b, seqlen_q, IS_VARLEN)
    m0 = tl.program_id(1) * BLOCK_M
    if m0 >= seqlen_q:
        return
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_DV)
    mask = (offs_m[:, None] < seqlen_q) & (offs_d[None, :] < HEAD_DV)
    # Slice bases in int64, tile offsets in int32 (see common.slice_offset).
    O_head = Out + slice_offset(b, q_start, h, stride_ob, stride_os, stride_oh)
    DO_head = DOut + slice_offset(b, q_start, h, stride_dob, stride_dos, stride_doh)
    o = tl.load(O_head + offs_m[:, None] * stride_os + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO_head + offs_m[:, None] * stride_dos + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(Delta + slice_offset(b, q_start, h, stride_lb, 1, stride_lh) + offs_m, tl.sum(o * do, 1),
             mask=offs_m < seqlen_q)


@triton.jit
def _dkdv_stage(dk, dv, k, v, Q_head, DO_head, Lse_head, Delta_head, stride_qs, stride_dos,
                offs_n, lo, full_lo, full_hi, hi, seqlen_q, diff, window_left, window_right, qk_scale,
                rng_seed, rng_base, rng_stride, dropout_p,
                STAGE: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
                HAS_DROPOUT: tl.constexpr, HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
                DOT_PRECISION: tl.constexpr):
    """Accumulate dK, dV of one key block over the query blocks of stage STAGE (common.stage_span),
    transposed (keys as rows); only the edge stages apply the visibility/length mask."""
    start, end = stage_span(lo, full_lo, full_hi, hi, STAGE)
    MASKED: tl.constexpr = STAGE != FULL
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_dqk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    for start_m in range(start, end, BLOCK_M):
        offs_m = start_m + offs_m0
        qt_mask = offs_dqk[:, None] < HEAD_DQK
        do_mask = offs_dv[None, :] < HEAD_DV
        if MASKED:
            qt_mask = qt_mask & (offs_m[None, :] < seqlen_q)
            do_mask = do_mask & (offs_m[:, None] < seqlen_q)
            lse = tl.load(Lse_head + offs_m, mask=offs_m < seqlen_q, other=0.0)
            delta = tl.load(Delta_head + offs_m, mask=offs_m < seqlen_q, other=0.0)
        else:
            lse = tl.load(Lse_head + offs_m)
            delta = tl.load(Delta_head + offs_m)
        qt = tl.load(Q_head + offs_m[None, :] * stride_qs + offs_dqk[:, None], mask=qt_mask, other=0.0)
        st = tl.dot(k, qt, input_precision=DOT_PRECISION) * qk_scale
        pt = tl.math.exp2(st - lse[None, :] * LOG2E)
        if MASKED:
            mask = visible(offs_m[None, :], offs_n[:, None], offs_m[None, :] < seqlen_q,
                           diff, window_left, window_right, BOUND_LEFT, BOUND_RIGHT)
            # Rows with no visible key have lse = -inf (pt = inf there); the mask drops them.
            pt = tl.where(mask, pt, 0.0)
        do = tl.load(DO_head + offs_m[:, None] * stride_dos + offs_dv[None, :], mask=do_mask, other=0.0)
        dpt = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)
        if HAS_DROPOUT:
            keep = dropout_keep(rng_seed, rng_base, offs_m[None, :], offs_n[:, None], rng_stride, dropout_p)
            scale = 1.0 / (1.0 - dropout_p)
            pt_drop = tl.where(keep, pt * scale, 0.0)
            dpt = tl.where(keep, dpt * scale, 0.0)
        else:
            pt_drop = pt
        dv = tl.dot(pt_drop.to(do.dtype), do, acc=dv, input_precision=DOT_PRECISION)
        dst = pt * (dpt - delta[None, :])
        dk = tl.dot(dst.to(qt.dtype), tl.trans(qt), acc=dk, input_precision=DOT_PRECISION)
    return dk, dv


@triton.jit(do_not_specialize=DKDV_DO_NOT_SPECIALIZE)
def attn_bwd_dkdv(Q, K, V, DOut, Lse, Delta, DK, DV, CuSeqlensQ, CuSeqlensK,
                  stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                  stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                  stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
                  stride_lb, stride_lh,
                  seqlen_q, seqlen_k, num_heads_k, group_size, window_left, window_right,
                  qk_scale, sm_scale, dropout_p, rng_seed, rng_offset, rng_stride,
                  HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
                  BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  IS_VARLEN: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
                  HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Grid (batch * Hk, cdiv(max seqlen_k, BLOCK_N)). Writes every key row of the sequence,
    zeros where no query sees it."""
    bhk = tl.program_id(0)
    b = bhk // num_heads_k
    hk = bhk % num_heads_k
    q_start, seqlen_q = sequence_bounds(CuSeqlensQ, b, seqlen_q, IS_VARLEN)
    k_start, seqlen_k = sequence_bounds(CuSeqlensK, b, seqlen_k, IS_VARLEN)
    n0 = tl.program_id(1) * BLOCK_N
    if n0 >= seqlen_k:
        return
    diff = seqlen_k - seqlen_q
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_dqk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    n_ok = offs_n[:, None] < seqlen_k
    # Slice bases in int64, tile offsets in int32 (see common.slice_offset).
    K_head = K + slice_offset(b, k_start, hk, stride_kb, stride_ks, stride_kh)
    V_head = V + slice_offset(b, k_start, hk, stride_vb, stride_vs, stride_vh)
    k = tl.load(K_head + offs_n[:, None] * stride_ks + offs_dqk[None, :],
                mask=n_ok & (offs_dqk[None, :] < HEAD_DQK), other=0.0)
    v = tl.load(V_head + offs_n[:, None] * stride_vs + offs_dv[None, :],
                mask=n_ok & (offs_dv[None, :] < HEAD_DV), other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_DQK], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
    col_last = tl.minimum(n0 + BLOCK_N, seqlen_k) - 1
    lo, full_lo, full_hi, hi = query_ranges(n0, col_last, seqlen_q, diff, window_left, window_right,
                                            BLOCK_M, BOUND_LEFT, BOUND_RIGHT)
    # Keys of a GQA group are shared by `group_size` query heads: sum their contributions here.
    for g in range(0, group_size):
        h = hk * group_size + g
        Q_head = Q + slice_offset(b, q_start, h, stride_qb, stride_qs, stride_qh)
        DO_head = DOut + slice_offset(b, q_start, h, stride_dob, stride_dos, stride_doh)
        Lse_head = Lse + slice_offset(b, q_start, h, stride_lb, 1, stride_lh)
        Delta_head = Delta + slice_offset(b, q_start, h, stride_lb, 1, stride_lh)
        rng_seed_bh = rng_seed + b * num_heads_k * group_size + h
        # The query blocks of the band: leading edge (masked), full (unmasked), trailing edge (masked).
        for stage in tl.static_range(LEADING_EDGE, TRAILING_EDGE + 1):
            dk, dv = _dkdv_stage(dk, dv, k, v, Q_head, DO_head, Lse_head, Delta_head, stride_qs, stride_dos,
                                 offs_n, lo, full_lo, full_hi, hi, seqlen_q, diff, window_left, window_right,
                                 qk_scale, rng_seed_bh, rng_offset, rng_stride, dropout_p,
                                 stage, BOUND_LEFT, BOUND_RIGHT, HAS_DROPOUT, HEAD_DQK, HEAD_DV,
                                 BLOCK_M, BLOCK_DQK, BLOCK_DV, DOT_PRECISION)
    dk = dk * sm_scale
    DK_head = DK + slice_offset(b, k_start, hk, stride_dkb, stride_dks, stride_dkh)
    DV_head = DV + slice_offset(b, k_start, hk, stride_dvb, stride_dvs, stride_dvh)
    tl.store(DK_head + offs_n[:, None] * stride_dks + offs_dqk[None, :], dk.to(DK.dtype.element_ty),
             mask=n_ok & (offs_dqk[None, :] < HEAD_DQK))
    tl.store(DV_head + offs_n[:, None] * stride_dvs + offs_dv[None, :], dv.to(DV.dtype.element_ty),
             mask=n_ok & (offs_dv[None, :] < HEAD_DV))


@triton.jit
def _dq_stage(dq, q, do, lse, delta, K_head, V_head, stride_ks, stride_vs,
              offs_m, lo, full_lo, full_hi, hi, seqlen_k, diff, window_left, window_right, qk_scale,
              rng_seed, rng_base, rng_stride, dropout_p,
              STAGE: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
              HAS_DROPOUT: tl.constexpr, HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
              DOT_PRECISION: tl.constexpr):
    """Accumulate dQ of one query block over the key blocks of stage STAGE (common.stage_span);
    only the edge stages apply the visibility/length mask."""
    start, end = stage_span(lo, full_lo, full_hi, hi, STAGE)
    MASKED: tl.constexpr = STAGE != FULL
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_dqk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + offs_n0
        kt_mask = offs_dqk[:, None] < HEAD_DQK
        vt_mask = offs_dv[:, None] < HEAD_DV
        if MASKED:
            kt_mask = kt_mask & (offs_n[None, :] < seqlen_k)
            vt_mask = vt_mask & (offs_n[None, :] < seqlen_k)
        kt = tl.load(K_head + offs_n[None, :] * stride_ks + offs_dqk[:, None], mask=kt_mask, other=0.0)
        vt = tl.load(V_head + offs_n[None, :] * stride_vs + offs_dv[:, None], mask=vt_mask, other=0.0)
        s = tl.dot(q, kt, input_precision=DOT_PRECISION) * qk_scale
        p = tl.math.exp2(s - lse[:, None])
        if MASKED:
            mask = visible(offs_m[:, None], offs_n[None, :], offs_n[None, :] < seqlen_k,
                           diff, window_left, window_right, BOUND_LEFT, BOUND_RIGHT)
            p = tl.where(mask, p, 0.0)
        dp = tl.dot(do, vt, input_precision=DOT_PRECISION)
        if HAS_DROPOUT:
            keep = dropout_keep(rng_seed, rng_base, offs_m[:, None], offs_n[None, :], rng_stride, dropout_p)
            dp = tl.where(keep, dp * (1.0 / (1.0 - dropout_p)), 0.0)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(kt.dtype), tl.trans(kt), acc=dq, input_precision=DOT_PRECISION)
    return dq


@triton.jit(do_not_specialize=DQ_DO_NOT_SPECIALIZE)
def attn_bwd_dq(Q, K, V, DOut, Lse, Delta, DQ, CuSeqlensQ, CuSeqlensK,
                stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                stride_dqb, stride_dqs, stride_dqh, stride_lb, stride_lh,
                seqlen_q, seqlen_k, num_heads_q, group_size, window_left, window_right,
                qk_scale, sm_scale, dropout_p, rng_seed, rng_offset, rng_stride,
                HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
                BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                IS_VARLEN: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
                HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Grid (batch * Hq, cdiv(max seqlen_q, BLOCK_M)), heavy causal blocks first as in forward."""
    bh = tl.program_id(0)
    block_m = tl.num_programs(1) - 1 - tl.program_id(1)
    b = bh // num_heads_q
    h = bh % num_heads_q
    hk = h // group_size
    q_start, seqlen_q = sequence_bounds(CuSeqlensQ, b, seqlen_q, IS_VARLEN)
    k_start, seqlen_k = sequence_bounds(CuSeqlensK, b, seqlen_k, IS_VARLEN)
    m0 = block_m * BLOCK_M
    if m0 >= seqlen_q:
        return
    diff = seqlen_k - seqlen_q
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_dqk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    m_ok = offs_m < seqlen_q
    # Slice bases in int64, tile offsets in int32 (see common.slice_offset).
    Q_head = Q + slice_offset(b, q_start, h, stride_qb, stride_qs, stride_qh)
    DO_head = DOut + slice_offset(b, q_start, h, stride_dob, stride_dos, stride_doh)
    L_off = slice_offset(b, q_start, h, stride_lb, 1, stride_lh)
    q = tl.load(Q_head + offs_m[:, None] * stride_qs + offs_dqk[None, :],
                mask=m_ok[:, None] & (offs_dqk[None, :] < HEAD_DQK), other=0.0)
    do = tl.load(DO_head + offs_m[:, None] * stride_dos + offs_dv[None, :],
                 mask=m_ok[:, None] & (offs_dv[None, :] < HEAD_DV), other=0.0)
    # Rows past the end load lse 0 and delta 0: their q and dO are 0, so they add nothing.
    lse = tl.load(Lse + L_off + offs_m, mask=m_ok, other=0.0) * LOG2E
    delta = tl.load(Delta + L_off + offs_m, mask=m_ok, other=0.0)
    K_head = K + slice_offset(b, k_start, hk, stride_kb, stride_ks, stride_kh)
    V_head = V + slice_offset(b, k_start, hk, stride_vb, stride_vs, stride_vh)
    dq = tl.zeros([BLOCK_M, BLOCK_DQK], dtype=tl.float32)
    rng_seed_bh = rng_seed + bh
    row_last = tl.minimum(m0 + BLOCK_M, seqlen_q) - 1
    lo, full_lo, full_hi, hi = key_ranges(m0, row_last, seqlen_k, diff, window_left, window_right,
                                          BLOCK_N, BOUND_LEFT, BOUND_RIGHT)
    # As in forward: the key blocks of the band in three stages, only the edges masked.
    for stage in tl.static_range(LEADING_EDGE, TRAILING_EDGE + 1):
        dq = _dq_stage(dq, q, do, lse, delta, K_head, V_head, stride_ks, stride_vs, offs_m,
                       lo, full_lo, full_hi, hi, seqlen_k, diff, window_left, window_right, qk_scale,
                       rng_seed_bh, rng_offset, rng_stride, dropout_p,
                       stage, BOUND_LEFT, BOUND_RIGHT, HAS_DROPOUT, HEAD_DQK, HEAD_DV,
                       BLOCK_N, BLOCK_DQK, BLOCK_DV, DOT_PRECISION)
    dq = dq * sm_scale
    DQ_head = DQ + slice_offset(b, q_start, h, stride_dqb, stride_dqs, stride_dqh)
    tl.store(DQ_head + offs_m[:, None] * stride_dqs + offs_dqk[None, :],
             dq.to(DQ.dtype.element_ty), mask=m_ok[:, None] & (offs_dqk[None, :] < HEAD_DQK))
