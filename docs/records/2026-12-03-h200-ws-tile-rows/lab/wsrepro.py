# Reproducer for Triton's Hopper warp-specialization pass (sm90): with two consumer warp groups
# (a 128-row tile at num_warps 4), a row-dependent mask inside the specialized loop, or a masked
# pointer store after it, gives wrong rows in the second consumer group (rows 64..127 of a tile).
#
#   python3 wsrepro.py            # needs an sm90 GPU; prints one line per case, then a verdict
#
# A minimal flash-attention forward: Q/K/V through tensor descriptors, one key loop
# `tl.range(..., warp_specialize=WS)`. Every case runs with controls:
#   ws=0   the same kernel without warp specialization;
#   bm=64  the same kernel with one consumer group.
# Keys past seqlen_k are always masked (a -inf bias per key column), so a partial last key block
# cannot read zeros as keys; seqlen_q and seqlen_k need not be multiples of the tiles.
# Output per case: the largest |error| against a float32 reference, per 64 query rows, for O and
# for the lse; "ok" when every 64-row block is within 2e-2 (bf16 inputs, float32 accumulation).
import sys

import torch
import triton
import triton.language as tl

TOL = 2e-2


@triton.jit
def fwd(Q, K, V, O, L, seqlen_q, seqlen_k, qk_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
        WS: tl.constexpr, CAUSAL: tl.constexpr, O_PTR_STORE: tl.constexpr, LSE_PTR_STORE: tl.constexpr,
        TILE_ROWS: tl.constexpr):
    m0 = tl.program_id(0) * BM
    bh = tl.program_id(1)
    qd = tl.make_tensor_descriptor(Q + bh * seqlen_q * D, shape=[seqlen_q, D], strides=[D, 1], block_shape=[BM, D])
    kd = tl.make_tensor_descriptor(K + bh * seqlen_k * D, shape=[seqlen_k, D], strides=[D, 1], block_shape=[BN, D])
    vd = tl.make_tensor_descriptor(V + bh * seqlen_k * D, shape=[seqlen_k, D], strides=[D, 1], block_shape=[BN, D])
    q = qd.load([m0, 0])
    # TILE_ROWS: row indices are tl.arange alone and m0 enters only scalars (the workaround);
    # otherwise rows = m0 + arange, the usual form.
    rel = tl.arange(0, BM)
    rows = m0 + rel
    cols0 = tl.arange(0, BN)
    m_i = tl.zeros([BM], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, D], dtype=tl.float32)
    hi = seqlen_k
    if CAUSAL:  # top-left aligned; seqlen_q == seqlen_k in the causal cases
        hi = tl.minimum(hi, m0 + BM)
    for start_n in tl.range(0, hi, BN, warp_specialize=WS):
        k = kd.load([start_n, 0])
        s = tl.dot(q, tl.trans(k)) * qk_scale
        cols = start_n + cols0
        # The key bound (a column mask, the same for every row): keys past seqlen_k read as 0.
        s = s + tl.where(cols < seqlen_k, 0.0, float("-inf"))[None, :]
        if CAUSAL:  # the row-dependent mask
            if TILE_ROWS:
                s = tl.where(rel[:, None] + (m0 - start_n) >= cols0[None, :], s, float("-inf"))
            else:
                s = tl.where(rows[:, None] >= cols[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = vd.load([start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc=acc)
        m_i = m_new
    out = acc / l_i[:, None]
    lse = m_i + tl.math.log2(l_i)
    if O_PTR_STORE:
        offs_d = tl.arange(0, D)
        if TILE_ROWS:
            tl.store(O + (bh * seqlen_q + m0) * D + rel[:, None] * D + offs_d[None, :], out.to(O.dtype.element_ty),
                     mask=rel[:, None] < seqlen_q - m0)
        else:
            tl.store(O + bh * seqlen_q * D + rows[:, None] * D + offs_d[None, :], out.to(O.dtype.element_ty),
                     mask=rows[:, None] < seqlen_q)
    else:
        od = tl.make_tensor_descriptor(O + bh * seqlen_q * D, shape=[seqlen_q, D], strides=[D, 1],
                                       block_shape=[BM, D])
        od.store([m0, 0], out.to(O.dtype.element_ty))
    if LSE_PTR_STORE:  # L is [bh, seqlen_q, 4]: the first of the four columns
        if TILE_ROWS:
            tl.store(L + (bh * seqlen_q + m0) * 4 + rel * 4, lse, mask=rel < seqlen_q - m0)
        else:
            tl.store(L + (bh * seqlen_q + rows) * 4, lse, mask=rows < seqlen_q)
    else:  # each value 4 times: a TMA row needs 16 bytes
        ld = tl.make_tensor_descriptor(L + bh * seqlen_q * 4, shape=[seqlen_q, 4], strides=[4, 1],
                                       block_shape=[BM, 4])
        ld.store([m0, 0], lse[:, None] + tl.zeros([BM, 4], dtype=tl.float32))


def run(sq, sk, causal, o_ptr, lse_ptr, ws, bm, bn=128, d=128, bh=4, stages=2, tile_rows=0):
    torch.manual_seed(0)
    q, k, v = (torch.randn(bh, n, d, device="cuda", dtype=torch.bfloat16) for n in (sq, sk, sk))
    o = torch.full_like(q, float("nan"))
    lse4 = torch.full((bh, sq, 4), float("nan"), device="cuda")
    scale = d ** -0.5
    try:
        fwd[(triton.cdiv(sq, bm), bh)](q, k, v, o, lse4, sq, sk, scale * 1.4426950408889634, D=d, BM=bm, BN=bn,
                                      WS=ws, CAUSAL=causal, O_PTR_STORE=o_ptr, LSE_PTR_STORE=lse_ptr,
                                      TILE_ROWS=tile_rows,
                                      num_warps=4, num_stages=stages)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a reproducer reports a failed compile and goes on
        return None, f"{type(exc).__name__}: {str(exc)[:100]}"
    logits = q.float() @ k.float().transpose(1, 2) * scale
    if causal:
        logits = logits.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device="cuda").tril().logical_not(),
                                    float("-inf"))
    ref = torch.softmax(logits, -1) @ v.float()
    o_err = (o.float() - ref).abs().nan_to_num(float("inf")).amax(dim=(0, 2))
    l_err = (lse4[..., 0] * 0.6931471805599453 - torch.logsumexp(logits, -1)).abs().nan_to_num(float("inf")).amax(dim=0)
    blocks = range(0, sq, 64)
    o_blocks = [o_err[i:i + 64].max().item() for i in blocks]
    l_blocks = [l_err[i:i + 64].max().item() for i in blocks]
    ok = all(e <= TOL for e in o_blocks + l_blocks)
    text = " ".join(f"{e:.3f}" for e in o_blocks) + " | lse " + " ".join(f"{e:.3f}" for e in l_blocks)
    return ok, text


def main():
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    print(f"triton {triton.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    print(f"max |error| per 64 query rows (O, then lse); ok when all <= {TOL}", flush=True)
    cases = [  # (name, causal, O pointer store, lse pointer store)
        ("descriptor stores", 0, 0, 0),
        ("O masked pointer store", 0, 1, 0),
        ("lse masked pointer store", 0, 0, 1),
        ("causal mask in the loop", 1, 0, 0),
    ]
    shapes = [(256, 256), (384, 512), (192, 320)]
    wrong = []
    # Each case with a row-dependent part again with tile rows (the workaround).
    runs = [(name + suffix, causal, o_ptr, lse_ptr, tile_rows) for name, causal, o_ptr, lse_ptr in cases
            for tile_rows, suffix in ((0, ""), (1, ", tile rows")) if not tile_rows or causal or o_ptr or lse_ptr]
    for label, causal, o_ptr, lse_ptr, tile_rows in runs:
        for sq, sk in shapes:
            if causal and sq != sk:
                continue
            for ws, bm, bn in ((1, 128, 128), (1, 128, 64), (0, 128, 128), (1, 64, 128)):
                ok, text = run(sq, sk, causal, o_ptr, lse_ptr, ws, bm, bn, tile_rows=tile_rows)
                tag = "FAIL-COMPILE" if ok is None else ("ok" if ok else "WRONG")
                print(f"{label:38s} sq{sq:<4d} sk{sk:<4d} ws={ws} bm={bm:<3d} bn={bn:<3d} {tag:12s} {text}", flush=True)
                if ok is False:
                    wrong.append((label, sq, sk, ws, bm, bn))
    controls_wrong = [w for w in wrong if w[3] == 0 or w[4] == 64]
    tile_rows_wrong = [w for w in wrong if w[0].endswith("tile rows")]
    print(f"wrong: {len(wrong)} case(s); of them controls (ws=0 or bm=64): {len(controls_wrong)}; "
          f"with tile rows (the workaround): {len(tile_rows_wrong)}")
    return 0 if not controls_wrong else 1


if __name__ == "__main__":
    sys.exit(main())
