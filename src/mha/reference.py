"""Plain einsum + masked-softmax attention, independent of the kernels, for tests.

Computes in the dtype of its inputs after an optional cast (`compute_dtype`, float64 by default):
the float64 run is the reference, a run in the input dtype estimates the rounding error a
low-precision implementation of the same math makes (flash-attn's tolerance rule).
"""
from __future__ import annotations

import math

import torch


def visibility(seqlen_q: int, seqlen_k: int, causal: bool, window: tuple[int, int], device) -> torch.Tensor:
    """Bool (Sq, Sk): key j visible to query i, bottom-right aligned (as flash-attn)."""
    left, right = window
    if causal:
        right = 0
    # A side this long sees every key (left >= Sk - 1, right >= Sq - 1); cut so that i - left and
    # i + right stay within int64 for any int a caller passes (2**63 - 1 wrapped, 2**70 raised).
    left, right = min(left, seqlen_k), min(right, seqlen_q)
    i = torch.arange(seqlen_q, device=device)[:, None] + (seqlen_k - seqlen_q)
    j = torch.arange(seqlen_k, device=device)[None, :]
    ok = torch.ones((seqlen_q, seqlen_k), dtype=torch.bool, device=device)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


def attention(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), sink=None, dropout_p=0.0,
              keep_mask=None, compute_dtype=torch.float64):
    """Dense attention; q (B, Sq, Hq, Dqk), k (B, Sk, Hk, Dqk), v (B, Sk, Hk, Dv).

    Returns (out (B, Sq, Hq, Dv), lse (B, Hq, Sq)) in compute_dtype. keep_mask (B, Hq, Sq, Sk)
    bool is the dropout keep-mask (required when dropout_p > 0).
    """
    b, sq, hq, dqk = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(dqk) if softmax_scale is None else softmax_scale
    qf, kf, vf = (t.to(compute_dtype) for t in (q, k, v))
    group = hq // hk
    kf = kf.repeat_interleave(group, dim=2)
    vf = vf.repeat_interleave(group, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", qf, kf) * scale
    ok = visibility(sq, sk, causal, window, q.device)
    s = s.masked_fill(~ok, float("-inf"))
    if sink is not None:
        sink_col = sink.to(compute_dtype)[None, :, None, None].expand(b, hq, sq, 1)
        s = torch.cat([s, sink_col], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    # Rows with nothing visible: probabilities 0 (not NaN), output 0, lse -inf.
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    p = torch.where(torch.isinf(lse)[..., None], torch.zeros_like(p), p)
    if sink is not None:
        p = p[..., :-1]
    if dropout_p > 0:
        if keep_mask is None:
            raise ValueError("dropout_p > 0 needs the keep_mask the kernel used (mha.dropout_mask)")
        p = p * keep_mask.to(compute_dtype) / (1.0 - dropout_p)
    out = torch.einsum("bhqk,bkhd->bqhd", p.to(compute_dtype), vf)
    return out, lse


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, *, keep_mask=None, **kw):
    """Packed attention: loops over sequences. keep_mask (batch, Hq, max_sq, max_sk) as drawn by
    mha.dropout_mask for varlen. Returns (out (total_q, Hq, Dv), lse (Hq, total_q))."""
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    dtype = kw.get("compute_dtype", torch.float64)
    out = torch.zeros((q.shape[0], q.shape[1], v.shape[-1]), dtype=dtype, device=q.device)
    lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=dtype, device=q.device)
    for i in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[i], cq[i + 1], ck[i], ck[i + 1]
        if q1 == q0:
            continue
        mask = None if keep_mask is None else keep_mask[i:i + 1, :, : q1 - q0, : k1 - k0]
        o, l = attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], keep_mask=mask, **kw)
        out[q0:q1] = o[0]
        lse[:, q0:q1] = l[0]
    return out, lse


# Tolerances as flash-attn's tests: a result is right when its error against the exact reference
# is at most max(2 x the error of the same math in the input dtype, a floor per dtype scaled by
# the reference's magnitude). One rule for the kernel tests and mha.bench's check.
TOLERANCE_FLOORS = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-5}


def mismatch(name: str, got, exact, lowp, dtype) -> str | None:
    """What is wrong with `got` (a kernel's result) against `exact` (the reference in float64 or
    float32) by the rule above, `lowp` being the same math in `dtype`; None when it is right."""
    got, lowp = got.to(exact.dtype), lowp.to(exact.dtype)
    finite = torch.isfinite(exact)
    if not torch.equal(finite, torch.isfinite(got)):
        return f"{name}: inf/nan pattern differs from the reference"
    if not finite.any():
        return None
    ref_err = (lowp[finite] - exact[finite]).abs().max().item()
    scale = max(1.0, exact[finite].abs().max().item())
    atol = max(2 * ref_err, TOLERANCE_FLOORS[dtype] * scale)
    err = (got[finite] - exact[finite]).abs().max().item()
    if err > atol:
        return f"{name}: max error {err:.3g} > atol {atol:.3g} (low-precision ref error {ref_err:.3g})"
    if not torch.equal(got[~finite], exact[~finite]):
        return f"{name}: non-finite values differ"
    return None
