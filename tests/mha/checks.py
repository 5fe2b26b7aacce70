"""Tolerances as flash-attn's tests (mha.reference.mismatch: atol = max(2 x the error of a
low-precision reference, a floor per dtype scaled by the reference's magnitude))."""
import pytest
import torch

from conftest import BF16_ON_CPU, HAS_CUDA
from mha import reference


def dtype_param(dtype):
    """pytest.param for a dtype; bf16 is skipped (with the reason) under the interpreter."""
    name = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
    marks = [] if HAS_CUDA or dtype != torch.bfloat16 else [pytest.mark.skip(reason=BF16_ON_CPU)]
    return pytest.param(dtype, id=name, marks=marks)


def assert_close(name, got, ref64, lowp, dtype):
    """got: kernel result; ref64: float64 reference; lowp: the same math in low precision."""
    wrong = reference.mismatch(name, got, ref64, lowp, dtype)
    assert wrong is None, wrong
