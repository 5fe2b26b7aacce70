"""attn_fwd_ws as of 327212a (rows = m0 + tl.arange), for the comparison in README.md."""
import os

import triton
import triton.language as tl

from mha.kernels.common import LN2, LOG2E, dropout_keep, key_ranges, slice_bounds, slice_offset, tile_order, visible
from mha.kernels.forward import FWD_DO_NOT_SPECIALIZE

# Copies of each row's lse that attn_fwd_ws writes (a [rows, LSE_COPIES] float32 buffer): 4, a
# 16-byte row. Triton 3.4's interpreter checks a descriptor's strides in elements, not bytes
# (docs/records/2026-12-01-ws-forward-prep), so under the interpreter 16.
LSE_COPIES = tl.constexpr(16 if os.environ.get("TRITON_INTERPRET", "0") == "1" else 4)


@triton.jit
def _head_desc(Base, rows, stride_s, HEAD: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """Descriptor of a (rows, HEAD) slice read in [BLOCK_ROWS, BLOCK] tiles; out of bounds is 0.
    rows >= 1 (a TMA dimension of 0 is an illegal instruction): see _slice_rows."""
    return tl.make_tensor_descriptor(Base, shape=[rows, HEAD], strides=[stride_s, 1],
                                     block_shape=[BLOCK_ROWS, BLOCK])


@triton.jit
def _slice_rows(start, length):
    """(start, rows) for a descriptor of a sequence: an empty one (length 0, also what
    sequence_bounds makes of a corrupt cu_seqlens entry, whose start may point anywhere) gets
    row 0 of the tensor, which no load of it reaches (its key range and stores are empty)."""
    return tl.where(length > 0, start, 0), tl.maximum(length, 1)


@triton.jit
def _band_mask(s, offs_m, start_n, offs_n0, diff, window_left, window_right,
               BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr):
    """common.visible's band for one key block, with the rows shifted by the block start (once
    per row) so that the per-element work is against the block's own column offsets."""
    if BOUND_LEFT or BOUND_RIGHT:
        band = visible((offs_m - start_n)[:, None], offs_n0[None, :], True, diff, window_left, window_right,
                       BOUND_LEFT, BOUND_RIGHT)
        s = tl.where(band, s, float("-inf"))
    return s


@triton.jit
def _fwd_ws_loop(acc, l_i, m_i, q, q2, k_desc, k2_desc, v_desc,
                 offs_m, lo, hi, seqlen_k, diff, window_left, window_right, qk_scale,
                 rng_seed, rng_base, rng_stride, dropout_p,
                 BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr,
                 HAS_DROPOUT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr,
                 BLOCK_DQK2: tl.constexpr, DOT_PRECISION: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """The key loop over [lo, hi), every block masked. One loop, not attn_fwd's three stages
    (common.stage_span): with a second loop carrying the accumulator, before or after the
    specialized one and specialized or not, the pass fails in both pinned Tritons (an MLIR
    dominance assertion, or "operation destroyed but still has uses"). So the mask is made
    cheap instead: the key bound is an additive bias folded into the scaling multiply (one FMA),
    and only a causal or window band is masked per element (_band_mask).
    Every branch here is on a constexpr, so the loop body has no if/else."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        offs_n = start_n + offs_n0
        k = k_desc.load([start_n, 0])
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if BLOCK_DQK2 > 0:
            k2 = k2_desc.load([start_n, BLOCK_DQK])
            s = tl.dot(q2, tl.trans(k2), acc=s, input_precision=DOT_PRECISION)
        # qk_scale holds log2(e) and may be negative: applied before the row max (as attn_fwd).
        key_bias = tl.where(offs_n < seqlen_k, 0.0, float("-inf"))
        s = s * qk_scale + key_bias[None, :]
        s = _band_mask(s, offs_m, start_n, offs_n0, diff, window_left, window_right, BOUND_LEFT, BOUND_RIGHT)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row that has seen no visible key yet keeps m = -inf: subtract 0 so exp2 gives 0.
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_sub[:, None])
        alpha = tl.math.exp2(m_i - m_sub)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if HAS_DROPOUT:
            keep = dropout_keep(rng_seed, rng_base, offs_m[:, None], offs_n[None, :], rng_stride, dropout_p)
            p = tl.where(keep, p, 0.0)
        v = v_desc.load([start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc=acc, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


# The same run-time-only arguments as attn_fwd: mha.launch's AOT specialization serves both.
@triton.jit(do_not_specialize=FWD_DO_NOT_SPECIALIZE)
def attn_fwd_ws(Q, K, V, Sink, Out, Lse, CuSeqlensQ, CuSeqlensK,
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
                WARP_SPECIALIZE: tl.constexpr):
    """Grid (chunk, cdiv(max seqlen_q, BLOCK_M), batch * Hq / chunk): see common.tile_order.
    Lse: LSE_COPIES float32 per row (stride_lb, stride_lh count floats of that buffer)."""
    bh, block_m = tile_order(tile_chunk, True)
    b, h, hk, q_start, seqlen_q, k_start, seqlen_k = slice_bounds(bh, num_heads_q, group_size, CuSeqlensQ,
                                                                  CuSeqlensK, seqlen_q, seqlen_k, IS_VARLEN)
    m0 = block_m * BLOCK_M
    diff = seqlen_k - seqlen_q
    offs_m = m0 + tl.arange(0, BLOCK_M)
    q_row0, q_rows = _slice_rows(q_start, seqlen_q)
    k_row0, k_rows = _slice_rows(k_start, seqlen_k)
    Q_head = Q + slice_offset(b, q_row0, h, stride_qb, stride_qs, stride_qh)
    K_head = K + slice_offset(b, k_row0, hk, stride_kb, stride_ks, stride_kh)
    q_desc = _head_desc(Q_head, q_rows, stride_qs, HEAD_DQK, BLOCK_M, BLOCK_DQK)
    k_desc = _head_desc(K_head, k_rows, stride_ks, HEAD_DQK, BLOCK_N, BLOCK_DQK)
    v_desc = _head_desc(V + slice_offset(b, k_row0, hk, stride_vb, stride_vs, stride_vh), k_rows, stride_vs,
                        HEAD_DV, BLOCK_N, BLOCK_DV)
    q = q_desc.load([m0, 0])
    if BLOCK_DQK2 > 0:
        q2_desc = _head_desc(Q_head, q_rows, stride_qs, HEAD_DQK, BLOCK_M, BLOCK_DQK2)
        q2 = q2_desc.load([m0, BLOCK_DQK])
        k2_desc = _head_desc(K_head, k_rows, stride_ks, HEAD_DQK, BLOCK_N, BLOCK_DQK2)
    else:
        q2 = q
        k2_desc = k_desc

    if HAS_SINK:
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) + tl.load(Sink + h) * LOG2E
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    else:
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    row_last = tl.minimum(m0 + BLOCK_M, seqlen_q) - 1
    lo, _, _, hi = key_ranges(m0, row_last, seqlen_k, diff, window_left, window_right,
                              BLOCK_N, BOUND_LEFT, BOUND_RIGHT)
    # A tile past its sequence (varlen: the grid is sized by the longest) loops over no key:
    # a select, where attn_fwd returns early (a branch the pass does not take).
    hi = tl.where(m0 < seqlen_q, hi, lo)
    acc, l_i, m_i = _fwd_ws_loop(acc, l_i, m_i, q, q2, k_desc, k2_desc, v_desc, offs_m, lo, hi, seqlen_k, diff,
                                 window_left, window_right, qk_scale, rng_seed + bh, rng_offset, rng_stride,
                                 dropout_p, BOUND_LEFT, BOUND_RIGHT, HAS_DROPOUT, BLOCK_N, BLOCK_DQK, BLOCK_DQK2,
                                 DOT_PRECISION, WARP_SPECIALIZE)
    if HAS_DROPOUT:
        acc = acc * (1.0 / (1.0 - dropout_p))
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)
    # O and lse through descriptors too: with masked pointer stores here, the pass computed the
    # second consumer group's rows wrong (docs/records/2026-12-01-h200-ws-repro). Their bounds drop
    # the rows past the sequence and the columns past the head dim; a tile of an empty sequence
    # stores at row q_rows, past its one-row descriptor, so nothing. Lse holds 4 copies of each
    # row's value (16 bytes, the least a TMA row may be); mha.launch keeps the first.
    row = tl.where(m0 < seqlen_q, m0, q_rows)
    o_desc = _head_desc(Out + slice_offset(b, q_row0, h, stride_ob, stride_os, stride_oh), q_rows, stride_os,
                        HEAD_DV, BLOCK_M, BLOCK_DV)
    o_desc.store([row, 0], out.to(Out.dtype.element_ty))
    lse_desc = _head_desc(Lse + slice_offset(b, q_row0, h, stride_lb, LSE_COPIES, stride_lh), q_rows, LSE_COPIES,
                          LSE_COPIES, BLOCK_M, LSE_COPIES)
    lse_desc.store([row, 0], lse[:, None] + tl.zeros([BLOCK_M, LSE_COPIES], dtype=tl.float32))
