"""Races that show in some runs only: the kernels the sm90 d128 problems launch (the Gluon ones
under Triton >= 3.8, the warp-specialized non-causal forward under 3.4), run many times on a grid
of many waves, give the same bits every run, and finite ones.

test_determinism compares two runs of a small problem. That does not catch a race like the one
of the withdrawn warp-specialized backward (docs/records/2026-12-06-h100-ws-race): it put NaN
into some tiles, in some runs only, and only in programs after the first wave. The conftest
starts every torch.empty as NaN, so an entry that a run leaves unwritten fails too."""
import pytest
import torch

import mha
from mha import bench

RUNS = 25
# b2 hq 32:8 s8192 d128: 64 query tiles x 64 (batch, head) slices, about 31 waves of 132 SMs.
SHAPE = (2, 32, 8, 8192, 128, 128)


def _run(q, k, v, do, causal):
    out, lse = mha.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), do)
    return {"out": out.detach(), "lse": lse, "dq": dq, "dk": dk, "dv": dv}


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
def test_many_runs_give_the_same_finite_bits(causal, launched):
    q, k, v = bench._inputs((*SHAPE, causal), requires_grad=True)
    do = torch.randn_like(q)
    first = _run(q, k, v, do, causal)
    kernels = sorted(set(launched))
    for name, t in first.items():
        bad = int((~torch.isfinite(t)).sum())
        assert bad == 0, f"{name}: {bad} non-finite entries in run 0 (kernels {kernels})"
    for run in range(1, RUNS):
        for name, t in _run(q, k, v, do, causal).items():
            differ = int((t != first[name]).sum())
            assert differ == 0, f"{name}: run {run} differs from run 0 in {differ} entries (kernels {kernels})"
