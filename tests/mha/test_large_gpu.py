"""The H200 decode workload whose K cache has 12.9e9 elements (beyond int32 element offsets):
only a GPU with enough memory runs it; the interpreter equivalent is
test_validation.test_large_base_offsets_are_64bit."""
import pytest
import torch

import mha
from mha.reference import attention

NEEDED_BYTES = 50 * 2**30  # k 25.8 GB + v 17.2 GB in fp16, plus slack


def _free_bytes() -> int:
    """Free GPU memory once the caching allocator has returned what earlier tests left cached:
    without that, a test after another large one sees too little and skips."""
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info()[0]


@pytest.mark.gpu
def test_decode_with_kv_cache_past_int32():
    if _free_bytes() < NEEDED_BYTES:
        pytest.skip("needs 50 GiB of free GPU memory")
    torch.manual_seed(0)
    b, sk, h = 64, 8192, 128
    q = torch.randn(b, 1, h, 192, device="cuda", dtype=torch.bfloat16)
    k = torch.empty(b, sk, h, 192, device="cuda", dtype=torch.bfloat16)
    v = torch.empty(b, sk, h, 128, device="cuda", dtype=torch.bfloat16)
    for i in range(b):  # fill batch by batch: a randn of the whole cache would need fp32 scratch
        k[i].normal_()
        v[i].normal_()
    assert k.numel() > 2**31
    out = mha.flash_attn_func(q, k, v, causal=True)
    torch.cuda.synchronize()
    # The last batches sit past 2^31 elements in k and v: a 32-bit base would read other batches.
    for i in (0, b // 2, b - 1):
        ref, _ = attention(q[i:i + 1], k[i:i + 1], v[i:i + 1], causal=True, compute_dtype=torch.float32)
        torch.testing.assert_close(out[i:i + 1].float(), ref, atol=2e-2, rtol=2e-2)


# Past 4 GiB: element offsets beyond 2^31 in q, out, dO and dQ, both passes. The kernels form each
# (batch, head) slice base in int64 and offsets inside a slice in int32 (mha.launch's docstring);
# a 32-bit base would wrap and address another batch: a wrong answer, not a fault. The reference
# is float64 over whole KV-head groups on both sides of the 2^31-element boundary of q.
BIG = dict(b=5, s=65536, hq=64, hk=8, d=128)
BIG_NEEDED_BYTES = 40 * 2**30   # q/out/dO/dQ 5.4 GB each in bf16, k/v/dK/dV 0.7 GB each, reference scratch
CHUNK = 4096


def _reference_group(q, k, v, dout, causal):
    """float64 out, lse, dq of the group's query heads and dk, dv of its KV head; q/dout
    (S, G, D), k/v (S, D). Chunked over query rows so no S x S matrix is held."""
    s, g, d = q.shape
    scale = d ** -0.5
    kf, vf = k.double(), v.double()
    out = torch.empty(s, g, d, dtype=torch.float64, device=q.device)
    lse = torch.empty(g, s, dtype=torch.float64, device=q.device)
    dq = torch.empty_like(out)
    dk, dv = torch.zeros_like(kf), torch.zeros_like(vf)
    cols = torch.arange(s, device=q.device)
    for h in range(g):
        for start in range(0, s, CHUNK):
            rows = torch.arange(start, min(start + CHUNK, s), device=q.device)
            qc, doc = q[rows, h].double(), dout[rows, h].double()
            scores = (qc @ kf.T) * scale
            if causal:
                scores.masked_fill_(cols[None, :] > rows[:, None], float("-inf"))
            m = torch.logsumexp(scores, dim=-1)
            p = torch.exp(scores - m[:, None])
            o = p @ vf
            dp = doc @ vf.T
            ds = p * (dp - (doc * o).sum(-1, keepdim=True))
            out[rows, h], lse[h, rows] = o, m
            dq[rows, h] = (ds @ kf) * scale
            dk += (ds.T @ qc) * scale
            dv += p.T @ doc
    return out, lse, dq, dk, dv


def _close(name, got, want, tol=2e-2):
    err = (got.double() - want).norm() / want.norm()
    assert err < tol, f"{name}: relative error {err:.3g} > {tol} (wrong rows read or written?)"


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
def test_both_passes_past_4gib(causal):
    if _free_bytes() < BIG_NEEDED_BYTES:
        pytest.skip(f"needs {BIG_NEEDED_BYTES >> 30} GiB of free GPU memory")
    torch.manual_seed(0)
    b, s, hq, hk, d = BIG["b"], BIG["s"], BIG["hq"], BIG["hk"], BIG["d"]
    q = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    assert q.numel() > 2**31 and q.numel() * q.element_size() > 4 * 2**30
    out, lse = mha.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    dout = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    torch.cuda.synchronize()
    group = hq // hk
    # The last group before q's element 2^31 (batch 3, the last KV head) and the first after it.
    boundary_batch = 2**31 // (s * hq * d)
    for bi, kv in ((boundary_batch - 1, hk - 1), (boundary_batch, 0), (b - 1, hk - 1)):
        heads = slice(kv * group, (kv + 1) * group)
        ref = _reference_group(q[bi, :, heads].detach(), k[bi, :, kv].detach(), v[bi, :, kv].detach(),
                               dout[bi, :, heads], causal)
        where = f"batch {bi}, KV head {kv}"
        for name, got, want in zip(("out", "lse", "dq", "dk", "dv"),
                                   (out[bi, :, heads], lse[bi, heads], dq[bi, :, heads], dk[bi, :, kv], dv[bi, :, kv]),
                                   ref):
            _close(f"{where}: {name}", got, want)


@pytest.mark.gpu
def test_batch_stride_past_int32():
    """A batch stride of more than 2^31 elements (views into one 8.6 GB buffer): Triton passes
    such a stride as i64, and the int64 slice base must use it whole."""
    stride_b = 2**31 + 4096
    if _free_bytes() < 2 * stride_b * 2 + (8 << 30):
        pytest.skip("needs 17 GiB of free GPU memory")
    torch.manual_seed(0)
    b, s, h, d = 2, 333, 8, 128
    buf = torch.zeros(b * stride_b, device="cuda", dtype=torch.bfloat16)
    views = [buf.as_strided((b, s, h, d), (stride_b, h * d, d, 1), storage_offset=i * s * h * d) for i in range(3)]
    src = [torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    for view, x in zip(views, src):
        view.copy_(x)
    q, k, v = (t.requires_grad_() for t in views)
    assert q.stride(0) > 2**31
    out = mha.flash_attn_func(q, k, v, causal=True)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref_in = [x.double().requires_grad_() for x in src]
    ref, _ = attention(*ref_in, causal=True)
    ref_grads = torch.autograd.grad(ref, ref_in, dout.double())
    _close("out", out, ref)
    for name, got, want in zip(("dq", "dk", "dv"), grads, ref_grads):
        _close(name, got, want)
