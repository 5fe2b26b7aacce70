"""The single-pass backward (config key `single_pass`, deterministic=False): one kernel adds dQ
in atomics (mha.kernels.backward.attn_bwd_dkdv_dq). Against the float64 reference as every
backward, and checked to have run; deterministic=True keeps the two-kernel path."""
import pytest
import torch

import mha
from mha import launch
from cases import Case, run_dense, run_varlen
from checks import dtype_param
from test_attention import FEATURES

SINGLE_PASS = {"backward": {"single_pass": True}}


def _ran_single_pass(names):
    return "bwd_dkdv_dq" in names and "bwd_dkdv" not in names and "bwd_dq" not in names


@pytest.mark.parametrize("dtype", [dtype_param(torch.float16), dtype_param(torch.float32)])
@pytest.mark.parametrize("feature", ["plain", "causal", "window_l8_r4", "sink_causal_window", "dropout_causal_sink"])
def test_features(feature, dtype, device, launched):
    run_dense(Case(2, 45, 70, 4, 2, 32, 32, **FEATURES[feature]), dtype, device, config=SINGLE_PASS)
    assert _ran_single_pass(launched)


@pytest.mark.parametrize("dims", [(192, 128), (80, 80)], ids=["d192_128_split", "d80_padded"])
def test_head_dims(dims, device, launched):
    run_dense(Case(1, 70, 45, 2, 1, *dims, causal=True), torch.float16, device, config=SINGLE_PASS)
    assert _ran_single_pass(launched)


def test_varlen_with_empty_sequences(device, launched):
    run_varlen([5, 0, 17, 40], [9, 3, 0, 33], 4, 2, 32, 32, torch.float16, device, causal=True,
               window=(8, -1), config=SINGLE_PASS)
    assert _ran_single_pass(launched)


def test_the_launched_kernels_follow_the_config_and_the_flag():
    problem = launch.Problem("fp16", 64, 64, causal=True)
    two = launch.kernel_specs(problem, "sm90")
    one = launch.kernel_specs(problem, "sm90", SINGLE_PASS)
    assert launch.launched_kernels(two, "backward") == ("bwd_preprocess", "bwd_dkdv", "bwd_dq")
    assert launch.launched_kernels(one, "backward") == ("bwd_preprocess", "bwd_dkdv_dq")
    assert launch.launched_kernels(one, "backward", deterministic=True) == ("bwd_preprocess", "bwd_dkdv", "bwd_dq")
    # a backward flag leaves the forward as the bucket has it (the Gluon one where Triton has Gluon)
    assert launch.launched_kernels(one, "forward") == launch.launched_kernels(two, "forward")


def test_the_single_pass_declares_dq_unordered_and_the_perf_recorder_reads_it(device):
    """dQ's bits may change from run to run on the single pass only: the declaration the perf
    payload records (`unordered_outputs`) so that its numerics judge dQ by its error."""
    from mha_ci.payloads.perf import LaunchRecorder

    problem = launch.Problem("fp16", 64, 64, causal=True)
    one = launch.kernel_specs(problem, "sm90", SINGLE_PASS)
    assert launch.unordered_outputs(launch.launched_kernels(one, "backward")) == ["dq"]
    assert launch.unordered_outputs(launch.launched_kernels(one, "backward", deterministic=True)) == []
    assert launch.unordered_outputs(launch.launched_kernels(one, "forward")) == []
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 33, 2, 32, generator=gen).to(device, torch.float16).requires_grad_() for _ in range(3))
    for config, deterministic, expected in ((SINGLE_PASS, False, ["dq"]), (SINGLE_PASS, True, []), (None, False, [])):
        with LaunchRecorder() as recorder:
            out = mha.flash_attn_func(q, k, v, causal=True, config=config, deterministic=deterministic)
            out.sum().backward()
        assert recorder.unordered_outputs() == expected, (config, deterministic)


def test_deterministic_keeps_the_two_kernels(device, launched):
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 40, 2, 32, generator=gen).to(device, torch.float16).requires_grad_() for _ in range(3))
    do = torch.randn(1, 40, 2, 32, generator=gen).to(device, torch.float16)
    grads = {}
    for name, kw in (("two_kernels", {}), ("deterministic", dict(config=SINGLE_PASS, deterministic=True))):
        launched.clear()
        out = mha.flash_attn_func(q, k, v, causal=True, **kw)
        grads[name] = torch.autograd.grad(out, (q, k, v), do)
        assert "bwd_dkdv_dq" not in launched and "bwd_dq" in launched
    for a, b in zip(grads["two_kernels"], grads["deterministic"]):
        assert torch.equal(a, b)


def test_the_flags_are_checked(device):
    q = torch.zeros(1, 8, 1, 16, device=device, dtype=torch.float16)
    with pytest.raises(TypeError, match="deterministic: expected a bool"):
        mha.flash_attn_func(q, q, q, deterministic="no")
    with pytest.raises(TypeError, match="single_pass"):
        mha.flash_attn_func(q, q, q, config={"backward": {"single_pass": "yes"}})
