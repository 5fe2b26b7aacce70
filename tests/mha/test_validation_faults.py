"""Fault injection at the kernel boundary: stale cu_seqlens and data-less (meta) tensors must
raise a clear error before any launch, never reach a kernel that would read or write out of bounds.

Validation cases spy on the launches: a launch with a bad input is the failure. The kernels
also clamp every sequence into the packed totals (mha.kernels.common.sequence_bounds); the last
cases hand the launcher a corrupt cu_seqlens directly and check that nothing outside the tensors
was read or written.
"""
import pytest
import torch

import mha
from mha import launch
from mha import validation as V

CPU_ONLY = "a write that bypasses torch's version counter is seen without a sync only on the CPU"


class Launched(AssertionError):
    pass


def _refuse_launches(monkeypatch):
    """From here on any kernel launch fails the test (before the kernel could touch memory)."""
    def refuse(*_args, **_kw):
        raise Launched("a kernel was launched with inputs that should have been refused")

    monkeypatch.setattr(launch, "forward", refuse)
    monkeypatch.setattr(launch, "backward", refuse)


@pytest.fixture
def no_launch(monkeypatch):
    _refuse_launches(monkeypatch)


def _varlen(device, requires_grad=False):
    torch.manual_seed(0)
    q = torch.randn(8, 2, 16, device=device, dtype=torch.float32, requires_grad=requires_grad)
    k = torch.randn(8, 2, 16, device=device, dtype=torch.float32, requires_grad=requires_grad)
    v = torch.randn(8, 2, 16, device=device, dtype=torch.float32, requires_grad=requires_grad)
    cu_q = torch.tensor([0, 3, 8], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 4, 8], dtype=torch.int32, device=device)
    return q, k, v, cu_q, cu_k


def _write_last(cu):
    cu.data[-1] += 1000


def _write_numpy_last(cu):
    cu.numpy()[-1] += 1000


def _write_middle(cu):
    cu.data[1] = 9          # [0, 9, 8]: decreasing, a negative length


def _write_first(cu):
    torch.from_numpy(cu.numpy())[0] = -1000    # an alias with a version counter of its own


# Writes that torch's version counter does not see, so a cache keyed on it cannot either.
UNVERSIONED_WRITES = {"data_last": (_write_last, "last entry 1008 must equal the packed total 8"),
                      "numpy_last": (_write_numpy_last, "last entry 1008 must equal the packed total 8"),
                      "data_middle": (_write_middle, "non-decreasing values, got 9 then 8"),
                      "from_numpy_first": (_write_first, "first entry 0, got -1000")}


@pytest.mark.parametrize("which", ["cu_seqlens_q", "cu_seqlens_k"])
@pytest.mark.parametrize("write", list(UNVERSIONED_WRITES), ids=list(UNVERSIONED_WRITES))
def test_cu_seqlens_written_after_a_validated_call_is_refused(write, which, device, monkeypatch):
    if device != "cpu":
        pytest.skip(CPU_ONLY)
    q, k, v, cu_q, cu_k = _varlen(device)
    mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4)      # validated (and run) once
    cu = cu_q if which == "cu_seqlens_q" else cu_k
    version = cu._version
    change, message = UNVERSIONED_WRITES[write]
    change(cu)
    assert cu._version == version, "the write must bypass the version counter for this probe"
    _refuse_launches(monkeypatch)
    with pytest.raises(V.CuSeqlensError, match=f"{which}: .*{message}"):
        mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 9)


def test_cu_seqlens_longer_sequence_after_a_validated_call_is_refused(device, monkeypatch):
    """Same total, but a sequence now longer than max_seqlen (the launch grid's rows)."""
    if device != "cpu":
        pytest.skip(CPU_ONLY)
    q, k, v, cu_q, cu_k = _varlen(device)
    mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4)
    cu_k.data[1] = 1        # lengths (1, 7): 7 > max_seqlen_k 4
    _refuse_launches(monkeypatch)
    with pytest.raises(V.CuSeqlensError, match="cu_seqlens_k: max_seqlen 4 is smaller than the longest sequence 7"):
        mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4)


def test_backward_refuses_cu_seqlens_written_behind_autograd(device, monkeypatch):
    """The backward launches with the saved cu_seqlens: a write autograd cannot see is caught
    by validating them again (on the CPU: no sync) against the forward's geometry."""
    if device != "cpu":
        pytest.skip(CPU_ONLY)
    q, k, v, cu_q, cu_k = _varlen(device, requires_grad=True)
    out = mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4)
    cu_k.data[-1] += 1000
    _refuse_launches(monkeypatch)
    with pytest.raises(V.CuSeqlensError, match="cu_seqlens_k: last entry 1008 must equal the packed total 8"):
        out.sum().backward()


def test_backward_after_a_versioned_write_is_refused_by_autograd(device, monkeypatch):
    """An ordinary in-place write between forward and backward bumps the version counter, and
    autograd's saved-tensor check refuses the backward before it runs (cu_seqlens are saved
    with save_for_backward like q, k, v)."""
    q, k, v, cu_q, cu_k = _varlen(device, requires_grad=True)
    out = mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 4)
    cu_q[-1] += 1000
    _refuse_launches(monkeypatch)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def _meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, device="meta", dtype=dtype)


def test_meta_inputs_are_refused_before_any_allocation(no_launch):
    """A meta tensor has sizes but no data: refused by name, not launched (the interpreter would
    first allocate a host copy of its full size: 549 GB for this decode shape)."""
    q, k, v = _meta(64, 1, 128, 192), _meta(64, 8192, 128, 192), _meta(64, 8192, 128, 128)
    with pytest.raises(V.MetaTensorError, match=r"q: a meta tensor \(device='meta'\) has no data"):
        mha.flash_attn_func(q, k, v)


def test_meta_varlen_inputs_are_refused(no_launch):
    q = _meta(8, 2, 16)
    cu = _meta(3, dtype=torch.int32)
    with pytest.raises(V.MetaTensorError, match=r"cu_seqlens_q: a meta tensor \(device='meta'\) has no"):
        mha.flash_attn_varlen_func(q, q, q, cu, cu, 5, 5)


def test_meta_sink_is_refused_without_reading_its_values(no_launch):
    """The sink's values are checked (finite) only where it has some: a meta one reaches the
    data check, which names it."""
    q = _meta(1, 8, 2, 16)
    with pytest.raises(V.MetaTensorError, match="q: a meta tensor"):
        mha.flash_attn_func(q, q, q, sink=_meta(2, dtype=torch.float32))
    with pytest.raises(V.MetaTensorError, match="sink: a meta tensor"):
        V.check_has_data(q=torch.zeros(1), sink=V.check_sink(_meta(2, dtype=torch.float32), 2, q.device,
                                                             torch.float16))


def test_meta_errors_are_value_errors():
    assert issubclass(V.MetaTensorError, V.AttentionInputError)


# The kernels' own bound: a cu_seqlens that validation never saw (written on the device after a
# validated call, or handed straight to the launcher as here) must never move a load or a store
# outside the packed tensors. Every tensor, inputs and the outputs the launcher allocates, lives
# inside a larger buffer whose rows before and after it are NaN: a load outside a tensor poisons
# the outputs, a store outside one overwrites the padding.
PAD = 16
ROWS = 64


class _PaddedTorch:
    """torch for mha.launch, except that its outputs are zeroed views inside NaN padding."""

    def __init__(self, device):
        self.device, self.buffers = device, []

    def __getattr__(self, name):
        return getattr(torch, name)

    def _inner(self, shape, dtype):
        buf, inner = _padded(shape, self.device, torch.zeros(shape, dtype=dtype, device=self.device))
        self.buffers.append((buf, inner))
        return inner

    def empty(self, shape, dtype=None, device=None):
        return self._inner(tuple(shape), dtype or torch.float32)

    def empty_like(self, t):
        return self._inner(tuple(t.shape), t.dtype)


def _padded(shape, device, value=None):
    """(buffer, view): the view has `shape` and lies PAD elements of its first (or, for a 2-D
    lse/delta, its second) dimension inside NaN padding on each side."""
    dim = 1 if len(shape) == 2 else 0
    outer = list(shape)
    outer[dim] += 2 * PAD
    buf = torch.full(outer, float("nan"), device=device, dtype=torch.float32 if value is None else value.dtype)
    inner = buf.narrow(dim, PAD, shape[dim])
    inner.copy_(torch.randn(shape, device=device) if value is None else value)
    return buf, inner


def _untouched(buf, inner):
    dim = 1 if buf.dim() == 2 else 0
    before, after = buf.narrow(dim, 0, PAD), buf.narrow(dim, PAD + inner.shape[dim], PAD)
    return bool(torch.isnan(before).all() and torch.isnan(after).all())


def _corrupt(device):
    """cu_seqlens no validation would pass, and a grid (longest 48) past the packed total:
    q's second sequence ends far past the tensor, k's first starts before it. The kernels treat
    both as empty; unbounded, they read the padding and write past the outputs."""
    cu_q = torch.tensor([0, 40, 10**6], dtype=torch.int32, device=device)
    cu_k = torch.tensor([-9, 30, ROWS], dtype=torch.int32, device=device)
    geo = launch.Geometry(batch=2, seqlen_q=48, seqlen_k=48, heads_q=2, heads_k=2, varlen=True,
                          rows_q=ROWS, rows_k=ROWS)
    specs = launch.kernel_specs(launch.Problem(dtype="fp32", dqk=16, dv=16, causal=False, window=(-1, -1),
                                               has_sink=False, dropout=False, varlen=True), "interpreter")
    return cu_q, cu_k, geo, specs


def test_forward_stays_inside_the_packed_tensors_whatever_cu_seqlens_holds(device, monkeypatch):
    torch.manual_seed(0)
    q, k, v = (_padded((ROWS, 2, 16), device)[1] for _ in range(3))
    padded = _PaddedTorch(device)
    monkeypatch.setattr(launch, "torch", padded)
    cu_q, cu_k, geo, specs = _corrupt(device)
    out, lse = launch.forward(specs["fwd"], geo, q, k, v, None, cu_q, cu_k, 0.25, (-1, -1), 0.0, (0, 0))
    assert torch.isfinite(out).all(), "a load left the packed q/k/v (NaN padding reached the output)"
    assert not torch.isnan(lse).any(), "a load left the packed q/k/v (NaN padding reached the lse)"
    for buf, inner in padded.buffers:
        assert _untouched(buf, inner), "a store landed outside an output tensor"


def test_backward_stays_inside_the_packed_tensors_whatever_cu_seqlens_holds(device, monkeypatch):
    torch.manual_seed(0)
    q, k, v, out, dout = (_padded((ROWS, 2, 16), device)[1] for _ in range(5))
    lse = _padded((2, ROWS), device, torch.zeros(2, ROWS, device=device))[1]  # delta takes its strides
    padded = _PaddedTorch(device)
    monkeypatch.setattr(launch, "torch", padded)
    cu_q, cu_k, geo, specs = _corrupt(device)
    grads = launch.backward(specs, geo, q, k, v, out, dout, lse, cu_q, cu_k, 0.25, (-1, -1), 0.0, (0, 0))
    for name, grad in zip(("dq", "dk", "dv", "delta"), grads):
        assert torch.isfinite(grad).all(), f"{name}: a load left the packed tensors"
    for buf, inner in padded.buffers:
        assert _untouched(buf, inner), "a store landed outside an output tensor"
