"""The warp-specialized forward (mha.kernels.forward_ws), chosen by the config key
`warp_specialize`: its selection, its guard, its launch checks, and its results against the
float64 reference. On the CPU the interpreter runs it (tensor descriptors included; the
warp-specialization pass itself only runs in a GPU compile, see
docs/records/2026-12-01-ws-forward-prep). Shapes stay small: a few seconds per case.
"""
import pytest
import torch

from cases import Case, run_dense, run_varlen
from checks import dtype_param
from mha import config, launch
from mha.kernels.forward import attn_fwd
from mha.kernels.forward_ws import attn_fwd_ws

WS = {"forward": {"warp_specialize": True}}


def test_warp_specialize_selects_the_ws_kernel_and_only_for_the_forward():
    problem = launch.Problem("bf16", 128, 128, causal=True)
    plain = launch.kernel_specs(problem, "sm90")
    ws = launch.kernel_specs(problem, "sm90", {"forward": {"warp_specialize": True, "num_warps": 4}})
    assert plain["fwd"].fn is attn_fwd and "WARP_SPECIALIZE" not in plain["fwd"].constexprs
    assert ws["fwd"].fn is attn_fwd_ws and ws["fwd"].constexprs["WARP_SPECIALIZE"] is True
    assert ws["fwd"].num_warps == 4
    for name in ("bwd_preprocess", "bwd_dkdv", "bwd_dq"):
        assert ws[name].fn is plain[name].fn and ws[name].constexprs == plain[name].constexprs


def test_ws_signature_is_the_forwards_so_one_launch_serves_both():
    problem = launch.Problem("fp16", 64, 64)
    plain = launch.kernel_specs(problem, "sm90")["fwd"].signature
    ws = launch.kernel_specs(problem, "sm90", WS)["fwd"].signature
    assert [n for n, t in ws.items() if t != "constexpr"] == [n for n, t in plain.items() if t != "constexpr"]


def test_warp_specialize_must_be_a_boolean():
    with pytest.raises(config.ConfigFileError, match="warp_specialize must be true or false"):
        config.resolve("forward", "sm90", 128, 128, "bf16", 0.0, {"warp_specialize": 1})


@pytest.mark.parametrize("version,stages", [("3.4.0", 2), ("3.6.0", 2), ("3.8.0", 3)])
def test_ws_three_stages_fall_back_to_two_before_triton_38(monkeypatch, version, stages):
    monkeypatch.setattr(config, "triton_version", lambda: version)
    _, cfg = config.resolve("forward", "sm90", 128, 128, "bf16", 0.0,
                            {"warp_specialize": True, "num_warps": 4, "num_stages": 3})
    assert cfg["num_stages"] == stages
    _, plain = config.resolve("forward", "sm90", 128, 128, "bf16", 0.0, {"num_stages": 3})
    assert plain["num_stages"] == 3          # the plain kernel's 3 stages are not the miscompile


def test_ws_refuses_strides_tma_cannot_take():
    q = torch.randn(1, 8, 2, 41, dtype=torch.float16)[..., :40]   # row stride 82 bytes
    k = torch.randn(1, 8, 2, 40, dtype=torch.float16)
    with pytest.raises(ValueError, match="TMA descriptors"):
        launch._tma_ready(q, k, k)
    launch._tma_ready(q.contiguous(), k, k)


# Head dims whose row strides are multiples of 16 elements: Triton 3.4's interpreter checks a
# descriptor's strides in elements where the hardware counts bytes (3.8 counts bytes).
DIMS = {"d64": (64, 64), "d80": (80, 80), "d128": (128, 128), "d192_128": (192, 128)}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dims", list(DIMS.values()), ids=list(DIMS))
def test_ws_forward_against_reference(dims, causal, device):
    run_dense(Case(2, 45, 70, 4, 2, *dims, causal=causal), torch.float16, device, backward=False, config=WS)


@pytest.mark.parametrize("dtype", [dtype_param(torch.float16), dtype_param(torch.bfloat16)])
@pytest.mark.parametrize("feature", [dict(window=(8, 4)), dict(sink=True, causal=True, window=(12, 0)),
                                     dict(causal=True)], ids=["window", "sink_causal_window", "causal_q_gt_k"])
def test_ws_forward_features_and_backward(feature, dtype, device):
    run_dense(Case(1, 70, 45, 2, 1, 64, 64, **feature), dtype, device, config=WS)


def test_ws_forward_varlen_with_empty_and_padded_tiles(device):
    # The grid is sized by the longest sequence: tiles past a short one loop over no key.
    run_varlen([5, 70, 0, 33], [40, 64, 7, 33], 4, 2, 64, 64, torch.float16, device, causal=True,
               backward=False, config=WS)
