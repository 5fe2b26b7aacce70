"""Forward attention kernel (flash-attention 2 style, online softmax in base 2)."""
import triton
import triton.language as tl

from .common import (FULL, LEADING_EDGE, LN2, LOG2E, TRAILING_EDGE, dot_head_t, dropout_keep, key_ranges,
                     load_head, load_head_t, slice_bounds, slice_offset, stage_span, tile_order, visible)


@triton.jit
def _fwd_stage(acc, l_i, m_i, q, q2, K_head, V_head, stride_ks, stride_vs,
               offs_m, lo, full_lo, full_hi, hi, seqlen_k, diff, window_left, window_right, qk_scale,
               rng_seed, rng_base, rng_stride, dropout_p,
               STAGE: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
               HAS_DROPOUT: tl.constexpr, HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DQK2: tl.constexpr, BLOCK_DV: tl.constexpr,
               DOT_PRECISION: tl.constexpr):
    """Stage STAGE of a query tile's loop over key blocks (common.stage_span). The edge stages
    apply the visibility/length mask; FULL is only given blocks every row of the tile sees in full.
    q2 is the tail of a split head dim (mha.launch.head_split), unused when BLOCK_DQK2 is 0."""
    start, end = stage_span(lo, full_lo, full_hi, hi, STAGE)
    MASKED: tl.constexpr = STAGE != FULL
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + offs_n0
        kt = load_head_t(K_head, offs_n, stride_ks, seqlen_k, 0, BLOCK_DQK, HEAD_DQK, MASKED)
        s, _ = dot_head_t(q, q2, kt, K_head, offs_n, stride_ks, seqlen_k, HEAD_DQK, BLOCK_DQK, BLOCK_DQK2,
                          MASKED, DOT_PRECISION)
        # qk_scale holds log2(e): exp2 below is exp. It may be negative (softmax_scale is any
        # finite number), so it is applied before the row max, not folded in after it.
        s = s * qk_scale
        if MASKED:
            mask = visible(offs_m[:, None], offs_n[None, :], offs_n[None, :] < seqlen_k,
                           diff, window_left, window_right, BOUND_LEFT, BOUND_RIGHT)
            s = tl.where(mask, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if MASKED:
            # A row that has seen no visible key yet keeps m = -inf; subtract 0 instead so
            # exp2 gives 0 rather than NaN.
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_sub = m_new
        p = tl.math.exp2(s - m_sub[:, None])
        alpha = tl.math.exp2(m_i - m_sub)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if HAS_DROPOUT:
            keep = dropout_keep(rng_seed, rng_base, offs_m[:, None], offs_n[None, :], rng_stride, dropout_p)
            p = tl.where(keep, p, 0.0)
        v = load_head(V_head, offs_n, stride_vs, seqlen_k, 0, BLOCK_DV, HEAD_DV, MASKED)
        acc = tl.dot(p.to(v.dtype), v, acc=acc, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


# Values that vary per call but never change the code: not specialized (see mha.launch).
FWD_DO_NOT_SPECIALIZE = ("seqlen_q", "seqlen_k", "num_heads_q", "group_size", "window_left", "window_right",
                         "rng_seed", "rng_offset", "rng_stride", "tile_chunk")


@triton.jit(do_not_specialize=FWD_DO_NOT_SPECIALIZE)
def attn_fwd(Q, K, V, Sink, Out, Lse, CuSeqlensQ, CuSeqlensK,
             stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
             stride_vb, stride_vs, stride_vh, stride_ob, stride_os, stride_oh,
             stride_lb, stride_lh,
             seqlen_q, seqlen_k, num_heads_q, group_size, window_left, window_right,
             qk_scale, dropout_p, rng_seed, rng_offset, rng_stride, tile_chunk,
             HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
             BLOCK_DQK: tl.constexpr, BLOCK_DQK2: tl.constexpr, BLOCK_DV: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             IS_VARLEN: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
             HAS_SINK: tl.constexpr, HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Grid (chunk, cdiv(max seqlen_q, BLOCK_M), batch * Hq / chunk): see common.tile_order."""
    bh, block_m = tile_order(tile_chunk, True)
    b, h, hk, q_start, seqlen_q, k_start, seqlen_k = slice_bounds(bh, num_heads_q, group_size, CuSeqlensQ,
                                                                  CuSeqlensK, seqlen_q, seqlen_k, IS_VARLEN)
    m0 = block_m * BLOCK_M
    if m0 >= seqlen_q:
        return
    diff = seqlen_k - seqlen_q
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_dv = tl.arange(0, BLOCK_DV)
    # IS_VARLEN: the launcher passes batch strides of 0, sequences are found through cu_seqlens.
    # Slice bases in int64 (tensors may exceed 2^31 elements), tile offsets below in int32.
    Q_head = Q + slice_offset(b, q_start, h, stride_qb, stride_qs, stride_qh)
    K_head = K + slice_offset(b, k_start, hk, stride_kb, stride_ks, stride_kh)
    V_head = V + slice_offset(b, k_start, hk, stride_vb, stride_vs, stride_vh)
    if Q.dtype.element_ty == tl.float32:
        # fp32 q tests its columns even where none is padded (load_head does not): that always-true
        # test keeps ptxas from starving this spilling sm90 variant of registers (docs/configs.md).
        # The 16-bit variants keep load_head, as they were measured.
        offs_dqk = tl.arange(0, BLOCK_DQK)
        q = tl.load(Q_head + offs_m[:, None] * stride_qs + offs_dqk[None, :],
                    mask=(offs_m[:, None] < seqlen_q) & (offs_dqk[None, :] < HEAD_DQK), other=0.0)
    else:
        q = load_head(Q_head, offs_m, stride_qs, seqlen_q, 0, BLOCK_DQK, HEAD_DQK, True)
    if BLOCK_DQK2 > 0:
        q2 = load_head(Q_head, offs_m, stride_qs, seqlen_q, BLOCK_DQK, BLOCK_DQK2, HEAD_DQK, True)
    else:
        q2 = q

    if HAS_SINK:
        # The sink is one more logit with a zero value row: start the running max at it.
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) + tl.load(Sink + h) * LOG2E
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    else:
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    rng_seed_bh = rng_seed + bh
    row_last = tl.minimum(m0 + BLOCK_M, seqlen_q) - 1
    lo, full_lo, full_hi, hi = key_ranges(m0, row_last, seqlen_k, diff, window_left, window_right,
                                          BLOCK_N, BOUND_LEFT, BOUND_RIGHT)
    # Left edge of a window (masked), the fully visible middle (unmasked), the diagonal/right
    # edge and the ragged tail (masked): one stage function, unrolled over the three stages.
    for stage in tl.static_range(LEADING_EDGE, TRAILING_EDGE + 1):
        acc, l_i, m_i = _fwd_stage(acc, l_i, m_i, q, q2, K_head, V_head, stride_ks, stride_vs, offs_m,
                                   lo, full_lo, full_hi, hi, seqlen_k, diff, window_left, window_right, qk_scale,
                                   rng_seed_bh, rng_offset, rng_stride, dropout_p,
                                   stage, BOUND_LEFT, BOUND_RIGHT, HAS_DROPOUT, HEAD_DQK, HEAD_DV,
                                   BLOCK_N, BLOCK_DQK, BLOCK_DQK2, BLOCK_DV, DOT_PRECISION)
    if HAS_DROPOUT:
        acc = acc * (1.0 / (1.0 - dropout_p))
    # Rows that saw no key (and no sink) have l = 0: output 0, lse -inf.
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)
    row_ok = offs_m < seqlen_q
    O_head = Out + slice_offset(b, q_start, h, stride_ob, stride_os, stride_oh)
    tl.store(O_head + offs_m[:, None] * stride_os + offs_dv[None, :], out.to(Out.dtype.element_ty),
             mask=row_ok[:, None] & (offs_dv[None, :] < HEAD_DV))
    tl.store(Lse + slice_offset(b, q_start, h, stride_lb, 1, stride_lh) + offs_m, lse, mask=row_ok)
