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


def test_meta_errors_are_value_errors():
    assert issubclass(V.MetaTensorError, V.AttentionInputError)


# The kernels' own bound: a cu_seqlens that validation never saw (written on the device after a
# validated call, or handed straight to the launcher as here) must never move a load or a store
# outside the packed tensors. Each tensor lives inside a larger buffer whose rows before and after
# it are NaN, so a load outside it poisons the outputs; the outputs live inside such buffers too,
# so a store outside them shows in the padding.
PAD = 16


def _padded(rows, heads, dim, device, value=None):
    buf = torch.full((rows + 2 * PAD, heads, dim), float("nan"), device=device)
    inner = buf[PAD:PAD + rows]
    inner.copy_(torch.randn(rows, heads, dim, device=device) if value is None else value)
    return buf, inner


def _corrupt_geometry(rows_q, rows_k):
    # cu_seqlens [-9, 40, 10**6] and [0, 30, 10**6]: a start before the tensor, an end far past it,
    # and a grid (longest 32) that reaches past the packed total. Clamped, they cover every row.
    cu_q = torch.tensor([-9, 40, 10**6], dtype=torch.int32)
    cu_k = torch.tensor([0, 30, 10**6], dtype=torch.int32)
    geo = launch.Geometry(batch=2, seqlen_q=48, seqlen_k=48, heads_q=2, heads_k=2, varlen=True,
                          rows_q=rows_q, rows_k=rows_k)
    return cu_q, cu_k, geo


def _specs():
    problem = launch.Problem(dtype="fp32", dqk=16, dv=16, causal=False, window=(-1, -1), has_sink=False,
                             dropout=False, varlen=True)
    return launch.kernel_specs(problem, "interpreter")


def test_forward_stays_inside_the_packed_tensors_whatever_cu_seqlens_holds(device):
    torch.manual_seed(0)
    rows = 64
    _, q = _padded(rows, 2, 16, device)
    _, k = _padded(rows, 2, 16, device)
    _, v = _padded(rows, 2, 16, device)
    cu_q, cu_k, geo = _corrupt_geometry(rows, rows)
    out, lse = launch.forward(_specs()["fwd"], geo, q, k, v, None, cu_q.to(device), cu_k.to(device),
                              0.25, (-1, -1), 0.0, (0, 0))
    assert torch.isfinite(out).all(), "a load left the packed q/k/v (NaN padding reached the output)"
    assert not torch.isnan(lse).any()


def test_backward_stays_inside_the_packed_tensors_whatever_cu_seqlens_holds(device, monkeypatch):
    torch.manual_seed(0)
    rows = 64
    _, q = _padded(rows, 2, 16, device)
    _, k = _padded(rows, 2, 16, device)
    _, v = _padded(rows, 2, 16, device)
    _, out = _padded(rows, 2, 16, device)
    _, dout = _padded(rows, 2, 16, device)
    lse = torch.zeros(2, rows, device=device)
    grads = {}

    def padded_like(t):
        buf, inner = _padded(t.shape[0], t.shape[1], t.shape[2], device, value=torch.zeros_like(t))
        grads[id(inner)] = buf
        return inner

    monkeypatch.setattr(launch.torch, "empty_like",
                        lambda t, **kw: padded_like(t) if t.dim() == 3 else torch.zeros_like(t, **kw))
    cu_q, cu_k, geo = _corrupt_geometry(rows, rows)
    dq, dk, dv, delta = launch.backward(_specs(), geo, q, k, v, out, dout, lse, cu_q.to(device), cu_k.to(device),
                                        0.25, (-1, -1), 0.0, (0, 0))
    for name, grad in (("dq", dq), ("dk", dk), ("dv", dv)):
        assert torch.isfinite(grad).all(), f"{name}: a load left the packed tensors"
        buf = grads[id(grad)]
        assert torch.isnan(buf[:PAD]).all() and torch.isnan(buf[PAD + rows:]).all(), \
            f"{name}: a store landed outside the packed tensor"
    assert torch.isfinite(delta).all()
