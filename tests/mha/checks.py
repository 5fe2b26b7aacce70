"""Tolerances as flash-attn's tests: atol = max(2 x the error of a low-precision reference
(same math in the input dtype), a floor per dtype scaled by the reference's magnitude)."""
import pytest
import torch

from conftest import BF16_ON_CPU, HAS_CUDA

FLOORS = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-5}


def dtype_param(dtype):
    """pytest.param for a dtype; bf16 is skipped (with the reason) under the interpreter."""
    name = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
    marks = [] if HAS_CUDA or dtype != torch.bfloat16 else [pytest.mark.skip(reason=BF16_ON_CPU)]
    return pytest.param(dtype, id=name, marks=marks)


def assert_close(name, got, ref64, lowp, dtype):
    """got: kernel result; ref64: float64 reference; lowp: the same math in low precision."""
    got, lowp = got.double(), lowp.double()
    finite = torch.isfinite(ref64)
    assert torch.equal(finite, torch.isfinite(got)), f"{name}: inf/nan pattern differs from the reference"
    if not finite.any():
        return
    ref_err = (lowp[finite] - ref64[finite]).abs().max().item()
    scale = max(1.0, ref64[finite].abs().max().item())
    atol = max(2 * ref_err, FLOORS[dtype] * scale)
    err = (got[finite] - ref64[finite]).abs().max().item()
    assert err <= atol, f"{name}: max error {err:.3g} > atol {atol:.3g} (low-precision ref error {ref_err:.3g})"
    assert torch.equal(got[~finite], ref64[~finite]), f"{name}: non-finite values differ"
