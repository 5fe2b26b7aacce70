"""Device helpers shared by the forward, backward and dropout-mask kernels."""
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # softmax runs in base 2: exp(x) = exp2(x * log2 e)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def dropout_keep(rng_seed, rng_base, rows, cols, rng_stride, dropout_p):
    """Keep-mask of dropout for (rows, cols), broadcast by the caller (rows[:, None] or [None, :]).

    Philox (tl.rand) keyed by rng_seed (the caller adds the batch*heads index), counter
    rng_base + row * rng_stride + col in int32: the same element gets the same draw in every
    kernel, so forward, backward and mha.dropout_mask agree bit for bit.
    """
    return tl.rand(rng_seed, rng_base + rows * rng_stride + cols) >= dropout_p


@triton.jit
def visible(rows, cols, diff, window_left, window_right,
            BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr):
    """Whether key `cols` is visible to query `rows` (bottom-right aligned: diff = Sk - Sq).

    Visible iff row + diff - left <= col <= row + diff + right, each side only when bounded;
    causal is right = 0. Bounds on the sequence lengths are the caller's.
    """
    ok = cols >= 0
    if BOUND_LEFT:
        ok = ok & (cols >= rows + diff - window_left)
    if BOUND_RIGHT:
        ok = ok & (cols <= rows + diff + window_right)
    return ok


@triton.jit
def key_ranges(row_first, row_last, seqlen_k, diff, window_left, window_right,
               BLOCK_N: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr):
    """Split the keys seen by query rows [row_first, row_last] into three stages.

    Returns (lo, full_lo, full_hi, hi): blocks in [lo, full_lo) and [full_hi, hi) need the mask,
    blocks in [full_lo, full_hi) are visible to every row and in range, so they run unmasked.
    lo, full_lo and full_hi are multiples of BLOCK_N (or equal to hi).
    """
    lo = 0
    hi = seqlen_k
    full_lo = 0
    full_hi = seqlen_k
    if BOUND_LEFT:
        lo = tl.maximum(row_first + diff - window_left, 0)
        full_lo = tl.maximum(row_last + diff - window_left, 0)
    if BOUND_RIGHT:
        hi = tl.minimum(row_last + diff + window_right + 1, seqlen_k)
        full_hi = tl.minimum(row_first + diff + window_right + 1, seqlen_k)
    lo = tl.minimum(lo, seqlen_k)
    hi = tl.maximum(hi, lo)
    lo = (lo // BLOCK_N) * BLOCK_N
    full_lo = tl.minimum(tl.maximum(((full_lo + BLOCK_N - 1) // BLOCK_N) * BLOCK_N, lo), hi)
    full_hi = tl.minimum(tl.maximum((tl.maximum(full_hi, 0) // BLOCK_N) * BLOCK_N, full_lo), hi)
    return lo, full_lo, full_hi, hi


@triton.jit
def query_ranges(col_first, col_last, seqlen_q, diff, window_left, window_right,
                 BLOCK_M: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr):
    """The transpose of key_ranges: query rows that see keys [col_first, col_last].

    row sees col iff col - diff - right <= row <= col - diff + left (each side when bounded).
    """
    lo = 0
    hi = seqlen_q
    full_lo = 0
    full_hi = seqlen_q
    if BOUND_RIGHT:
        lo = tl.maximum(col_first - diff - window_right, 0)
        full_lo = tl.maximum(col_last - diff - window_right, 0)
    if BOUND_LEFT:
        hi = tl.minimum(col_last - diff + window_left + 1, seqlen_q)
        full_hi = tl.minimum(col_first - diff + window_left + 1, seqlen_q)
    lo = tl.minimum(lo, seqlen_q)
    hi = tl.maximum(hi, lo)
    lo = (lo // BLOCK_M) * BLOCK_M
    full_lo = tl.minimum(tl.maximum(((full_lo + BLOCK_M - 1) // BLOCK_M) * BLOCK_M, lo), hi)
    full_hi = tl.minimum(tl.maximum((tl.maximum(full_hi, 0) // BLOCK_M) * BLOCK_M, full_lo), hi)
    return lo, full_lo, full_hi, hi


@triton.jit
def sequence_bounds(CuSeqlens, batch, seqlen, IS_VARLEN: tl.constexpr):
    """(start row in the packed tensor, length) of sequence `batch`; dense: (0, seqlen).

    The start is int64: start * stride_s is a base offset and may pass 2^31 in a large packed
    tensor; the length stays int32 (it only bounds in-sequence tile offsets)."""
    if IS_VARLEN:
        start = tl.load(CuSeqlens + batch)
        end = tl.load(CuSeqlens + batch + 1)
        return start.to(tl.int64), end - start
    else:
        return 0, seqlen


@triton.jit
def slice_offset(b, start, h, stride_b, stride_s, stride_h):
    """Element offset of row `start` of (batch b, head h) in int64.

    Index-math policy: the base of each (batch, head) slice is the only int64 arithmetic (a few
    scalar ops per program); offsets inside a slice (row * stride_s + col of a tile) stay int32,
    which mha.validation guarantees fit. b and h are int32 scalars, start is int64 (varlen) or 0.
    """
    return b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h + start * stride_s
