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
def visible(rows, cols, in_range, diff, window_left, window_right,
            BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr):
    """The one masking rule: whether key `cols` is visible to query `rows` and in range.

    Bottom-right aligned (diff = Sk - Sq): visible iff row + diff - left <= col <= row + diff + right,
    each side only when bounded; causal is right = 0 (as mha.reference.visibility). `in_range` is
    the sequence-length bound of the dimension the caller loops over; the other dimension's
    out-of-range elements are never stored, so they need no mask. The sink is not a key: it
    enters the forward's softmax as its initial state.

    `cols >= 0` is always true; it starts the mask so that the mask ops keep the order the stored
    code objects were compiled from (reordering them moved register allocation and spills).
    """
    ok = cols >= 0
    if BOUND_LEFT:
        ok = ok & (cols >= rows + diff - window_left)
    if BOUND_RIGHT:
        ok = ok & (cols <= rows + diff + window_right)
    return ok & in_range


# The stages of a tile's loop over partner blocks (keys for a query tile, queries for a key
# tile), in this order, over the spans band_ranges returns. Only the edges pay for the mask.
LEADING_EDGE = tl.constexpr(1)   # [lo, full_lo): the band's far edge, partially visible: masked
FULL = tl.constexpr(2)           # [full_lo, full_hi): every pair visible and in range: unmasked
TRAILING_EDGE = tl.constexpr(3)  # [full_hi, hi): the near edge (causal diagonal) and the ragged tail: masked


@triton.jit
def band_ranges(first, last, length, offset, before, after,
                BLOCK: tl.constexpr, BOUND_BEFORE: tl.constexpr, BOUND_AFTER: tl.constexpr):
    """Split the partners seen by tile indices [first, last] into the three stages.

    Index i sees partner j iff i + offset - before <= j <= i + offset + after (each side only when
    bounded) and 0 <= j < length. For a query tile over keys: (diff, left, right); for a key tile
    over queries, the transpose: (-diff, right, left), see query_ranges.

    Returns (lo, full_lo, full_hi, hi): blocks in [lo, full_lo) and [full_hi, hi) need the mask,
    blocks in [full_lo, full_hi) are seen by every index and in range, so they run unmasked.
    lo, full_lo and full_hi are multiples of BLOCK (or equal to hi). Without BOUND_BEFORE,
    lo = full_lo = 0: the leading edge is empty at run time.
    """
    lo = 0
    hi = length
    full_lo = 0
    full_hi = length
    if BOUND_BEFORE:
        lo = tl.maximum(first + offset - before, 0)
        full_lo = tl.maximum(last + offset - before, 0)
    if BOUND_AFTER:
        hi = tl.minimum(last + offset + after + 1, length)
        full_hi = tl.minimum(first + offset + after + 1, length)
    lo = tl.minimum(lo, length)
    hi = tl.maximum(hi, lo)
    lo = (lo // BLOCK) * BLOCK
    full_lo = tl.minimum(tl.maximum(((full_lo + BLOCK - 1) // BLOCK) * BLOCK, lo), hi)
    full_hi = tl.minimum(tl.maximum((tl.maximum(full_hi, 0) // BLOCK) * BLOCK, full_lo), hi)
    return lo, full_lo, full_hi, hi


@triton.jit
def key_ranges(row_first, row_last, seqlen_k, diff, window_left, window_right,
               BLOCK_N: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr):
    """Stages of the keys seen by query rows [row_first, row_last] (see band_ranges)."""
    return band_ranges(row_first, row_last, seqlen_k, diff, window_left, window_right,
                       BLOCK_N, BOUND_LEFT, BOUND_RIGHT)


@triton.jit
def query_ranges(col_first, col_last, seqlen_q, diff, window_left, window_right,
                 BLOCK_M: tl.constexpr, BOUND_LEFT: tl.constexpr, BOUND_RIGHT: tl.constexpr):
    """The transpose of key_ranges: stages of the query rows that see keys [col_first, col_last].

    row sees col iff col - diff - right <= row <= col - diff + left: the band with offset -diff,
    right before and left after.
    """
    return band_ranges(col_first, col_last, seqlen_q, -diff, window_right, window_left,
                       BLOCK_M, BOUND_RIGHT, BOUND_LEFT)


@triton.jit
def stage_span(lo, full_lo, full_hi, hi, STAGE: tl.constexpr):
    """[start, end) of stage STAGE among the ranges band_ranges returns."""
    if STAGE == LEADING_EDGE:
        start = lo
        end = full_lo
    elif STAGE == FULL:
        start = full_lo
        end = full_hi
    else:
        start = full_hi
        end = hi
    return start, end


@triton.jit
def tile_order(chunk, HEAVY_FIRST: tl.constexpr):
    """(slice index, block index) of this program in the grid (chunk, n_blocks, n_slices / chunk).

    Programs start in grid order, x fastest: slices ((batch, head) pairs) are taken `chunk` at a
    time, and within a chunk block by block, every slice of the chunk at each block (see
    mha.launch.tile_chunk for the size). Two pulls: tiles that run at the same time should share
    K/V (or Q/dO) in L2, so few slices at a time; and causal tiles should start heaviest first
    over many tiles, so the light ones fill the tail. HEAVY_FIRST runs blocks last-first (query
    tiles: the last sees the most keys); without it first-first (key tiles of the backward).
    Three grid axes rather than one split by division: the division by a run-time chunk cost
    the varlen forward 29 registers a thread on sm90, and with them its second resident tile.
    """
    slice_index = tl.program_id(2) * chunk + tl.program_id(0)
    block = tl.program_id(1)
    if HEAVY_FIRST:
        block = tl.num_programs(1) - 1 - block
    return slice_index, block


@triton.jit
def load_head(Base, rows, stride_s, n_rows, COL0: tl.constexpr, BLOCK: tl.constexpr, HEAD: tl.constexpr,
              MASK_ROWS: tl.constexpr):
    """Tile [rows, COL0 : COL0 + BLOCK) of a (row, head dim) slice, zero past n_rows (when
    MASK_ROWS) and past the head dim HEAD. Head dims are padded to powers of two inside the
    kernel (masked, never copied), or split in two such parts (mha.launch.head_split)."""
    cols = COL0 + tl.arange(0, BLOCK)
    ptrs = Base + rows[:, None] * stride_s + cols[None, :]
    if MASK_ROWS:
        mask = rows[:, None] < n_rows
        if COL0 + BLOCK > HEAD:
            mask = mask & (cols[None, :] < HEAD)
        return tl.load(ptrs, mask=mask, other=0.0)
    elif COL0 + BLOCK > HEAD:
        return tl.load(ptrs, mask=cols[None, :] < HEAD, other=0.0)
    else:
        return tl.load(ptrs)


@triton.jit
def load_head_t(Base, rows, stride_s, n_rows, COL0: tl.constexpr, BLOCK: tl.constexpr, HEAD: tl.constexpr,
                MASK_ROWS: tl.constexpr):
    """load_head transposed: the tile as [COL0 : COL0 + BLOCK, rows]."""
    cols = COL0 + tl.arange(0, BLOCK)
    ptrs = Base + rows[None, :] * stride_s + cols[:, None]
    if MASK_ROWS:
        mask = rows[None, :] < n_rows
        if COL0 + BLOCK > HEAD:
            mask = mask & (cols[:, None] < HEAD)
        return tl.load(ptrs, mask=mask, other=0.0)
    elif COL0 + BLOCK > HEAD:
        return tl.load(ptrs, mask=cols[:, None] < HEAD, other=0.0)
    else:
        return tl.load(ptrs)


@triton.jit
def dot_head_t(a, a2, bt, Base, rows, stride_s, n_rows, HEAD: tl.constexpr, BLOCK: tl.constexpr,
               BLOCK2: tl.constexpr, MASK_ROWS: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """a @ B[rows]^T over a head dim of up to two blocks (mha.launch.head_split). bt is B's first
    block, loaded by the caller with load_head_t (where that load stands among the caller's other
    loads changes the sm90 schedule); the tail block is loaded here when BLOCK2 > 0, a2 being the
    tail of a. Returns (product, tail tile); the tail tile is bt when BLOCK2 is 0."""
    s = tl.dot(a, bt, input_precision=DOT_PRECISION)
    if BLOCK2 > 0:
        bt2 = load_head_t(Base, rows, stride_s, n_rows, BLOCK, BLOCK2, HEAD, MASK_ROWS)
        s = tl.dot(a2, bt2, acc=s, input_precision=DOT_PRECISION)
    else:
        bt2 = bt
    return s, bt2


@triton.jit
def dot_acc_head(ds, bt, bt2, acc, acc2, BLOCK2: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """The gradient through dot_head_t: acc += ds @ bt^T, and acc2 += ds @ bt2^T for the tail
    block of a split head dim (acc2 is returned untouched when BLOCK2 is 0)."""
    acc = tl.dot(ds.to(bt.dtype), tl.trans(bt), acc=acc, input_precision=DOT_PRECISION)
    if BLOCK2 > 0:
        acc2 = tl.dot(ds.to(bt2.dtype), tl.trans(bt2), acc=acc2, input_precision=DOT_PRECISION)
    return acc, acc2


@triton.jit
def store_head(Base, tile, rows, stride_s, n_rows, COL0: tl.constexpr, BLOCK: tl.constexpr, HEAD: tl.constexpr):
    """Store `tile` (float32) as columns [COL0, COL0 + BLOCK) of rows `rows` in Base's dtype,
    only rows below n_rows and columns below HEAD (the inverse of load_head)."""
    cols = COL0 + tl.arange(0, BLOCK)
    mask = rows[:, None] < n_rows
    if COL0 + BLOCK > HEAD:
        mask = mask & (cols[None, :] < HEAD)
    tl.store(Base + rows[:, None] * stride_s + cols[None, :], tile.to(Base.dtype.element_ty), mask=mask)


@triton.jit
def sequence_bounds(CuSeqlens, batch, seqlen, IS_VARLEN: tl.constexpr):
    """(start row in the packed tensor, length) of sequence `batch`; dense: (0, seqlen).

    Varlen: `seqlen` is the packed tensor's row count, and both ends are clamped into
    [0, seqlen] with end >= start. Every load and store of a sequence is masked by its length,
    so whatever cu_seqlens holds (written after validation, or on the device where validation
    cannot afford to re-read it) a kernel computes wrong numbers at worst, never touches memory
    outside the tensors.

    The start is int64: start * stride_s is a base offset and may pass 2^31 in a large packed
    tensor; the length stays int32 (it only bounds in-sequence tile offsets)."""
    if IS_VARLEN:
        start = tl.minimum(tl.maximum(tl.load(CuSeqlens + batch), 0), seqlen)
        end = tl.minimum(tl.maximum(tl.load(CuSeqlens + batch + 1), start), seqlen)
        return start.to(tl.int64), end - start
    else:
        return 0, seqlen


@triton.jit
def slice_bounds(bh, num_heads, group_size, CuSeqlensQ, CuSeqlensK, seqlen_q, seqlen_k, IS_VARLEN: tl.constexpr):
    """(batch, head, its KV head, query start, query length, key start, key length) of the slice
    bh = batch * num_heads + head (sequence_bounds for each side). Key tiles pass group_size 1."""
    b = bh // num_heads
    h = bh % num_heads
    hk = h // group_size
    q_start, seqlen_q = sequence_bounds(CuSeqlensQ, b, seqlen_q, IS_VARLEN)
    k_start, seqlen_k = sequence_bounds(CuSeqlensK, b, seqlen_k, IS_VARLEN)
    return b, h, hk, q_start, seqlen_q, k_start, seqlen_k


@triton.jit
def slice_offset(b, start, h, stride_b, stride_s, stride_h):
    """Element offset of row `start` of (batch b, head h) in int64.

    Index-math policy: the base of each (batch, head) slice is the only int64 arithmetic (a few
    scalar ops per program); offsets inside a slice (row * stride_s + col of a tile) stay int32,
    which mha.validation guarantees fit. b and h are int32 scalars, start is int64 (varlen) or 0.
    """
    return b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h + start * stride_s
