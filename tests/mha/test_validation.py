"""Every input check raises before any launch, with what was expected and what came."""
import re
import sys

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
    ("sink_dtype", V.AttentionDTypeError, r"float32 or the inputs' dtype torch.float16, got torch.float64; pass sink.float\(\)"),
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
        kw["sink"] = torch.zeros(2, device=device, dtype=torch.float64)
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


def _meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, device="meta", dtype=dtype)


def _validates_through_api(monkeypatch, q, k, v):
    """Every size check before a launch passes for these meta tensors: the call reaches the last
    check, which refuses them for having no data. With that one lifted and the launch stubbed
    out, returns the geometry the launch would have got."""
    with pytest.raises(V.MetaTensorError, match="q: a meta tensor"):
        mha.flash_attn_func(q, k, v)
    seen = {}

    def fake_forward(spec, geo, q, k, v, *rest, **options):
        seen["geo"] = geo
        return (torch.empty((geo.batch, geo.seqlen_q, geo.heads_q, v.shape[-1]), device="meta", dtype=q.dtype),
                torch.empty((geo.batch, geo.heads_q, geo.seqlen_q), device="meta"))

    monkeypatch.setattr(V, "check_has_data", lambda **_tensors: None)
    monkeypatch.setattr(mha.launch, "forward", fake_forward)
    mha.flash_attn_func(q, k, v)
    return seen["geo"]


def test_huge_decode_shape_validates(monkeypatch):
    """The H200 decode workload: k has 12.9e9 elements. Batch/head bases are int64 in the kernels,
    so only the in-slice offsets (8192 rows x 24576) must fit in int32: accepted."""
    q, k, v = _meta(64, 1, 128, 192), _meta(64, 8192, 128, 192), _meta(64, 8192, 128, 128)
    assert k.numel() > 12 * 10**9 and V.max_offset(k) > V.INT32_MAX
    V.check_attention_offsets(q, k, v, 1, 8192, _meta(64, 1, 128, 128))
    geo = _validates_through_api(monkeypatch, q, k, v)
    assert (geo.batch, geo.seqlen_q, geo.seqlen_k, geo.heads_q, geo.heads_k) == (64, 1, 8192, 128, 128)


def test_large_batch_stride_view_validates(monkeypatch):
    """A small view whose batch stride reaches past 2^31 (a slice of a huge buffer) is fine now."""
    q = _meta(2, 8, 2, 16).as_strided((2, 8, 2, 16), (2**31, 32, 16, 1))
    k = _meta(2, 8, 2, 16)
    _validates_through_api(monkeypatch, q, k, k)


def test_slice_overflow_detected_on_meta_tensors():
    """One (batch, head) slice of k spans 2^19 rows x 8192 elements: past int32, refused."""
    q = _meta(1, 16, 64, 128)
    k = _meta(1, 2**19, 64, 128)
    with pytest.raises(V.IndexOverflowError, match=r"k: offset \d+ inside one \(batch, head\) slice "
                                                   r"\(524288 rows x row stride 8192") as e:
        mha.flash_attn_func(q, k, k)
    assert "exceeds 2147483647" in str(e.value)


def test_slice_overflow_from_row_stride_on_meta_tensors():
    """A view whose row stride is huge overflows within a slice even with few rows."""
    q = _meta(2, 8, 2, 16).as_strided((2, 8, 2, 16), (32, 2**29, 16, 1))
    k = _meta(2, 8, 2, 16)
    with pytest.raises(V.IndexOverflowError, match="q: offset"):
        mha.flash_attn_func(q, k, k)


def test_output_slice_overflow_detected_on_meta_tensors():
    """Inputs that fit but whose output slice (Dv > Dqk, allocated contiguous) would not."""
    q = _meta(1, 2**17, 128, 64)   # slice: 2^17 rows x 8192 -> fits
    k = _meta(1, 16, 1, 64)
    v = _meta(1, 16, 1, 256)       # out rows are 128 x 256 = 32768 elements -> 2^32
    with pytest.raises(V.IndexOverflowError, match="out: offset"):
        mha.flash_attn_func(q, k, v)


def test_varlen_offsets_use_longest_sequence_not_total():
    """Packed tensors: the sequence start is int64 in the kernels, so only the longest sequence
    counts. 3 x 2^17 rows of 8192 elements pass 2^31 in total but fit per sequence."""
    q = _meta(3 * 2**17, 128, 64)
    out = _meta(3 * 2**17, 128, 64)
    assert V.max_offset(q) > V.INT32_MAX
    V.check_attention_offsets(q, q, q, 2**17, 2**17, out)
    with pytest.raises(V.IndexOverflowError, match="q: offset"):
        V.check_attention_offsets(q, q, q, 2**19, 2**17, out)


def test_large_base_offsets_are_64bit(device):
    """Batch bases past 2^31 elements with a batch stride that fits int32 (2^30): the product
    b * stride_b wraps in 32 bits, so this compares against the reference only with int64 bases.
    The 8 GiB buffer is virtual (CPU allocations are lazy); only the few touched pages are written."""
    if device != "cpu":
        pytest.skip("CPU interpreter variant (on a GPU the 8 GiB buffer would be real memory)")
    from mha.reference import attention
    torch.manual_seed(0)
    # Not filled (conftest's unwritten_entries_read_as_nan), or the 8 GiB would be written; the
    # outputs below start as NaN again.
    filling = torch.utils.deterministic.fill_uninitialized_memory
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        buf = torch.empty(2 * 2**30 + 4096, dtype=torch.float32)
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = filling
    views = [buf.as_strided((3, 16, 1, 16), (2**30, 16, 16, 1), storage_offset=i * 256) for i in range(3)]
    src = [torch.randn(3, 16, 1, 16) for _ in range(3)]
    for view, x in zip(views, src):
        view.copy_(x)
    q, k, v = (t.requires_grad_() for t in views)
    assert V.max_offset(k) > V.INT32_MAX and k.stride(0) < 2**31
    out = mha.flash_attn_func(q, k, v, causal=True)
    dout = torch.randn_like(out)
    out.backward(dout)
    ref_in = [x.clone().requires_grad_() for x in src]
    ref, _ = attention(*ref_in, causal=True)
    ref.backward(dout.double())
    torch.testing.assert_close(out, ref.float(), atol=1e-4, rtol=1e-4)
    for got, want in zip((q.grad, k.grad, v.grad), ref_in):
        torch.testing.assert_close(got, want.grad, atol=1e-4, rtol=1e-4)


def test_dropout_counter_overflow():
    with pytest.raises(V.IndexOverflowError, match="dropout"):
        V.check_rng_range(65536, 65536, 0)


@pytest.fixture
def host_reads(monkeypatch):
    """Counts the device-to-host reads cu_seqlens validation makes (each one is a sync on a GPU)."""
    reads = []
    real = V._host_values

    def counting(t):
        reads.append(t)
        return real(t)

    monkeypatch.setattr(V, "_host_values", counting)
    return reads


@pytest.fixture
def cached_like_a_gpu(monkeypatch):
    """The cache of cu_seqlens summaries serves GPU tensors only (a read there is a sync); these
    tests exercise it on whatever device they run, the CPU included."""
    monkeypatch.setattr(V, "_CACHE_CPU_TENSORS", True)


def test_cpu_cu_seqlens_are_read_every_call(host_reads, device):
    """A host read costs no sync on the CPU, and only a fresh read sees a write that bypasses the
    version counter (tests/mha/test_validation_faults.py): never cached."""
    if device != "cpu":
        pytest.skip("CPU tensors run only under the interpreter")
    q, k, v, cu_q, cu_k = _varlen(device)
    for _ in range(2):
        mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4)
    assert [id(t) for t in host_reads] == [id(cu_q), id(cu_k)] * 2
    assert id(cu_q) not in V._values_cache


def test_backward_revalidates_from_the_cache(host_reads, cached_like_a_gpu, device):
    """The backward checks the saved cu_seqlens again: on a GPU a cache hit, no second sync."""
    q, k, v, cu_q, cu_k = _varlen(device)
    q.requires_grad_()
    mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4).sum().backward()
    assert [id(t) for t in host_reads] == [id(cu_q), id(cu_k)]
    assert q.grad is not None


def test_cu_seqlens_read_once_per_tensor(host_reads, cached_like_a_gpu, device):
    q, k, v, cu_q, cu_k = _varlen(device)
    for _ in range(3):
        mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4)
    assert [id(t) for t in host_reads] == [id(cu_q), id(cu_k)]
    # Checks against this call's arguments still run on every call, from the cached summary.
    with pytest.raises(V.CuSeqlensError, match="smaller than the longest sequence 5"):
        mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 4)
    with pytest.raises(V.CuSeqlensError, match="must equal the packed total 7"):
        mha.flash_attn_varlen_func(q[:7], k, v, cu_q, cu_k, 5, 4)
    assert len(host_reads) == 2


def test_cu_seqlens_in_place_change_revalidates(host_reads, cached_like_a_gpu, device):
    q, k, v, cu_q, cu_k = _varlen(device)
    mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4)
    cu_q.add_(0)  # same values, new version: read again
    mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4)
    assert [id(t) for t in host_reads] == [id(cu_q), id(cu_k), id(cu_q)]
    cu_q[1] = 9  # [0, 9, 8]: now bad
    with pytest.raises(V.CuSeqlensError, match="non-decreasing values, got 9 then 8"):
        mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 4)
    cu_k.view(3)[2] = 7  # through a view: the version counter is shared
    with pytest.raises(V.CuSeqlensError, match="last entry 7 must equal the packed total 8"):
        mha.flash_attn_varlen_func(q, k, v, cu_q.new_tensor([0, 3, 8]), cu_k, 5, 4)


def test_cu_seqlens_new_bad_tensor_raises(cached_like_a_gpu, device):
    q, k, v, cu_q, cu_k = _varlen(device)
    mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4)
    del cu_q  # its id may be reused by the next tensor: the weakref check must not be fooled
    bad = torch.tensor([0, 6, 5, 8], dtype=torch.int32, device=device)
    with pytest.raises(V.CuSeqlensError, match="non-decreasing"):
        mha.flash_attn_varlen_func(q, k, v, bad, torch.tensor([0, 2, 4, 8], dtype=torch.int32, device=device), 6, 4)
    bad_first = torch.tensor([1, 3, 8], dtype=torch.int32, device=device)
    with pytest.raises(V.CuSeqlensError, match="first entry 0"):
        mha.flash_attn_varlen_func(q, k, v, bad_first, cu_k, 5, 4)


def test_cu_seqlens_cache_entry_dropped_with_tensor(cached_like_a_gpu, device):
    cu = torch.tensor([0, 3, 8], dtype=torch.int32, device=device)
    V.check_cu_seqlens(cu, cu, 8, 8, 5, 5, cu.device)
    key = id(cu)
    assert key in V._values_cache
    del cu
    assert key not in V._values_cache


def test_cu_seqlens_inference_tensors_validated_every_call(host_reads, cached_like_a_gpu, device):
    """Inference tensors have no version counter, so a change could not be seen: never cached."""
    q, k, v, _, _ = _varlen(device)
    with torch.inference_mode():
        cu_q = torch.tensor([0, 3, 8], dtype=torch.int32, device=device)
        cu_k = torch.tensor([0, 4, 8], dtype=torch.int32, device=device)
        for _ in range(2):
            mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4)
        assert len(host_reads) == 4
        cu_q[1] = 9
        with pytest.raises(V.CuSeqlensError, match="non-decreasing"):
            mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 4)


# Arguments that used to be coerced into something else: refused before any launch.
@pytest.mark.parametrize("kw,exc,match", [
    (dict(window_size=(1.9, 0)), TypeError, "window_size left: expected an int, got float 1.9"),
    (dict(window_size=(4, "0")), TypeError, "window_size right: expected an int, got str"),
    (dict(window_size=(True, 0)), TypeError, "got the bool True"),
    (dict(dropout_p="0.1"), TypeError, "dropout_p: expected a number"),
    (dict(causal="no"), TypeError, "causal: expected a bool, got str 'no'"),
    (dict(causal=2), TypeError, "causal: expected a bool"),
    (dict(softmax_scale=float("nan")), ValueError, "softmax_scale: expected a finite number, got nan"),
    (dict(softmax_scale=float("inf")), ValueError, "got inf"),
    (dict(softmax_scale="0.125"), TypeError, "softmax_scale: expected a number"),
    (dict(return_lse="no"), TypeError, "return_lse: expected a bool, got str 'no'"),
    (dict(return_lse=None), TypeError, "return_lse: expected a bool, got NoneType None"),
], ids=["window_float", "window_str", "window_bool", "dropout_str", "causal_str", "causal_int",
        "scale_nan", "scale_inf", "scale_str", "return_lse_str", "return_lse_none"])
def test_arguments_are_refused_not_coerced(kw, exc, match, device):
    q, k, v = _qkv(device)
    with pytest.raises(exc, match=match) as info:
        mha.flash_attn_func(q, k, v, **kw)
    assert isinstance(info.value, V.AttentionInputError)   # one family for callers


def test_arguments_that_are_what_they_say_still_pass(device):
    import numpy as np

    q, k, v = _qkv(device)
    ref = mha.flash_attn_func(q, k, v, causal=True, window_size=(3, 0), softmax_scale=0.25)
    same = mha.flash_attn_func(q, k, v, causal=1, window_size=(np.int64(3), torch.tensor(0)), softmax_scale=np.float32(0.25))
    assert torch.equal(ref, same)


def test_float_max_seqlen_is_refused(device):
    q, k, v, cu_q, cu_k = _varlen(device)
    with pytest.raises(TypeError, match=r"max_seqlen_q: expected an int, got float 5.0"):
        mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5.0, 4)
    with pytest.raises(TypeError, match="max_seqlen_k: expected an int"):
        mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, "4")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs only where there is no GPU here")
def test_bf16_under_the_interpreter_is_refused_with_the_reason():
    q, k, v = _qkv("cpu", dtype=torch.bfloat16)
    with pytest.raises(V.AttentionDTypeError, match="Triton interpreter.*garbage.*upstream Triton bug"):
        mha.flash_attn_func(q, k, v)


def test_bf16_rule_names_the_arch():
    V.check_runnable_dtype("bf16", "sm90")
    V.check_runnable_dtype("fp16", "interpreter")
    with pytest.raises(V.AttentionDTypeError, match="use fp16 or fp32 on the CPU"):
        V.check_runnable_dtype("bf16", "interpreter")


def test_sink_in_the_inputs_dtype_is_upcast_and_its_gradient_keeps_its_dtype(device):
    q, k, v = _qkv(device)
    sink16 = torch.tensor([0.5, -1.0], device=device, dtype=torch.float16, requires_grad=True)
    sink32 = sink16.detach().float().requires_grad_(True)
    out16 = mha.flash_attn_func(q, k, v, sink=sink16)
    out32 = mha.flash_attn_func(q, k, v, sink=sink32)
    assert torch.equal(out16, out32)
    (g16,) = torch.autograd.grad(out16.float().sum(), sink16)
    (g32,) = torch.autograd.grad(out32.float().sum(), sink32)
    assert g16.dtype == torch.float16 and torch.allclose(g16.float(), g32, atol=1e-3)


# A window side at least as long as the keys (left) or the queries (right) excludes no key: it is
# unbounded in effect, however large, and must neither overflow the kernels' index math (2**63 - 1
# wrapped there and in the reference) nor reach Triton as an integer it cannot represent (2**70).
HUGE_WINDOWS = {"maxsize_both": ((sys.maxsize, sys.maxsize), (-1, -1)),
                "left0_right_2p63": ((0, 2**63 - 1), (0, -1)),
                "unbounded_right_2p63": ((-1, 2**63 - 1), (-1, -1)),
                "left_2p70_right0": ((2**70, 0), (-1, 0)),
                "left3_right_2p70": ((3, 2**70), (3, -1))}


@pytest.mark.parametrize("lengths", [(16, 24), (24, 16)], ids=["q16_k24", "q24_k16"])
@pytest.mark.parametrize("window,same", list(HUGE_WINDOWS.values()), ids=list(HUGE_WINDOWS))
def test_reference_treats_huge_window_sides_as_unbounded(window, same, lengths):
    from mha.reference import attention

    torch.manual_seed(0)
    sq, sk = lengths
    q, k, v = torch.randn(1, sq, 2, 16), torch.randn(1, sk, 2, 16), torch.randn(1, sk, 2, 16)
    got, got_lse = attention(q, k, v, window=window)
    want, want_lse = attention(q, k, v, window=same)
    assert torch.equal(got, want) and torch.equal(got_lse, want_lse)


@pytest.mark.parametrize("window,same", list(HUGE_WINDOWS.values()), ids=list(HUGE_WINDOWS))
def test_huge_window_sides_compute_the_unbounded_answer(window, same, device):
    from cases import Case, run_dense

    # Forward and backward against the reference of the bounded-in-effect window; fewer queries
    # than keys, so a right side that wrapped negative would mask keys.
    run_dense(Case(1, 16, 24, 2, 1, 16, 16, window=window), torch.float16, device, ref_window=same)


def test_huge_window_sides_reach_the_kernels_clamped_to_the_lengths(monkeypatch, device):
    """The kernels get each side at most the longest length (int32 index math), dense and varlen."""
    seen = []
    real = mha.launch.forward

    def spy(spec, geo, q, k, v, sink, cu_q, cu_k, scale, window, *rest, **options):
        seen.append(window)
        return real(spec, geo, q, k, v, sink, cu_q, cu_k, scale, window, *rest, **options)

    monkeypatch.setattr(mha.launch, "forward", spy)
    q, k, v = _qkv(device, sq=8, sk=12)
    mha.flash_attn_func(q, k, v, window_size=(2**70, sys.maxsize))
    mha.flash_attn_func(q, k, v, window_size=(5, 2**63 - 1))
    mha.flash_attn_func(q, k, v, window_size=(-1, 2**40), causal=True)
    q, k, v, cu_q, cu_k = _varlen(device)                  # longest sequences: q 5, k 4
    mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4, window_size=(2**70, 2**63 - 1))
    assert seen == [(12, 8), (5, 8), (-1, 0), (4, 5)]


def test_huge_window_sides_varlen(device):
    from cases import run_varlen

    run_varlen((5, 16), (16, 9), 2, 1, 16, 16, torch.float16, device, window=(2**63 - 1, 2**70),
               ref_window=(-1, -1))
    run_varlen((5, 16), (16, 9), 2, 1, 16, 16, torch.float16, device, window=(2, sys.maxsize), causal=True,
               ref_window=(2, -1))


def test_return_lse_is_refused_not_coerced_varlen(device):
    q, k, v, cu_q, cu_k = _varlen(device)
    with pytest.raises(V.ArgumentTypeError, match="return_lse: expected a bool, got str 'yes'"):
        mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4, return_lse="yes")


# Sink logits the kernels cannot compute with: the forward starts its float32 base-2 running max
# at sink * log2(e), and at +inf the first rescale is exp2(inf - inf), NaN (the reference's limit
# is output 0, lse +inf); a NaN sink makes NaN everything; -inf gives a NaN sink gradient on rows
# that see no key; a finite sink past float32 max / log2(e) overflows to the +inf case.
@pytest.mark.parametrize("value,shown", [(float("inf"), "inf"), (float("-inf"), "-inf"), (float("nan"), "nan"),
                                         (3e38, "3e+38")], ids=["inf", "minus_inf", "nan", "3e38"])
def test_sink_logits_must_be_finite(value, shown, device):
    q, k, v = _qkv(device)
    sink = torch.tensor([0.5, value], device=device)
    with pytest.raises(V.AttentionInputError, match=rf"sink: expected finite logits .*got {re.escape(shown)} at head 1"):
        mha.flash_attn_func(q, k, v, sink=sink)
    q, k, v, cu_q, cu_k = _varlen(device)
    with pytest.raises(V.AttentionInputError, match=rf"sink: .*got {re.escape(shown)} at head 1"):
        mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4, sink=sink)


def test_sink_in_the_inputs_dtype_must_be_finite_too(device):
    q, k, v = _qkv(device)
    with pytest.raises(V.AttentionInputError, match="sink: expected finite logits .*got inf at head 0"):
        mha.flash_attn_func(q, k, v, sink=torch.tensor([float("inf"), 0.0], device=device, dtype=torch.float16))


def test_sink_values_read_once_per_tensor_state(host_reads, cached_like_a_gpu, device):
    """On a GPU reading the sink is a sync: done once per tensor state, as for cu_seqlens."""
    q, k, v = _qkv(device)
    sink = torch.tensor([0.5, -1.0], device=device, requires_grad=True)
    for _ in range(2):
        mha.flash_attn_func(q, k, v, sink=sink)
    assert [id(t) for t in host_reads] == [id(sink)]
    with torch.no_grad():
        sink[1] = float("inf")          # a versioned write: read again, and refused
    with pytest.raises(V.AttentionInputError, match="sink: .*got inf at head 1"):
        mha.flash_attn_func(q, k, v, sink=sink)
    assert len(host_reads) == 2
