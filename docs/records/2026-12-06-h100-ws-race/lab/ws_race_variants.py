"""Lab variants of attn_bwd_dkdv_ws (issue 39), same signature as the shipped kernel:
ptr   dK/dV stored with pointer stores (no descriptor, no shared-memory staging after the loop)
early the dK/dV store descriptors made before the loop (before the partitions split)."""
import triton
import triton.language as tl

from mha.kernels.backward_ws import DO_NOT_SPECIALIZE, TILE, _matrix_desc, _tile_of
from mha.kernels.common import LOG2E


@triton.jit
def _loop(k, v, q_desc, do_desc, Lse, Delta, b, hk, n0, seqlen_q, seqlen_k, heads_q, group, qk_scale,
          HEAD: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    diff = seqlen_k - seqlen_q
    dk = tl.zeros([TILE, HEAD], dtype=tl.float32)
    dv = tl.zeros([TILE, HEAD], dtype=tl.float32)
    if CAUSAL:
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
            pt = tl.where(queries[None, :] - keys[:, None] >= n0 - m0 - diff, pt, 0.0)
        dpt = tl.dot(v, tl.trans(do))
        dv = tl.dot(pt.to(do.dtype), do, acc=dv)
        dst = (pt * (dpt - delta[None, :])).to(q.dtype)
        dk = tl.dot(dst, q, acc=dk)
    return dk, dv


@triton.jit(do_not_specialize=DO_NOT_SPECIALIZE)
def attn_bwd_dkdv_ws(Q, K, V, DOut, Lse, Delta, DK, DV, batch, seqlen_q, seqlen_k, num_heads, group,
                     qk_scale, sm_scale,
                     HEAD: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """variant `ptr`"""
    pid_n, pid_bh = _tile_of(CAUSAL, False)
    b = pid_bh // num_heads
    hk = pid_bh % num_heads
    heads_q = num_heads * group
    n0 = pid_n * TILE
    q_desc = _matrix_desc(Q, batch * seqlen_q, heads_q, HEAD, BLOCK_M)
    do_desc = _matrix_desc(DOut, batch * seqlen_q, heads_q, HEAD, BLOCK_M)
    k_desc = _matrix_desc(K, batch * seqlen_k, num_heads, HEAD, TILE)
    v_desc = _matrix_desc(V, batch * seqlen_k, num_heads, HEAD, TILE)
    kv_row = b * seqlen_k + n0
    k = k_desc.load([kv_row, hk * HEAD])
    v = v_desc.load([kv_row, hk * HEAD]) + 0.0
    dk, dv = _loop(k, v, q_desc, do_desc, Lse, Delta, b, hk, n0, seqlen_q, seqlen_k, heads_q, group, qk_scale,
                   HEAD, BLOCK_M, CAUSAL)
    row = num_heads * HEAD
    base = kv_row.to(tl.int64) * row + hk * HEAD
    offs = tl.arange(0, TILE)[:, None] * row + tl.arange(0, HEAD)[None, :]
    tl.store(DK + base + offs, (dk * sm_scale).to(DK.dtype.element_ty))
    tl.store(DV + base + offs, dv.to(DV.dtype.element_ty))


@triton.jit(do_not_specialize=DO_NOT_SPECIALIZE)
def attn_bwd_dkdv_ws_early(Q, K, V, DOut, Lse, Delta, DK, DV, batch, seqlen_q, seqlen_k, num_heads, group,
                           qk_scale, sm_scale,
                           HEAD: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """variant `early`"""
    pid_n, pid_bh = _tile_of(CAUSAL, False)
    b = pid_bh // num_heads
    hk = pid_bh % num_heads
    heads_q = num_heads * group
    n0 = pid_n * TILE
    q_desc = _matrix_desc(Q, batch * seqlen_q, heads_q, HEAD, BLOCK_M)
    do_desc = _matrix_desc(DOut, batch * seqlen_q, heads_q, HEAD, BLOCK_M)
    k_desc = _matrix_desc(K, batch * seqlen_k, num_heads, HEAD, TILE)
    v_desc = _matrix_desc(V, batch * seqlen_k, num_heads, HEAD, TILE)
    dk_desc = _matrix_desc(DK, batch * seqlen_k, num_heads, HEAD, TILE)
    dv_desc = _matrix_desc(DV, batch * seqlen_k, num_heads, HEAD, TILE)
    kv_row = b * seqlen_k + n0
    k = k_desc.load([kv_row, hk * HEAD])
    v = v_desc.load([kv_row, hk * HEAD]) + 0.0
    dk, dv = _loop(k, v, q_desc, do_desc, Lse, Delta, b, hk, n0, seqlen_q, seqlen_k, heads_q, group, qk_scale,
                   HEAD, BLOCK_M, CAUSAL)
    dk_desc.store([kv_row, hk * HEAD], (dk * sm_scale).to(DK.dtype.element_ty))
    dv_desc.store([kv_row, hk * HEAD], dv.to(DV.dtype.element_ty))


VARIANTS = {"ptr": attn_bwd_dkdv_ws, "early": attn_bwd_dkdv_ws_early}
