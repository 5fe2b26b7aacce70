"""One attention case run end to end: kernel vs float64 reference (and low-precision reference)."""
import dataclasses
from dataclasses import dataclass

import torch

import mha
from mha import reference
from checks import assert_close


@dataclass(frozen=True)
class Case:
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_k: int
    dqk: int
    dv: int
    causal: bool = False
    window: tuple = (-1, -1)
    sink: bool = False
    dropout_p: float = 0.0
    softmax_scale: float | None = None      # None: the API's default, 1/sqrt(dqk)


# The sm90 Gluon kernels' GPU cases (tests/mha/test_forward_gluon.py, test_backward_gluon.py):
# problems they take (lengths multiples of 128), and problems they leave to the Triton kernels.
GLUON_CASES = {
    "causal_gqa": Case(2, 256, 256, 4, 2, 128, 128, causal=True),
    "causal_sk_longer": Case(1, 256, 640, 2, 1, 128, 128, causal=True),   # bottom-right aligned diagonal
    "plain": Case(2, 384, 384, 4, 4, 128, 128),
    "plain_sq_longer": Case(1, 512, 256, 3, 1, 128, 128),                # Sq > Sk, no band
    "one_tile": Case(1, 128, 128, 1, 1, 128, 128, causal=True),          # one tile, on the diagonal
}
# The `pe` bucket's Gluon dK/dV (Dqk 192 / Dv 128) beside the Triton dQ: the same geometries, and
# GQA 8 (eight query heads through each key tile's ring).
GLUON_PE_CASES = {name: dataclasses.replace(case, dqk=192) for name, case in GLUON_CASES.items()} | {
    "causal_gqa8": Case(1, 1024, 1024, 8, 1, 192, 128, causal=True)}
# softmax_scale is any finite number. A kernel that scales the scores after their row max gets a
# negative scale wrong (the max of the scaled row is the min of the raw one), and one that scales
# after the mask gets 0 wrong (0 times a masked -inf is NaN). Lengths the Gluon kernels take.
SCALE_CASES = {
    "causal_negative": Case(1, 256, 256, 2, 1, 128, 128, causal=True, softmax_scale=-0.1),
    "plain_negative": Case(1, 256, 256, 2, 1, 128, 128, softmax_scale=-0.1),
    "causal_zero": Case(1, 256, 256, 2, 1, 128, 128, causal=True, softmax_scale=0.0),
}
GLUON_FALLBACK_CASES = {
    "sq200": Case(1, 200, 256, 2, 1, 128, 128, causal=True),             # Sq not a multiple of 128
    "sk300": Case(1, 256, 300, 2, 1, 128, 128),                          # Sk not a multiple of 128
    "causal_sq_longer": Case(1, 384, 256, 2, 2, 128, 128, causal=True),  # rows that see no key
}


def _leaf(t):
    return t.detach().clone().requires_grad_(True)


LEAVES = ("q", "k", "v", "sink")


def _copy(name, t):
    """Default placement of a kernel input: a contiguous copy (a leaf for the differentiable ones)."""
    return _leaf(t) if name in LEAVES else t


def run_dense(case: Case, dtype, device, backward=True, seed=0, config=None, ref_window=None, place=_copy):
    """The kernel with case.window against the reference with ref_window (default case.window).
    place(name, tensor) gives the tensor the kernels get for q, k, v, sink and dout: the same
    values, a leaf that requires grad for the names in LEAVES (test_canary_padding puts them
    inside padding). The references compute from the unplaced tensors."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(case.batch, case.seqlen_q, case.heads_q, case.dqk, generator=gen).to(device, dtype)
    k = torch.randn(case.batch, case.seqlen_k, case.heads_k, case.dqk, generator=gen).to(device, dtype)
    v = torch.randn(case.batch, case.seqlen_k, case.heads_k, case.dv, generator=gen).to(device, dtype)
    sink = torch.randn(case.heads_q, generator=gen).to(device) if case.sink else None
    do = torch.randn(case.batch, case.seqlen_q, case.heads_q, case.dv, generator=gen).to(device, dtype)
    keep = None
    if case.dropout_p > 0:
        torch.manual_seed(seed)
        rng_seed, rng_offset = mha.draw_seed()
        torch.manual_seed(seed)
        keep = mha.dropout_mask(case.batch, case.heads_q, case.seqlen_q, case.seqlen_k, case.dropout_p,
                                rng_seed, rng_offset, device=device)
    inputs = [place("q", q), place("k", k), place("v", v)] + ([place("sink", sink)] if case.sink else [])
    out, lse = mha.flash_attn_func(*inputs[:3], dropout_p=case.dropout_p, causal=case.causal,
                                   window_size=case.window, sink=inputs[3] if case.sink else None,
                                   return_lse=True, config=config, softmax_scale=case.softmax_scale)
    kw = dict(causal=case.causal, window=case.window if ref_window is None else ref_window,
              dropout_p=case.dropout_p, keep_mask=keep, softmax_scale=case.softmax_scale)
    refs = {}
    for name, cdt in (("ref", torch.float64), ("lowp", dtype)):
        leaves = [_leaf(t) for t in ([q, k, v] + ([sink] if case.sink else []))]
        o, l = reference.attention(*leaves[:3], sink=leaves[3] if case.sink else None, compute_dtype=cdt, **kw)
        grads = torch.autograd.grad(o, leaves, do.to(cdt)) if backward else None
        refs[name] = (o, l, grads)
    assert out.shape == (case.batch, case.seqlen_q, case.heads_q, case.dv) and out.dtype == dtype
    assert lse.shape == (case.batch, case.heads_q, case.seqlen_q) and lse.dtype == torch.float32
    assert_close("out", out, refs["ref"][0], refs["lowp"][0], dtype)
    assert_close("lse", lse, refs["ref"][1], refs["lowp"][1].float(), torch.float32 if dtype == torch.float32 else dtype)
    if backward:
        grads = torch.autograd.grad(out, inputs, place("dout", do))
        for name, g, r, lp in zip(("dq", "dk", "dv", "dsink"), grads, refs["ref"][2], refs["lowp"][2]):
            assert g.shape == r.shape and g.dtype == inputs[["dq", "dk", "dv", "dsink"].index(name)].dtype
            assert_close(name, g, r, lp, dtype)


def run_varlen(lens_q, lens_k, heads_q, heads_k, dqk, dv, dtype, device, causal=False, window=(-1, -1),
               sink=False, dropout_p=0.0, backward=True, seed=0, config=None, ref_window=None, place=_copy):
    """As run_dense; place also gets cu_seqlens_q and cu_seqlens_k."""
    gen = torch.Generator().manual_seed(seed)
    cu_q = torch.tensor([0] + torch.tensor(lens_q).cumsum(0).tolist(), dtype=torch.int32, device=device)
    cu_k = torch.tensor([0] + torch.tensor(lens_k).cumsum(0).tolist(), dtype=torch.int32, device=device)
    tq, tk = sum(lens_q), sum(lens_k)
    q = torch.randn(tq, heads_q, dqk, generator=gen).to(device, dtype)
    k = torch.randn(tk, heads_k, dqk, generator=gen).to(device, dtype)
    v = torch.randn(tk, heads_k, dv, generator=gen).to(device, dtype)
    s = torch.randn(heads_q, generator=gen).to(device) if sink else None
    do = torch.randn(tq, heads_q, dv, generator=gen).to(device, dtype)
    keep = None
    if dropout_p > 0:
        torch.manual_seed(seed)
        rng_seed, rng_offset = mha.draw_seed()
        torch.manual_seed(seed)
        keep = mha.dropout_mask(len(lens_q), heads_q, max(lens_q), max(lens_k), dropout_p, rng_seed, rng_offset,
                                device=device)
    inputs = [place("q", q), place("k", k), place("v", v)] + ([place("sink", s)] if sink else [])
    out, lse = mha.flash_attn_varlen_func(*inputs[:3], place("cu_seqlens_q", cu_q), place("cu_seqlens_k", cu_k),
                                          max(lens_q), max(lens_k), dropout_p=dropout_p,
                                          causal=causal, window_size=window,
                                          sink=inputs[3] if sink else None, return_lse=True, config=config)
    assert lse.shape == (heads_q, tq)
    refs = {}
    for name, cdt in (("ref", torch.float64), ("lowp", dtype)):
        leaves = [_leaf(t) for t in ([q, k, v] + ([s] if sink else []))]
        o, l = reference.varlen_attention(*leaves[:3], cu_q, cu_k, sink=leaves[3] if sink else None,
                                          causal=causal, window=window if ref_window is None else ref_window,
                                          dropout_p=dropout_p, keep_mask=keep,
                                          compute_dtype=cdt)
        grads = torch.autograd.grad(o, leaves, do.to(cdt)) if backward else None
        refs[name] = (o, l, grads)
    assert_close("out", out, refs["ref"][0], refs["lowp"][0], dtype)
    assert_close("lse", lse, refs["ref"][1], refs["lowp"][1].float(), torch.float32 if dtype == torch.float32 else dtype)
    if backward:
        grads = torch.autograd.grad(out, inputs, place("dout", do))
        for name, g, r, lp in zip(("dq", "dk", "dv", "dsink"), grads, refs["ref"][2], refs["lowp"][2]):
            assert_close(name, g, r, lp, dtype)


TRITON_BACKWARD = ("bwd_preprocess", "bwd_dkdv", "bwd_dq")


def check_strided_backward(device, dtype, seqlen, launched, fast):
    """For the backward kernels `fast` that read whole tiles by TMA (Gluon, warp-specialized): a
    strided q runs the Triton backward instead, and a strided dO is copied, so its gradients equal
    a contiguous dO's bit for bit. `launched` is the fixture that records the kernels run."""
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(1, seqlen, 2, 256, generator=gen).to(device, dtype)[..., :128]
    k, v = (torch.randn(1, seqlen, 2, 128, generator=gen).to(device, dtype) for _ in range(2))
    do_wide = torch.randn(1, seqlen, 2, 256, generator=gen).to(device, dtype)
    grads = {}
    for name, qq, do in (("strided_q", q, do_wide[..., :128]), ("contiguous", q.contiguous(), do_wide[..., :128]),
                         ("reference", q.contiguous(), do_wide[..., :128].contiguous())):
        leaves = [t.detach().requires_grad_(True) for t in (qq, k, v)]     # detach keeps q's strides
        launched.clear()
        out = mha.flash_attn_func(*leaves, causal=True)
        grads[name] = torch.autograd.grad(out, leaves, do)
        assert tuple(launched[1:]) == (TRITON_BACKWARD if name == "strided_q" else fast), name
    assert all(torch.equal(a, b) for a, b in zip(grads["contiguous"], grads["reference"]))
    for a, b in zip(grads["strided_q"], grads["reference"]):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=0)


def check_two_backwards_identical(device, dqk, deterministic, launched, kernels):
    """Two backwards of one causal GQA problem (bf16, Dv 128) give the same gradients bit for bit,
    and `kernels` ran."""
    gen = torch.Generator().manual_seed(3)
    q, k, v, do = (torch.randn(2, 512, h, d, generator=gen).to(device, torch.bfloat16)
                   for h, d in ((8, dqk), (2, dqk), (2, 128), (8, 128)))
    grads = []
    for _ in range(2):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = mha.flash_attn_func(*leaves, causal=True, deterministic=deterministic)
        grads.append(torch.autograd.grad(out, leaves, do))
    assert all(torch.equal(a, b) for a, b in zip(*grads))
    assert set(kernels) <= set(launched)
