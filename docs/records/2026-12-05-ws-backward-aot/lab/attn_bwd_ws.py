"""A dK/dV kernel written for Triton's automatic Hopper warp specialization (`tl.range(...,
warp_specialize=True)`), the one route to FA3's backward design that Triton 3.4 has (no Gluon).

The product's Triton dK/dV kernel (mha.kernels.backward) has a loop per GQA head and three
stages per head (leading edge, full, trailing edge): with a second loop carrying the
accumulators the pass fails (docs/configs.md, "Warp-specialized forward"). Here is everything the
pass needs, as attn_fwd_ws does it for the forward:
- one loop over every (query head of the group, query block) pair, the causal mask on every step
  (a select on BLOCK_N x BLOCK_M, cheap beside the four dots);
- Q, dO, K, V, dK and dV through device-side tensor descriptors;
- key indices `tl.arange(0, BLOCK_N)` alone, the tile's first key n0 only in a scalar (the
  pass offsets the second consumer group's scalars and slices its ranges: both together counted
  the offset twice in the forward);
- 4 warps, BLOCK_N 128: the pass may split the key tile into two consumer groups of 64 keys, each
  with its dK and dV in registers (FA3's split), and add a TMA producer group.

Lab scope: dense q/k/v (B, S, H, D) contiguous, D = 64 or 128 (dK/dV also Dqk 192 / Dv 128), Sq and Sk
multiples of 128,
causal (bottom-right aligned) or not, no dropout, window or sink. Lse and Delta (B, Hq, Sq)
float32, lse in natural-log units (as mha.launch keeps it).
"""
import torch
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _rows_desc(Base, rows, heads, HEAD: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr = None):
    """(B * S, H * HEAD) view of a contiguous (B, S, H, HEAD) tensor, read in [BLOCK_ROWS, BLOCK_COLS]
    tiles (BLOCK_COLS: HEAD unless given)."""
    cols: tl.constexpr = HEAD if BLOCK_COLS is None else BLOCK_COLS
    return tl.make_tensor_descriptor(Base, shape=[rows, heads * HEAD], strides=[heads * HEAD, 1],
                                     block_shape=[BLOCK_ROWS, cols])


@triton.jit
def attn_bwd_dkdv_ws(Q, K, V, DO, Lse, Delta, DK, DV, batch, seqlen_q, seqlen_k, num_heads_k, group,
                     qk_scale, sm_scale,
                     HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                     WARP_SPECIALIZE: tl.constexpr, HEAD_TAIL: tl.constexpr = 0):
    """Grid (Sk // BLOCK_N, B * Hk). qk_scale = sm_scale * log2(e). HEAD is V's head dim; Q and K
    have HEAD + HEAD_TAIL (192 = 128 + 64 for the `pe` bucket: a second box, a second dK)."""
    DQK: tl.constexpr = HEAD + HEAD_TAIL
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // num_heads_k
    hk = pid_bh % num_heads_k
    heads_q = num_heads_k * group
    n0 = pid_n * BLOCK_N
    diff = seqlen_k - seqlen_q
    q_desc = _rows_desc(Q, batch * seqlen_q, heads_q, DQK, BLOCK_M, HEAD)
    do_desc = _rows_desc(DO, batch * seqlen_q, heads_q, HEAD, BLOCK_M)
    k_desc = _rows_desc(K, batch * seqlen_k, num_heads_k, DQK, BLOCK_N, HEAD)
    v_desc = _rows_desc(V, batch * seqlen_k, num_heads_k, HEAD, BLOCK_N)
    kv_row = b * seqlen_k + n0
    k = k_desc.load([kv_row, hk * DQK])
    v = v_desc.load([kv_row, hk * HEAD])
    dk = tl.zeros([BLOCK_N, HEAD], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD], dtype=tl.float32)
    if HEAD_TAIL > 0:
        q2_desc = _rows_desc(Q, batch * seqlen_q, heads_q, DQK, BLOCK_M, HEAD_TAIL)
        k2_desc = _rows_desc(K, batch * seqlen_k, num_heads_k, DQK, BLOCK_N, HEAD_TAIL)
        k2 = k2_desc.load([kv_row, hk * DQK + HEAD])
        dk2 = tl.zeros([BLOCK_N, HEAD_TAIL], dtype=tl.float32)
    else:
        q2_desc = q_desc
        k2 = k
        dk2 = dk
    if CAUSAL:
        # Queries before n0 - diff see no key of the tile.
        m_lo = (tl.maximum(n0 - diff, 0) // BLOCK_M) * BLOCK_M
    else:
        m_lo = 0
    n_m = (seqlen_q - m_lo) // BLOCK_M
    keys = tl.arange(0, BLOCK_N)
    queries = tl.arange(0, BLOCK_M)
    for it in tl.range(0, group * n_m, warp_specialize=WARP_SPECIALIZE):
        h = hk * group + it // n_m
        start_m = m_lo + (it % n_m) * BLOCK_M
        q_row = b * seqlen_q + start_m
        q = q_desc.load([q_row, h * DQK])
        do = do_desc.load([q_row, h * HEAD])
        stat = (b * heads_q + h) * seqlen_q + start_m + queries
        lse = tl.load(Lse + stat)
        delta = tl.load(Delta + stat)
        st = tl.dot(k, tl.trans(q))
        if HEAD_TAIL > 0:
            q2 = q2_desc.load([q_row, h * DQK + HEAD])
            st = tl.dot(k2, tl.trans(q2), acc=st)
        pt = tl.math.exp2(st * qk_scale - lse[None, :] * LOG2E)
        if CAUSAL:
            # Query start_m + j sees key n0 + i iff n0 + i <= start_m + j + diff; the tile
            # starts stay in the scalar.
            pt = tl.where(queries[None, :] - keys[:, None] >= n0 - start_m - diff, pt, 0.0)
        dpt = tl.dot(v, tl.trans(do))
        dv = tl.dot(pt.to(do.dtype), do, acc=dv)
        dst = (pt * (dpt - delta[None, :])).to(q.dtype)
        dk = tl.dot(dst, q, acc=dk)
        if HEAD_TAIL > 0:
            dk2 = tl.dot(dst, q2, acc=dk2)
    dk_desc = _rows_desc(DK, batch * seqlen_k, num_heads_k, DQK, BLOCK_N, HEAD)
    dv_desc = _rows_desc(DV, batch * seqlen_k, num_heads_k, HEAD, BLOCK_N)
    dk_desc.store([kv_row, hk * DQK], (dk * sm_scale).to(DK.dtype.element_ty))
    if HEAD_TAIL > 0:
        dk2_desc = _rows_desc(DK, batch * seqlen_k, num_heads_k, DQK, BLOCK_N, HEAD_TAIL)
        dk2_desc.store([kv_row, hk * DQK + HEAD], (dk2 * sm_scale).to(DK.dtype.element_ty))
    dv_desc.store([kv_row, hk * HEAD], dv.to(DV.dtype.element_ty))


@triton.jit
def attn_bwd_dq_ws(Q, K, V, DO, Lse, Delta, DQ, batch, seqlen_q, seqlen_k, num_heads_k, group, qk_scale, sm_scale,
                   HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                   WARP_SPECIALIZE: tl.constexpr, ROW_STATS: tl.constexpr = "descriptor"):
    """The dQ partner, in the warp-specialized forward's form (mha.kernels.forward_ws): a 128-row
    query tile (two consumer groups of 64 rows), one loop over key blocks, the mask on every step,
    row indices `tl.arange` alone with the tile start m0 in scalars. Grid (Sq // BLOCK_M, B * Hq).

    lse and delta are per-row vectors of the rows the pass splits between the consumer groups: it
    takes them through 1-D tensor descriptors (TMA), and rejects the kernel that reads them with
    pointer loads, ROW_STATS "pointer" (lab/ws_row_vector_repro.py shows it in a small kernel)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    heads_q = num_heads_k * group
    b = pid_bh // heads_q
    h = pid_bh % heads_q
    hk = h // group
    m0 = pid_m * BLOCK_M
    diff = seqlen_k - seqlen_q
    q_desc = _rows_desc(Q, batch * seqlen_q, heads_q, HEAD, BLOCK_M)
    do_desc = _rows_desc(DO, batch * seqlen_q, heads_q, HEAD, BLOCK_M)
    k_desc = _rows_desc(K, batch * seqlen_k, num_heads_k, HEAD, BLOCK_N)
    v_desc = _rows_desc(V, batch * seqlen_k, num_heads_k, HEAD, BLOCK_N)
    q_row = b * seqlen_q + m0
    q = q_desc.load([q_row, h * HEAD])
    do = do_desc.load([q_row, h * HEAD])
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    stats = (b * heads_q + h) * seqlen_q + m0     # a scalar: the rows stay tl.arange
    if ROW_STATS == "pointer":
        lse = tl.load(Lse + stats + rows) * LOG2E
        delta = tl.load(Delta + stats + rows)
    else:
        lse_desc = tl.make_tensor_descriptor(Lse, shape=[batch * heads_q * seqlen_q], strides=[1],
                                             block_shape=[BLOCK_M])
        delta_desc = tl.make_tensor_descriptor(Delta, shape=[batch * heads_q * seqlen_q], strides=[1],
                                               block_shape=[BLOCK_M])
        lse = lse_desc.load([stats]) * LOG2E
        delta = delta_desc.load([stats])
    if CAUSAL:
        # Keys past m0 + BLOCK_M - 1 + diff are seen by no row of the tile.
        hi = tl.minimum(tl.maximum(m0 + BLOCK_M + diff, 0), seqlen_k)
    else:
        hi = seqlen_k
    dq = tl.zeros([BLOCK_M, HEAD], dtype=tl.float32)
    for start_n in tl.range(0, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        kv_row = b * seqlen_k + start_n
        k = k_desc.load([kv_row, hk * HEAD])
        v = v_desc.load([kv_row, hk * HEAD])
        s = tl.dot(q, tl.trans(k))
        p = tl.math.exp2(s * qk_scale - lse[:, None])
        if CAUSAL:
            # Row m0 + i sees key start_n + j iff start_n + j <= m0 + i + diff.
            p = tl.where(rows[:, None] - cols[None, :] >= start_n - m0 - diff, p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, acc=dq)
    dq_desc = _rows_desc(DQ, batch * seqlen_q, heads_q, HEAD, BLOCK_M)
    dq_desc.store([q_row, h * HEAD], (dq * sm_scale).to(DQ.dtype.element_ty))


def run_dkdv(q, k, v, do, lse, delta, causal, scale, block_m=32, stages=2, ws=True):
    """dK, dV of q (B, Sq, Hq, Dqk), k (B, Sk, Hk, Dqk), v/do (B, S, H, Dv) contiguous; lse (natural
    log) and delta (B, Hq, Sq) float32."""
    batch, sq, hq, dqk = q.shape
    head = v.shape[-1]
    sk, hk = k.shape[1], k.shape[2]
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    attn_bwd_dkdv_ws[(sk // 128, batch * hk)](
        q, k, v, do, lse, delta, dk, dv, batch, sq, sk, hk, hq // hk, scale * 1.4426950408889634, scale,
        HEAD=head, BLOCK_M=block_m, BLOCK_N=128, CAUSAL=causal, WARP_SPECIALIZE=ws, HEAD_TAIL=dqk - head,
        num_warps=4, num_stages=stages)
    return dk, dv


def run_dq(q, k, v, do, lse, delta, causal, scale, block_n=64, stages=2, ws=True):
    batch, sq, hq, head = q.shape
    sk, hk = k.shape[1], k.shape[2]
    dq = torch.empty_like(q)
    attn_bwd_dq_ws[(sq // 128, batch * hq)](
        q, k, v, do, lse, delta, dq, batch, sq, sk, hk, hq // hk, scale * 1.4426950408889634, scale,
        HEAD=head, BLOCK_M=128, BLOCK_N=block_n, CAUSAL=causal, WARP_SPECIALIZE=ws, num_warps=4, num_stages=stages)
    return dq
