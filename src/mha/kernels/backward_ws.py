"""The sm90 backward for Triton's Hopper warp-specialization pass: FA3's split of the backward,
for toolchains without Gluon (selected as data: a backward bucket's `ws` config, mha.config).

FA3 gives a 128-row tile two consumer warpgroups of 64 rows, each with its accumulators in
registers, behind a producer that loads by TMA. Triton 3.4 can build that only through its
automatic pass (`tl.range(..., warp_specialize=True)` at 4 warps), which splits the one loop's
tile between two consumer groups and adds the producer itself. What the pass needs, as for
mha.kernels.forward_ws (docs/configs.md, "Warp-specialized backward"):
- one loop, the causal mask on every step (a select beside four dots);
- every block through device-side tensor descriptors, over the (B * S, H * D) view of a
  contiguous (B, S, H, D) tensor;
- row indices `tl.arange` alone, the tile start only in scalars (the pass offsets the second
  group's scalars and slices its ranges: a row index built as start + arange counted it twice);
- per-row vectors of the split tile (dQ's lse and delta) through 1-D descriptors: the pass
  rejects them as pointer loads (docs/records/2026-12-05-ws-backward-aot);
- at most one tile loaded before the loop left in shared memory (K for dK/dV, Q for dQ). The pass
  releases such a buffer after the loop, and where a consumer group holds two, the order of their
  releases follows heap addresses: the code object differs from compile to compile
  (docs/records/2026-12-06-ws-backward-product-aot). `+ 0.0` makes a tile the register operand of
  its dots (the same values; -0.0 becomes +0.0, which no product or sum tells apart), read once
  before the loop, where its buffer is released.

The problems are the Gluon backward's of Dqk == Dv == 128 (mha.config.gluon_serves: dense
fp16/bf16, no window but a causal band, no sink or dropout; mha.config.WS_BUCKET) and the inputs
are too (mha.launch.ws_backward_inputs_ok: contiguous, lengths multiples of 128, a
causal band with Sk >= Sq). Both kernels are deterministic: no atomics.

No shipped config selects them: on the GPU the dK/dV kernel gave non-finite rows in some runs (a
race in what the pass generates; docs/configs.md, "Warp-specialized backward").
"""
import triton
import triton.language as tl

from .common import LOG2E

TILE = tl.constexpr(128)   # the key tile of dK/dV and the query tile of dQ: two consumer groups of 64 rows
# Run-time values that never change the generated code (and batch 1 or group 1 would otherwise
# make a code object of its own).
DO_NOT_SPECIALIZE = ("batch", "seqlen_q", "seqlen_k", "num_heads", "group")


@triton.jit
def _matrix_desc(Base, rows, heads, HEAD: tl.constexpr, BLOCK_ROWS: tl.constexpr):
    """(B * S, H * HEAD) view of a contiguous (B, S, H, HEAD) tensor in [BLOCK_ROWS, HEAD] tiles."""
    return tl.make_tensor_descriptor(Base, shape=[rows, heads * HEAD], strides=[heads * HEAD, 1],
                                     block_shape=[BLOCK_ROWS, HEAD])


@triton.jit
def _tile_of(CAUSAL: tl.constexpr, LONGEST_LAST: tl.constexpr):
    """(tile, slice) of this program in mha.launch.tile_grid: a causal grid is (slices, tiles),
    each slice's longest tiles in its first waves (the first key tiles; the last query tiles)."""
    if CAUSAL:
        if LONGEST_LAST:
            tile = tl.num_programs(1) - 1 - tl.program_id(1)
        else:
            tile = tl.program_id(1)
        return tile, tl.program_id(0)
    return tl.program_id(0), tl.program_id(1)


@triton.jit(do_not_specialize=DO_NOT_SPECIALIZE)
def attn_bwd_dkdv_ws(Q, K, V, DOut, Lse, Delta, DK, DV, batch, seqlen_q, seqlen_k, num_heads, group,
                     qk_scale, sm_scale,
                     HEAD: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """dK, dV of one 128-key tile of one (batch, KV head): K and V loaded once, one loop over
    every (query head of the GQA group, query block of BLOCK_M) pair: S^T = K Q^T, dP^T = V dO^T,
    dV += P^T dO, dK += dS^T Q. lse and delta are per query, along the tile's columns, which the
    pass does not split: pointer loads. num_heads: KV heads."""
    pid_n, pid_bh = _tile_of(CAUSAL, False)
    b = pid_bh // num_heads
    hk = pid_bh % num_heads
    heads_q = num_heads * group
    n0 = pid_n * TILE
    diff = seqlen_k - seqlen_q
    q_desc = _matrix_desc(Q, batch * seqlen_q, heads_q, HEAD, BLOCK_M)
    do_desc = _matrix_desc(DOut, batch * seqlen_q, heads_q, HEAD, BLOCK_M)
    k_desc = _matrix_desc(K, batch * seqlen_k, num_heads, HEAD, TILE)
    v_desc = _matrix_desc(V, batch * seqlen_k, num_heads, HEAD, TILE)
    kv_row = b * seqlen_k + n0
    k = k_desc.load([kv_row, hk * HEAD])
    v = v_desc.load([kv_row, hk * HEAD]) + 0.0       # in registers: one shared tile (K) per group
    dk = tl.zeros([TILE, HEAD], dtype=tl.float32)
    dv = tl.zeros([TILE, HEAD], dtype=tl.float32)
    if CAUSAL:
        # Queries before n0 - diff see no key of the tile.
        m_lo = (tl.maximum(n0 - diff, 0) // BLOCK_M) * BLOCK_M
    else:
        m_lo = 0
    blocks = (seqlen_q - m_lo) // BLOCK_M
    keys = tl.arange(0, TILE)
    queries = tl.arange(0, BLOCK_M)
    for it in tl.range(0, group * blocks, warp_specialize=True):
        h = hk * group + it // blocks
        m0 = m_lo + (it % blocks) * BLOCK_M
        q_row = b * seqlen_q + m0
        q = q_desc.load([q_row, h * HEAD])
        do = do_desc.load([q_row, h * HEAD])
        stats = (b * heads_q + h) * seqlen_q + m0 + queries
        lse = tl.load(Lse + stats)
        delta = tl.load(Delta + stats)
        st = tl.dot(k, tl.trans(q))
        pt = tl.math.exp2(st * qk_scale - lse[None, :] * LOG2E)
        if CAUSAL:
            # Query m0 + j sees key n0 + i iff n0 + i <= m0 + j + diff: the tile starts stay in
            # the scalar.
            pt = tl.where(queries[None, :] - keys[:, None] >= n0 - m0 - diff, pt, 0.0)
        dpt = tl.dot(v, tl.trans(do))
        dv = tl.dot(pt.to(do.dtype), do, acc=dv)
        dst = (pt * (dpt - delta[None, :])).to(q.dtype)
        dk = tl.dot(dst, q, acc=dk)
    dk_desc = _matrix_desc(DK, batch * seqlen_k, num_heads, HEAD, TILE)
    dk_desc.store([kv_row, hk * HEAD], (dk * sm_scale).to(DK.dtype.element_ty))
    dv_desc = _matrix_desc(DV, batch * seqlen_k, num_heads, HEAD, TILE)
    dv_desc.store([kv_row, hk * HEAD], dv.to(DV.dtype.element_ty))


@triton.jit(do_not_specialize=DO_NOT_SPECIALIZE)
def attn_bwd_dq_ws(Q, K, V, DOut, Lse, Delta, DQ, batch, seqlen_q, seqlen_k, num_heads, group,
                   qk_scale, sm_scale,
                   HEAD: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """dQ of one 128-row query tile of one (batch, query head), one loop over key blocks of
    BLOCK_N: S = Q K^T, dP = dO V^T, dQ += dS K. num_heads: query heads."""
    pid_m, pid_bh = _tile_of(CAUSAL, True)
    b = pid_bh // num_heads
    h = pid_bh % num_heads
    hk = h // group
    heads_k = num_heads // group
    m0 = pid_m * TILE
    diff = seqlen_k - seqlen_q
    q_desc = _matrix_desc(Q, batch * seqlen_q, num_heads, HEAD, TILE)
    do_desc = _matrix_desc(DOut, batch * seqlen_q, num_heads, HEAD, TILE)
    k_desc = _matrix_desc(K, batch * seqlen_k, heads_k, HEAD, BLOCK_N)
    v_desc = _matrix_desc(V, batch * seqlen_k, heads_k, HEAD, BLOCK_N)
    q_row = b * seqlen_q + m0
    q = q_desc.load([q_row, h * HEAD])
    do = do_desc.load([q_row, h * HEAD]) + 0.0     # in registers: one shared tile (Q) per group
    rows = tl.arange(0, TILE)
    cols = tl.arange(0, BLOCK_N)
    stats = (b * num_heads + h) * seqlen_q + m0     # a scalar: the rows stay tl.arange
    lse_desc = tl.make_tensor_descriptor(Lse, shape=[batch * num_heads * seqlen_q], strides=[1], block_shape=[TILE])
    delta_desc = tl.make_tensor_descriptor(Delta, shape=[batch * num_heads * seqlen_q], strides=[1],
                                           block_shape=[TILE])
    lse = lse_desc.load([stats]) * LOG2E
    delta = delta_desc.load([stats])
    if CAUSAL:
        # Keys past m0 + TILE - 1 + diff are seen by no row of the tile.
        hi = tl.minimum(tl.maximum(m0 + TILE + diff, 0), seqlen_k)
    else:
        hi = seqlen_k
    dq = tl.zeros([TILE, HEAD], dtype=tl.float32)
    for n0 in tl.range(0, hi, BLOCK_N, warp_specialize=True):
        kv_row = b * seqlen_k + n0
        k = k_desc.load([kv_row, hk * HEAD])
        v = v_desc.load([kv_row, hk * HEAD])
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])
        if CAUSAL:
            # Row m0 + i sees key n0 + j iff n0 + j <= m0 + i + diff.
            p = tl.where(rows[:, None] - cols[None, :] >= n0 - m0 - diff, p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, acc=dq)
    dq_desc = _matrix_desc(DQ, batch * seqlen_q, num_heads, HEAD, TILE)
    dq_desc.store([q_row, h * HEAD], (dq * sm_scale).to(DQ.dtype.element_ty))
