"""Every input check raises before any launch, with what was expected and what came."""
import pytest
import torch

import mha
from mha import validation as V


def _qkv(device, b=1, sq=8, sk=8, hq=2, hk=2, d=16, dv=16, dtype=torch.float16):
    return (torch.randn(b, sq, hq, d, device=device, dtype=dtype), torch.randn(b, sk, hk, d, device=device, dtype=dtype),
            torch.randn(b, sk, hk, dv, device=device, dtype=dtype))


@pytest.mark.parametrize("bad,exc,match", [
    ("rank", V.ShapeError, "expected rank 4"),
    ("batch", V.ShapeError, "batch sizes differ"),
    ("kv_mismatch", V.ShapeError, "k and v must agree"),
    ("heads", V.ShapeError, "Hq=3, Hk=2"),
    ("dqk_mismatch", V.ShapeError, "q and k head dims differ"),
    ("mixed_dtype", V.AttentionDTypeError, "share one dtype"),
    ("int_dtype", V.AttentionDTypeError, "got torch.int32"),
    ("float64", V.AttentionDTypeError, "got torch.float64"),
    ("head_dim_small", V.HeadDimError, "got 4"),
    ("head_dim_large", V.HeadDimError, "got 264"),
    ("last_stride", V.LayoutError, "last dim must be contiguous"),
    ("window", V.WindowError, "got -2"),
    ("window_shape", V.WindowError, "pair"),
    ("sink_shape", V.ShapeError, r"expected shape \(2,\)"),
    ("sink_dtype", V.AttentionDTypeError, "float32"),
    ("dropout", V.DropoutError, "got 1.0"),
])
def test_dense_bad_inputs(bad, exc, match, device):
    q, k, v = _qkv(device)
    kw = {}
    if bad == "rank":
        q = q[0]
    elif bad == "batch":
        k, v = _qkv(device, b=2)[1:]
    elif bad == "kv_mismatch":
        v = v[:, :5]
    elif bad == "heads":
        q = _qkv(device, hq=3)[0]
    elif bad == "dqk_mismatch":
        k = _qkv(device, d=32)[1]
    elif bad == "mixed_dtype":
        v = v.float()
    elif bad == "int_dtype":
        q, k, v = (t.to(torch.int32) for t in (q, k, v))
    elif bad == "float64":
        q, k, v = (t.double() for t in (q, k, v))
    elif bad == "head_dim_small":
        q, k, v = _qkv(device, d=4, dv=4)
    elif bad == "head_dim_large":
        q, k, v = _qkv(device, d=264, dv=264)
    elif bad == "last_stride":
        q = torch.randn(1, 8, 2, 32, device=device, dtype=torch.float16)[..., ::2]
    elif bad == "window":
        kw["window_size"] = (-2, 0)
    elif bad == "window_shape":
        kw["window_size"] = 5
    elif bad == "sink_shape":
        kw["sink"] = torch.zeros(3, device=device)
    elif bad == "sink_dtype":
        kw["sink"] = torch.zeros(2, device=device, dtype=torch.float16)
    elif bad == "dropout":
        kw["dropout_p"] = 1.0
    with pytest.raises(exc, match=match):
        mha.flash_attn_func(q, k, v, **kw)


def test_errors_are_value_or_type_errors():
    assert issubclass(V.AttentionInputError, ValueError)
    assert issubclass(V.AttentionDTypeError, TypeError)


def _varlen(device, lens_q=(3, 5), lens_k=(4, 4)):
    tq, tk = sum(lens_q), sum(lens_k)
    q = torch.randn(tq, 2, 16, device=device, dtype=torch.float16)
    k = torch.randn(tk, 2, 16, device=device, dtype=torch.float16)
    cu = lambda lens: torch.tensor([0, lens[0], lens[0] + lens[1]], dtype=torch.int32, device=device)
    return q, k, k.clone(), cu(lens_q), cu(lens_k)


@pytest.mark.parametrize("bad,match", [
    ("int64", "expected an int32 tensor, got torch.int64"),
    ("decreasing", "non-decreasing"),
    ("total", "must equal the packed total 8"),
    ("first", "first entry 0"),
    ("length_mismatch", "same length"),
    ("max_seqlen", "smaller than the longest sequence 5"),
    ("rank", r"expected shape \(batch \+ 1,\)"),
])
def test_varlen_bad_cu_seqlens(bad, match, device):
    q, k, v, cu_q, cu_k = _varlen(device)
    max_q = 5
    if bad == "int64":
        cu_q = cu_q.long()
    elif bad == "decreasing":
        cu_q = torch.tensor([0, 6, 5, 8], dtype=torch.int32, device=device)
        cu_k = torch.tensor([0, 2, 4, 8], dtype=torch.int32, device=device)
    elif bad == "total":
        cu_q = torch.tensor([0, 3, 7], dtype=torch.int32, device=device)
    elif bad == "first":
        cu_q = torch.tensor([1, 3, 8], dtype=torch.int32, device=device)
    elif bad == "length_mismatch":
        cu_k = torch.tensor([0, 4, 4, 8], dtype=torch.int32, device=device)
    elif bad == "max_seqlen":
        max_q = 4
    elif bad == "rank":
        cu_q = cu_q[None]
    with pytest.raises(V.CuSeqlensError, match=match):
        mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, 4)


def test_varlen_wrong_rank(device):
    q, k, v, cu_q, cu_k = _varlen(device)
    with pytest.raises(V.ShapeError, match="expected rank 3"):
        mha.flash_attn_varlen_func(q[None], k, v, cu_q, cu_k, 5, 4)


def test_offset_overflow_detected_on_meta_tensors():
    """Sizes whose largest offset exceeds int32 are refused from metadata alone (no allocation)."""
    q = torch.empty(4, 65537, 64, 128, device="meta", dtype=torch.float16)  # > 2^31 elements
    k = torch.empty(4, 16, 8, 128, device="meta", dtype=torch.float16)
    with pytest.raises(V.IndexOverflowError, match="exceeds 2147483647"):
        mha.flash_attn_func(q, k, k)


def test_offset_overflow_from_strides_on_meta_tensors():
    """A small view whose strides reach far (a slice of a huge buffer) is refused too."""
    q = torch.empty(2, 8, 2, 16, device="meta", dtype=torch.float16).as_strided((2, 8, 2, 16), (2**31, 32, 16, 1))
    k = torch.empty(2, 8, 2, 16, device="meta", dtype=torch.float16)
    with pytest.raises(V.IndexOverflowError, match="q: largest element offset"):
        mha.flash_attn_func(q, k, k)


def test_output_overflow_detected_on_meta_tensors():
    """Inputs that fit but whose output (Dv > Dqk) would not."""
    q = torch.empty(1, 2**20, 16, 64, device="meta", dtype=torch.float16)
    k = torch.empty(1, 16, 1, 64, device="meta", dtype=torch.float16)
    v = torch.empty(1, 16, 1, 256, device="meta", dtype=torch.float16)
    with pytest.raises(V.IndexOverflowError, match="out: largest element offset"):
        mha.flash_attn_func(q, k, v)


def test_dropout_counter_overflow():
    with pytest.raises(V.IndexOverflowError, match="dropout"):
        V.check_rng_range(65536, 65536, 0)
