"""Backward attention kernels: delta = rowsum(dO * O), then dK/dV per key block (looping over
the query heads of its GQA group, so no atomics) and dQ per query block; or, where the config
asks for a single pass and the caller allows nondeterminism, dK/dV per key block with dQ added
from there in atomics (attn_bwd_dkdv_dq)."""
import triton
import triton.language as tl

from .common import (FULL, LEADING_EDGE, LOG2E, TRAILING_EDGE, dot_acc_head, dot_head_t, dropout_keep, key_ranges,
                     load_head, load_head_t, query_ranges, sequence_bounds, slice_bounds, slice_offset, stage_span,
                     store_head, tile_order, visible)


# Values that vary per call but never change the code: not specialized (see mha.launch).
PREPROCESS_DO_NOT_SPECIALIZE = ("seqlen_q", "num_heads_q")
DKDV_DO_NOT_SPECIALIZE = ("seqlen_q", "seqlen_k", "num_heads_k", "group_size", "window_left", "window_right",
                          "rng_seed", "rng_offset", "rng_stride", "tile_chunk")
DKDV_DQ_DO_NOT_SPECIALIZE = DKDV_DO_NOT_SPECIALIZE
DQ_DO_NOT_SPECIALIZE = ("seqlen_q", "seqlen_k", "num_heads_q", "group_size", "window_left", "window_right",
                        "rng_seed", "rng_offset", "rng_stride", "tile_chunk")


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
def _dkdv_stage(dk, dk2, dv, k, k2, v, Q_head, DO_head, Lse_head, Delta_head, stride_qs, stride_dos,
                offs_n, lo, full_lo, full_hi, hi, seqlen_q, diff, window_left, window_right, qk_scale,
                rng_seed, rng_base, rng_stride, dropout_p, DQ_head, stride_dqs, dq_scale,
                STAGE: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
                HAS_DROPOUT: tl.constexpr, HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DQK2: tl.constexpr, BLOCK_DV: tl.constexpr,
                DOT_PRECISION: tl.constexpr, ADD_DQ: tl.constexpr):
    """Accumulate dK, dV of one key block over the query blocks of stage STAGE (common.stage_span),
    transposed (keys as rows); only the edge stages apply the visibility/length mask. k2 and dk2
    are the tail of a split head dim (mha.launch.head_split), unused when BLOCK_DQK2 is 0. With
    ADD_DQ, each query block's share of dQ (dS @ K, times dq_scale) is also added into the float32
    rows at DQ_head (attn_bwd_dkdv_dq); without, DQ_head, stride_dqs and dq_scale are unused."""
    start, end = stage_span(lo, full_lo, full_hi, hi, STAGE)
    MASKED: tl.constexpr = STAGE != FULL
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in range(start, end, BLOCK_M):
        offs_m = start_m + offs_m0
        if MASKED:
            lse = tl.load(Lse_head + offs_m, mask=offs_m < seqlen_q, other=0.0)
            delta = tl.load(Delta_head + offs_m, mask=offs_m < seqlen_q, other=0.0)
        else:
            lse = tl.load(Lse_head + offs_m)
            delta = tl.load(Delta_head + offs_m)
        qt = load_head_t(Q_head, offs_m, stride_qs, seqlen_q, 0, BLOCK_DQK, HEAD_DQK, MASKED)
        st, qt2 = dot_head_t(k, k2, qt, Q_head, offs_m, stride_qs, seqlen_q, HEAD_DQK, BLOCK_DQK, BLOCK_DQK2,
                             MASKED, DOT_PRECISION)
        st = st * qk_scale
        pt = tl.math.exp2(st - lse[None, :] * LOG2E)
        if MASKED:
            mask = visible(offs_m[None, :], offs_n[:, None], offs_m[None, :] < seqlen_q,
                           diff, window_left, window_right, BOUND_LEFT, BOUND_RIGHT)
            # Rows with no visible key have lse = -inf (pt = inf there); the mask drops them.
            pt = tl.where(mask, pt, 0.0)
        do = load_head(DO_head, offs_m, stride_dos, seqlen_q, 0, BLOCK_DV, HEAD_DV, MASKED)
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
        dk, dk2 = dot_acc_head(dst, qt, qt2, dk, dk2, BLOCK_DQK2, DOT_PRECISION)
        if ADD_DQ:
            _add_dq(dst, k, k2, DQ_head, stride_dqs, offs_m, seqlen_q, dq_scale, HEAD_DQK, BLOCK_DQK, BLOCK_DQK2,
                    DOT_PRECISION)
    return dk, dk2, dv


@triton.jit
def _add_dq(dst, k, k2, DQ_head, stride_dqs, offs_m, seqlen_q, dq_scale, HEAD_DQK: tl.constexpr,
            BLOCK_DQK: tl.constexpr, BLOCK_DQK2: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Add dS @ K of one (key block, query block) pair, times dq_scale, into the query rows'
    float32 dQ. Relaxed atomics, in no fixed order, hence not bitwise reproducible; and no CTA
    barrier here, which would stop Triton from pipelining the loop's loads
    (docs/records/2026-12-03-fused-bwd-pipelining)."""
    ds = tl.trans(dst.to(k.dtype))
    rows_ok = offs_m[:, None] < seqlen_q
    cols = tl.arange(0, BLOCK_DQK)
    dq = tl.dot(ds, k, input_precision=DOT_PRECISION) * dq_scale
    tl.atomic_add(DQ_head + offs_m[:, None] * stride_dqs + cols[None, :], dq,
                  mask=rows_ok & (cols[None, :] < HEAD_DQK), sem="relaxed")
    if BLOCK_DQK2 > 0:
        cols2 = BLOCK_DQK + tl.arange(0, BLOCK_DQK2)
        dq2 = tl.dot(ds, k2, input_precision=DOT_PRECISION) * dq_scale
        tl.atomic_add(DQ_head + offs_m[:, None] * stride_dqs + cols2[None, :], dq2,
                      mask=rows_ok & (cols2[None, :] < HEAD_DQK), sem="relaxed")


@triton.jit
def _dkdv_key_tile(Q, K, V, DOut, Lse, Delta, DK, DV, DQAcc, b, hk, q_start, seqlen_q, k_start, seqlen_k, n0,
                   stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                   stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                   stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
                   stride_ab, stride_as, stride_ah, stride_lb, stride_lh,
                   num_heads_k, group_size, window_left, window_right,
                   qk_scale, sm_scale, dropout_p, rng_seed, rng_offset, rng_stride,
                   HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
                   BLOCK_DQK: tl.constexpr, BLOCK_DQK2: tl.constexpr, BLOCK_DV: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
                   HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr, ADD_DQ: tl.constexpr):
    """dK and dV of the key block at n0 of one KV head, over the query heads of its GQA group and
    the query blocks of its band, stored; with ADD_DQ, the dQ shares added into DQAcc on the way
    (_dkdv_stage), else DQAcc and its strides are unused."""
    diff = seqlen_k - seqlen_q
    offs_n = n0 + tl.arange(0, BLOCK_N)
    # Slice bases in int64, tile offsets in int32 (see common.slice_offset).
    K_head = K + slice_offset(b, k_start, hk, stride_kb, stride_ks, stride_kh)
    V_head = V + slice_offset(b, k_start, hk, stride_vb, stride_vs, stride_vh)
    k = load_head(K_head, offs_n, stride_ks, seqlen_k, 0, BLOCK_DQK, HEAD_DQK, True)
    v = load_head(V_head, offs_n, stride_vs, seqlen_k, 0, BLOCK_DV, HEAD_DV, True)
    dk = tl.zeros([BLOCK_N, BLOCK_DQK], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
    if BLOCK_DQK2 > 0:
        k2 = load_head(K_head, offs_n, stride_ks, seqlen_k, BLOCK_DQK, BLOCK_DQK2, HEAD_DQK, True)
        dk2 = tl.zeros([BLOCK_N, BLOCK_DQK2], dtype=tl.float32)
    else:
        k2 = k
        dk2 = dk
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
        DQ_head = DQAcc + slice_offset(b, q_start, h, stride_ab, stride_as, stride_ah)
        rng_seed_bh = rng_seed + b * num_heads_k * group_size + h
        # The query blocks of the band: leading edge (masked), full (unmasked), trailing edge (masked).
        for stage in tl.static_range(LEADING_EDGE, TRAILING_EDGE + 1):
            dk, dk2, dv = _dkdv_stage(dk, dk2, dv, k, k2, v, Q_head, DO_head, Lse_head, Delta_head, stride_qs,
                                      stride_dos, offs_n, lo, full_lo, full_hi, hi, seqlen_q, diff, window_left,
                                      window_right, qk_scale, rng_seed_bh, rng_offset, rng_stride, dropout_p,
                                      DQ_head, stride_as, sm_scale,
                                      stage, BOUND_LEFT, BOUND_RIGHT, HAS_DROPOUT, HEAD_DQK, HEAD_DV,
                                      BLOCK_M, BLOCK_DQK, BLOCK_DQK2, BLOCK_DV, DOT_PRECISION, ADD_DQ)
    DK_head = DK + slice_offset(b, k_start, hk, stride_dkb, stride_dks, stride_dkh)
    DV_head = DV + slice_offset(b, k_start, hk, stride_dvb, stride_dvs, stride_dvh)
    store_head(DK_head, dk * sm_scale, offs_n, stride_dks, seqlen_k, 0, BLOCK_DQK, HEAD_DQK)
    if BLOCK_DQK2 > 0:
        store_head(DK_head, dk2 * sm_scale, offs_n, stride_dks, seqlen_k, BLOCK_DQK, BLOCK_DQK2, HEAD_DQK)
    store_head(DV_head, dv, offs_n, stride_dvs, seqlen_k, 0, BLOCK_DV, HEAD_DV)


@triton.jit(do_not_specialize=DKDV_DO_NOT_SPECIALIZE)
def attn_bwd_dkdv(Q, K, V, DOut, Lse, Delta, DK, DV, CuSeqlensQ, CuSeqlensK,
                  stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                  stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                  stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
                  stride_lb, stride_lh,
                  seqlen_q, seqlen_k, num_heads_k, group_size, window_left, window_right,
                  qk_scale, sm_scale, dropout_p, rng_seed, rng_offset, rng_stride, tile_chunk,
                  HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
                  BLOCK_DQK: tl.constexpr, BLOCK_DQK2: tl.constexpr, BLOCK_DV: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  IS_VARLEN: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
                  HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Grid (chunk, cdiv(max seqlen_k, BLOCK_N), batch * Hk / chunk), see common.tile_order: key blocks in
    order, the causal ones that see the most queries first. Writes every key row of the
    sequence, zeros where no query sees it."""
    bhk, block_n = tile_order(tile_chunk, False)
    b, hk, _, q_start, seqlen_q, k_start, seqlen_k = slice_bounds(bhk, num_heads_k, 1, CuSeqlensQ, CuSeqlensK,
                                                                  seqlen_q, seqlen_k, IS_VARLEN)
    n0 = block_n * BLOCK_N
    if n0 >= seqlen_k:
        return
    _dkdv_key_tile(Q, K, V, DOut, Lse, Delta, DK, DV, DK, b, hk, q_start, seqlen_q, k_start, seqlen_k, n0,
                   stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                   stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                   stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
                   0, 0, 0, stride_lb, stride_lh, num_heads_k, group_size, window_left, window_right,
                   qk_scale, sm_scale, dropout_p, rng_seed, rng_offset, rng_stride,
                   HEAD_DQK, HEAD_DV, BLOCK_DQK, BLOCK_DQK2, BLOCK_DV, BLOCK_M, BLOCK_N, BOUND_LEFT, BOUND_RIGHT,
                   HAS_DROPOUT, DOT_PRECISION, False)


@triton.jit(do_not_specialize=DKDV_DQ_DO_NOT_SPECIALIZE)
def attn_bwd_dkdv_dq(Q, K, V, DOut, Lse, Delta, DK, DV, DQAcc, CuSeqlensQ, CuSeqlensK,
                     stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                     stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                     stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
                     stride_ab, stride_as, stride_ah, stride_lb, stride_lh,
                     seqlen_q, seqlen_k, num_heads_k, group_size, window_left, window_right,
                     qk_scale, sm_scale, dropout_p, rng_seed, rng_offset, rng_stride, tile_chunk,
                     HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
                     BLOCK_DQK: tl.constexpr, BLOCK_DQK2: tl.constexpr, BLOCK_DV: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     IS_VARLEN: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
                     HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """The single-pass backward (config key `single_pass`, deterministic=False only): attn_bwd_dkdv,
    whose programs also add each query block's dQ share into DQAcc (float32, zeroed, the layout of
    Q: mha.launch.backward casts it to dQ), so attn_bwd_dq does not run. The dQ additions arrive
    in no fixed order: dQ is not bitwise reproducible; dK and dV are, as attn_bwd_dkdv's."""
    bhk, block_n = tile_order(tile_chunk, False)
    b, hk, _, q_start, seqlen_q, k_start, seqlen_k = slice_bounds(bhk, num_heads_k, 1, CuSeqlensQ, CuSeqlensK,
                                                                  seqlen_q, seqlen_k, IS_VARLEN)
    n0 = block_n * BLOCK_N
    if n0 >= seqlen_k:
        return
    _dkdv_key_tile(Q, K, V, DOut, Lse, Delta, DK, DV, DQAcc, b, hk, q_start, seqlen_q, k_start, seqlen_k, n0,
                   stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                   stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                   stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
                   stride_ab, stride_as, stride_ah, stride_lb, stride_lh, num_heads_k, group_size, window_left,
                   window_right, qk_scale, sm_scale, dropout_p, rng_seed, rng_offset, rng_stride,
                   HEAD_DQK, HEAD_DV, BLOCK_DQK, BLOCK_DQK2, BLOCK_DV, BLOCK_M, BLOCK_N, BOUND_LEFT, BOUND_RIGHT,
                   HAS_DROPOUT, DOT_PRECISION, True)


@triton.jit
def _dq_stage(dq, dq2, q, q2, do, lse, delta, K_head, V_head, stride_ks, stride_vs,
              offs_m, lo, full_lo, full_hi, hi, seqlen_k, diff, window_left, window_right, qk_scale,
              rng_seed, rng_base, rng_stride, dropout_p,
              STAGE: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
              HAS_DROPOUT: tl.constexpr, HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DQK2: tl.constexpr, BLOCK_DV: tl.constexpr,
              DOT_PRECISION: tl.constexpr):
    """Accumulate dQ of one query block over the key blocks of stage STAGE (common.stage_span);
    only the edge stages apply the visibility/length mask. q2 and dq2 are the tail of a split
    head dim (mha.launch.head_split), unused when BLOCK_DQK2 is 0."""
    start, end = stage_span(lo, full_lo, full_hi, hi, STAGE)
    MASKED: tl.constexpr = STAGE != FULL
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + offs_n0
        kt = load_head_t(K_head, offs_n, stride_ks, seqlen_k, 0, BLOCK_DQK, HEAD_DQK, MASKED)
        vt = load_head_t(V_head, offs_n, stride_vs, seqlen_k, 0, BLOCK_DV, HEAD_DV, MASKED)
        s, kt2 = dot_head_t(q, q2, kt, K_head, offs_n, stride_ks, seqlen_k, HEAD_DQK, BLOCK_DQK, BLOCK_DQK2,
                            MASKED, DOT_PRECISION)
        s = s * qk_scale
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
        dq, dq2 = dot_acc_head(ds, kt, kt2, dq, dq2, BLOCK_DQK2, DOT_PRECISION)
    return dq, dq2


@triton.jit(do_not_specialize=DQ_DO_NOT_SPECIALIZE)
def attn_bwd_dq(Q, K, V, DOut, Lse, Delta, DQ, CuSeqlensQ, CuSeqlensK,
                stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                stride_dqb, stride_dqs, stride_dqh, stride_lb, stride_lh,
                seqlen_q, seqlen_k, num_heads_q, group_size, window_left, window_right,
                qk_scale, sm_scale, dropout_p, rng_seed, rng_offset, rng_stride, tile_chunk,
                HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
                BLOCK_DQK: tl.constexpr, BLOCK_DQK2: tl.constexpr, BLOCK_DV: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                IS_VARLEN: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
                HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Grid (chunk, cdiv(max seqlen_q, BLOCK_M), batch * Hq / chunk), ordered as the forward's
    (common.tile_order)."""
    bh, block_m = tile_order(tile_chunk, True)
    b, h, hk, q_start, seqlen_q, k_start, seqlen_k = slice_bounds(bh, num_heads_q, group_size, CuSeqlensQ,
                                                                  CuSeqlensK, seqlen_q, seqlen_k, IS_VARLEN)
    m0 = block_m * BLOCK_M
    if m0 >= seqlen_q:
        return
    diff = seqlen_k - seqlen_q
    offs_m = m0 + tl.arange(0, BLOCK_M)
    m_ok = offs_m < seqlen_q
    # Slice bases in int64, tile offsets in int32 (see common.slice_offset).
    Q_head = Q + slice_offset(b, q_start, h, stride_qb, stride_qs, stride_qh)
    DO_head = DOut + slice_offset(b, q_start, h, stride_dob, stride_dos, stride_doh)
    L_off = slice_offset(b, q_start, h, stride_lb, 1, stride_lh)
    q = load_head(Q_head, offs_m, stride_qs, seqlen_q, 0, BLOCK_DQK, HEAD_DQK, True)
    do = load_head(DO_head, offs_m, stride_dos, seqlen_q, 0, BLOCK_DV, HEAD_DV, True)
    # Rows past the end load lse 0 and delta 0: their q and dO are 0, so they add nothing.
    lse = tl.load(Lse + L_off + offs_m, mask=m_ok, other=0.0) * LOG2E
    delta = tl.load(Delta + L_off + offs_m, mask=m_ok, other=0.0)
    K_head = K + slice_offset(b, k_start, hk, stride_kb, stride_ks, stride_kh)
    V_head = V + slice_offset(b, k_start, hk, stride_vb, stride_vs, stride_vh)
    dq = tl.zeros([BLOCK_M, BLOCK_DQK], dtype=tl.float32)
    if BLOCK_DQK2 > 0:
        q2 = load_head(Q_head, offs_m, stride_qs, seqlen_q, BLOCK_DQK, BLOCK_DQK2, HEAD_DQK, True)
        dq2 = tl.zeros([BLOCK_M, BLOCK_DQK2], dtype=tl.float32)
    else:
        q2 = q
        dq2 = dq
    rng_seed_bh = rng_seed + bh
    row_last = tl.minimum(m0 + BLOCK_M, seqlen_q) - 1
    lo, full_lo, full_hi, hi = key_ranges(m0, row_last, seqlen_k, diff, window_left, window_right,
                                          BLOCK_N, BOUND_LEFT, BOUND_RIGHT)
    # As in forward: the key blocks of the band in three stages, only the edges masked.
    for stage in tl.static_range(LEADING_EDGE, TRAILING_EDGE + 1):
        dq, dq2 = _dq_stage(dq, dq2, q, q2, do, lse, delta, K_head, V_head, stride_ks, stride_vs, offs_m,
                       lo, full_lo, full_hi, hi, seqlen_k, diff, window_left, window_right, qk_scale,
                       rng_seed_bh, rng_offset, rng_stride, dropout_p,
                       stage, BOUND_LEFT, BOUND_RIGHT, HAS_DROPOUT, HEAD_DQK, HEAD_DV,
                       BLOCK_N, BLOCK_DQK, BLOCK_DQK2, BLOCK_DV, DOT_PRECISION)
    DQ_head = DQ + slice_offset(b, q_start, h, stride_dqb, stride_dqs, stride_dqh)
    store_head(DQ_head, dq * sm_scale, offs_m, stride_dqs, seqlen_q, 0, BLOCK_DQK, HEAD_DQK)
    if BLOCK_DQK2 > 0:
        store_head(DQ_head, dq2 * sm_scale, offs_m, stride_dqs, seqlen_q, BLOCK_DQK, BLOCK_DQK2, HEAD_DQK)
