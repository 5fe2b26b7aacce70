"""attn_fwd_ws (mha.kernels.forward_ws at 327212a) with the 128-row tile written as two 64-row halves: own
rows, masks, accumulators and descriptor loads; one masked loop, or (TWO_LOOPS) an unmasked off-band
loop and a masked diagonal loop, as triton-lang/triton PR #7658 suggests ("explicit data partitioning")."""
import triton
import triton.language as tl
from mha.kernels.common import LN2, LOG2E, key_ranges, slice_bounds, slice_offset, tile_order, visible
from mha.kernels.forward import FWD_DO_NOT_SPECIALIZE
from mha.kernels.forward_ws import LSE_COPIES, _head_desc, _slice_rows


@triton.jit
def _step(acc, l_i, m_i, q, k, v, offs_m, start_n, offs_n0, seqlen_k, diff, wl, wr, qk_scale,
          MASKED: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr, PREC: tl.constexpr):
    s = tl.dot(q, tl.trans(k), input_precision=PREC)
    s = s * qk_scale
    if MASKED:
        offs_n = start_n + offs_n0
        ok = visible(offs_m[:, None], offs_n[None, :], offs_n[None, :] < seqlen_k, diff, wl, wr, BOUND_LEFT, BOUND_RIGHT)
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_sub = m_new
    p = tl.math.exp2(s - m_sub[:, None])
    alpha = tl.math.exp2(m_i - m_sub)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc=acc, input_precision=PREC)
    return acc, l_i, m_new


@triton.jit
def _loop(acc_a, l_a, m_a, acc_b, l_b, m_b, qa, qb, k_desc, v_desc, offs_a, offs_b, start, end,
          seqlen_k, diff, wl, wr, qk_scale, MASKED: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
          BLOCK_N: tl.constexpr, PREC: tl.constexpr, WS: tl.constexpr):
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(start, end, BLOCK_N, warp_specialize=WS):
        k = k_desc.load([start_n, 0])
        v = v_desc.load([start_n, 0])
        acc_a, l_a, m_a = _step(acc_a, l_a, m_a, qa, k, v, offs_a, start_n, offs_n0, seqlen_k, diff, wl, wr, qk_scale,
                                MASKED, BOUND_LEFT, BOUND_RIGHT, PREC)
        acc_b, l_b, m_b = _step(acc_b, l_b, m_b, qb, k, v, offs_b, start_n, offs_n0, seqlen_k, diff, wl, wr, qk_scale,
                                MASKED, BOUND_LEFT, BOUND_RIGHT, PREC)
    return acc_a, l_a, m_a, acc_b, l_b, m_b


@triton.jit
def _finish(acc, l_i, m_i, row, o_desc, lse_desc, HALF: tl.constexpr, dtype: tl.constexpr):
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)
    o_desc.store([row, 0], out.to(dtype))
    lse_desc.store([row, 0], lse[:, None] + tl.zeros([HALF, LSE_COPIES], dtype=tl.float32))


@triton.jit(do_not_specialize=FWD_DO_NOT_SPECIALIZE)
def attn_fwd_dp(Q, K, V, Sink, Out, Lse, CuSeqlensQ, CuSeqlensK,
                stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                stride_vb, stride_vs, stride_vh, stride_ob, stride_os, stride_oh,
                stride_lb, stride_lh,
                seqlen_q, seqlen_k, num_heads_q, group_size, window_left, window_right,
                qk_scale, dropout_p, rng_seed, rng_offset, rng_stride, tile_chunk,
                HEAD_DQK: tl.constexpr, HEAD_DV: tl.constexpr,
                BLOCK_DQK: tl.constexpr, BLOCK_DQK2: tl.constexpr, BLOCK_DV: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                IS_VARLEN: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
                HAS_SINK: tl.constexpr, HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr,
                WARP_SPECIALIZE: tl.constexpr, TWO_LOOPS: tl.constexpr = False):
    HALF: tl.constexpr = BLOCK_M // 2
    bh, block_m = tile_order(tile_chunk, True)
    b, h, hk, q_start, seqlen_q, k_start, seqlen_k = slice_bounds(bh, num_heads_q, group_size, CuSeqlensQ,
                                                                  CuSeqlensK, seqlen_q, seqlen_k, IS_VARLEN)
    m0 = block_m * BLOCK_M
    diff = seqlen_k - seqlen_q
    offs_a = m0 + tl.arange(0, HALF)
    offs_b = m0 + HALF + tl.arange(0, HALF)
    q_row0, q_rows = _slice_rows(q_start, seqlen_q)
    k_row0, k_rows = _slice_rows(k_start, seqlen_k)
    Q_head = Q + slice_offset(b, q_row0, h, stride_qb, stride_qs, stride_qh)
    q_desc = _head_desc(Q_head, q_rows, stride_qs, HEAD_DQK, HALF, BLOCK_DQK)
    k_desc = _head_desc(K + slice_offset(b, k_row0, hk, stride_kb, stride_ks, stride_kh), k_rows, stride_ks,
                        HEAD_DQK, BLOCK_N, BLOCK_DQK)
    v_desc = _head_desc(V + slice_offset(b, k_row0, hk, stride_vb, stride_vs, stride_vh), k_rows, stride_vs,
                        HEAD_DV, BLOCK_N, BLOCK_DV)
    qa = q_desc.load([m0, 0])
    qb = q_desc.load([m0 + HALF, 0])
    m_a = tl.zeros([HALF], dtype=tl.float32) - float("inf")
    l_a = tl.zeros([HALF], dtype=tl.float32)
    acc_a = tl.zeros([HALF, BLOCK_DV], dtype=tl.float32)
    m_b = tl.zeros([HALF], dtype=tl.float32) - float("inf")
    l_b = tl.zeros([HALF], dtype=tl.float32)
    acc_b = tl.zeros([HALF, BLOCK_DV], dtype=tl.float32)
    row_last = tl.minimum(m0 + BLOCK_M, seqlen_q) - 1
    lo, full_lo, full_hi, hi = key_ranges(m0, row_last, seqlen_k, diff, window_left, window_right,
                                          BLOCK_N, BOUND_LEFT, BOUND_RIGHT)
    hi = tl.where(m0 < seqlen_q, hi, lo)
    if TWO_LOOPS:
        full_hi = tl.where(m0 < seqlen_q, full_hi, lo)
        acc_a, l_a, m_a, acc_b, l_b, m_b = _loop(acc_a, l_a, m_a, acc_b, l_b, m_b, qa, qb, k_desc, v_desc, offs_a,
                                                 offs_b, lo, full_hi, seqlen_k, diff, window_left, window_right,
                                                 qk_scale, False, BOUND_LEFT, BOUND_RIGHT, BLOCK_N, DOT_PRECISION,
                                                 WARP_SPECIALIZE)
        acc_a, l_a, m_a, acc_b, l_b, m_b = _loop(acc_a, l_a, m_a, acc_b, l_b, m_b, qa, qb, k_desc, v_desc, offs_a,
                                                 offs_b, full_hi, hi, seqlen_k, diff, window_left, window_right,
                                                 qk_scale, True, BOUND_LEFT, BOUND_RIGHT, BLOCK_N, DOT_PRECISION,
                                                 WARP_SPECIALIZE)
    else:
        acc_a, l_a, m_a, acc_b, l_b, m_b = _loop(acc_a, l_a, m_a, acc_b, l_b, m_b, qa, qb, k_desc, v_desc, offs_a,
                                                 offs_b, lo, hi, seqlen_k, diff, window_left, window_right,
                                                 qk_scale, True, BOUND_LEFT, BOUND_RIGHT, BLOCK_N, DOT_PRECISION,
                                                 WARP_SPECIALIZE)
    row = tl.where(m0 < seqlen_q, m0, q_rows)
    o_desc = _head_desc(Out + slice_offset(b, q_row0, h, stride_ob, stride_os, stride_oh), q_rows, stride_os,
                        HEAD_DV, HALF, BLOCK_DV)
    lse_desc = _head_desc(Lse + slice_offset(b, q_row0, h, stride_lb, LSE_COPIES, stride_lh), q_rows, LSE_COPIES,
                          LSE_COPIES, HALF, LSE_COPIES)
    _finish(acc_a, l_a, m_a, row, o_desc, lse_desc, HALF, Out.dtype.element_ty)
    row_b = tl.where(m0 + HALF < seqlen_q, m0 + HALF, q_rows)
    _finish(acc_b, l_b, m_b, row_b, o_desc, lse_desc, HALF, Out.dtype.element_ty)
