"""The Gluon backward (mha.kernels.backward_gluon, and the `pe` bucket's dK/dV kernel
mha.kernels.backward_gluon_pe beside the Triton dQ): which toolchains and configs select it, which
inputs fall back to the Triton backward, and, on the GPU, its gradients against the float64
reference, bitwise reproducible for both values of `deterministic`.

The kernels are Gluon, which the interpreter cannot run: on the CPU only the selection is tested
here; the code-object records (the checksums job) compile them for sm90 without a GPU. The
problems they serve are the Gluon forward's (test_forward_gluon.test_which_problems_it_serves)."""
import pytest
import torch

from mha import config as config_mod
from mha import launch
from cases import (GLUON_CASES, GLUON_FALLBACK_CASES, GLUON_PE_CASES, Case, check_strided_backward,
                   check_two_backwards_identical, run_dense)
from checks import dtype_param
from conftest import HAS_CUDA

GLUON_CONFIG = config_mod.load_arch_configs("sm90")["backward"]["default"]["gluon"]
SELECTED_HERE = config_mod.gluon_selected(GLUON_CONFIG)
GLUON_BACKWARD = ("bwd_preprocess", "bwd_dkdv_gluon", "bwd_dq_gluon")
PE_CONFIG = config_mod.load_arch_configs("sm90")["backward"]["pe"]["gluon"]
PE_BACKWARD = ("bwd_preprocess", "bwd_dkdv_gluon", "bwd_dq")     # the Gluon dK/dV, the Triton dQ


@pytest.mark.parametrize("version, selected", [("3.4.0", False), ("3.6.0", False), ("3.8.0", True), ("3.9.1", True)])
def test_the_config_names_the_toolchains_that_run_it(monkeypatch, version, selected):
    monkeypatch.setattr(config_mod, "triton_version", lambda: version)
    _, cfg = config_mod.resolve("backward", "sm90", 128, 128, "bf16", 0.0, serves_gluon=True)
    assert bool(cfg.get("gluon")) is selected
    _, plain = config_mod.resolve("backward", "sm90", 128, 128, "bf16", 0.0)
    assert "gluon" not in plain and plain["num_warps"] == 8          # the Triton kernels' own config


@pytest.mark.parametrize("deterministic", [True, False])
def test_both_values_of_deterministic_run_it_where_selected(deterministic):
    """No atomics: the Gluon backward is reproducible, so it serves deterministic=True too; the
    Triton kernels stay in the specs for inputs it cannot take."""
    specs = launch.kernel_specs(launch.Problem("bf16", 128, 128, causal=True), "sm90")
    assert {"bwd_dkdv", "bwd_dq"} <= set(specs)
    assert ("bwd_dkdv_gluon" in specs) is SELECTED_HERE and ("bwd_dq_gluon" in specs) is SELECTED_HERE
    launched = launch.launched_kernels(specs, "backward", deterministic)
    # Where it is not selected, another kernel set runs (under Triton 3.4 the warp-specialized one).
    assert launched == GLUON_BACKWARD if SELECTED_HERE else not any("gluon" in name for name in launched)
    assert not launch.unordered_outputs(launch.launched_kernels(specs, "backward", deterministic))


def test_problems_it_does_not_serve_run_the_triton_backward():
    for problem in (launch.Problem("bf16", 128, 128, dropout=True), launch.Problem("bf16", 128, 128, varlen=True),
                    launch.Problem("bf16", 96, 96), launch.Problem("bf16", 128, 128, window=(16, 0))):
        specs = launch.kernel_specs(problem, "sm90")
        assert "bwd_dkdv_gluon" not in specs and "bwd_dq_gluon" not in specs


def test_the_gluon_specs():
    if not SELECTED_HERE:
        pytest.skip("this toolchain's config does not select the Gluon backward (no Gluon to build its specs)")
    specs = launch.kernel_specs(launch.Problem("fp16", 128, 128, causal=True), "sm90")
    dkdv, dq = specs["bwd_dkdv_gluon"], specs["bwd_dq_gluon"]
    assert dkdv.signature["q_desc"].startswith(f"tensordesc<fp16[{GLUON_CONFIG['BLOCK_M1']},128]")
    assert dkdv.signature["k_desc"].startswith("tensordesc<fp16[64,128]")        # one consumer's keys
    assert dkdv.signature["lse_desc"].startswith(f"tensordesc<fp32[{GLUON_CONFIG['BLOCK_M1']}]")
    assert dq.signature["k_desc"].startswith(f"tensordesc<fp16[{GLUON_CONFIG['BLOCK_N2']},128]")
    for spec in (dkdv, dq):
        assert spec.constexprs["CAUSAL"] is True and spec.constexprs["STAGES"] == GLUON_CONFIG["num_stages"]
        assert spec.options == {"maxnreg": 168} and spec.num_warps == 4 and spec.pass_ == "backward"
        assert launch.aligned_specialization(spec)["seqlen_q"] == "none"
    assert launch.aligned_specialization(dq)["Lse"] == "aligned16"
    again = launch.kernel_specs(launch.Problem("fp16", 128, 128, causal=True), "sm90")
    assert again["bwd_dkdv_gluon"] is dkdv and again["fwd_gluon"] is specs["fwd_gluon"]     # built once


def test_an_override_of_the_backward_configures_the_triton_kernels(monkeypatch):
    monkeypatch.setattr(config_mod, "triton_version", lambda: "3.8.0")
    _, cfg = config_mod.resolve("backward", "sm90", 128, 128, "bf16", 0.0, {"backward": {"num_warps": 4}},
                                serves_gluon=True)
    assert "gluon" not in cfg and cfg["BLOCK_M1"] == 32
    _, cfg = config_mod.resolve("backward", "sm90", 128, 128, "bf16", 0.0, {"forward": {"num_warps": 4}},
                                serves_gluon=True)
    assert cfg["gluon"] is True


@pytest.mark.parametrize("change, message", [
    ({"BLOCK_M1": 128}, "takes BLOCK_M1 in \\[64\\]"),
    ({"BLOCK_N1": 64}, "takes BLOCK_N1 in \\[128\\]"),
    ({"BLOCK_N2": 32}, "takes BLOCK_N2 in \\[64, 128\\]"),
    ({"num_stages": 3}, "takes num_stages in \\[2\\]"),
    ({"num_warps": 8}, "takes num_warps"),
    ({"BLOCK_M": 128}, "unknown keys \\['BLOCK_M'\\]"),
    ({"triton": None}, "lacks keys \\['triton'\\]"),
])
def test_a_bad_gluon_backward_config_is_refused(change, message):
    bad = {k: v for k, v in {**GLUON_CONFIG, **change}.items() if v is not None}
    with pytest.raises(config_mod.ConfigFileError, match=message):
        config_mod._check_gluon(bad, "backward", "default", "f.json: backward.default.gluon")


# ------------------------------------------------------------------ the `pe` bucket (Dqk 192 / Dv 128)
@pytest.mark.parametrize("deterministic", [True, False])
def test_the_pe_bucket_runs_the_gluon_dkdv_beside_the_triton_dq(deterministic):
    specs = launch.kernel_specs(launch.Problem("bf16", 192, 128, causal=True), "sm90")
    assert "bwd_dq_gluon" not in specs                                     # no Gluon dQ for it
    assert ("bwd_dkdv_gluon" in specs) is SELECTED_HERE is ("fwd_gluon" in specs)
    expected = PE_BACKWARD if SELECTED_HERE else ("bwd_preprocess", "bwd_dkdv", "bwd_dq")
    assert launch.launched_kernels(specs, "backward", deterministic) == expected
    pe = config_mod.load_arch_configs("sm90")["backward"]["pe"]
    assert specs["bwd_dq"].constexprs["BLOCK_M"] == pe["BLOCK_M2"] and specs["bwd_dq"].num_warps == pe["num_warps"]


def test_other_pe_head_dims_run_the_triton_backward(monkeypatch):
    monkeypatch.setattr(config_mod, "triton_version", lambda: "3.8.0")
    for dqk, dv in ((96, 64), (192, 64), (256, 128)):
        assert not config_mod.gluon_serves("backward", "sm90", "bf16", dqk, dv, (-1, 0), False, False, False)
    assert config_mod.gluon_serves("backward", "sm90", "bf16", 192, 128, (-1, 0), False, False, False)
    assert config_mod.gluon_serves("forward", "sm90", "bf16", 192, 128, (-1, 0), False, False, False)
    _, cfg = config_mod.resolve("backward", "sm90", 192, 128, "bf16", 0.0, serves_gluon=True)
    assert cfg == {k: v for k, v in PE_CONFIG.items() if k != "triton"} | {"gluon": True}


def test_the_pe_gluon_spec():
    if not SELECTED_HERE:
        pytest.skip("this toolchain's config does not select the Gluon backward (no Gluon to build its specs)")
    spec = launch.kernel_specs(launch.Problem("fp16", 192, 128), "sm90")["bwd_dkdv_gluon"]
    assert spec.fn.__name__ == "attn_bwd_dkdv_gluon_pe" and spec.bucket == "pe"
    block_m = PE_CONFIG["BLOCK_M1"]
    assert spec.signature["q_desc"].startswith(f"tensordesc<fp16[{block_m},128]")
    assert spec.signature["q2_desc"].startswith(f"tensordesc<fp16[{block_m},64]")
    assert spec.signature["k2_desc"].startswith("tensordesc<fp16[64,64]")       # one consumer's keys
    assert spec.signature["dv_desc"].startswith("tensordesc<fp16[64,128]")
    assert spec.constexprs["CAUSAL"] is False and spec.constexprs["HEAD_DQK"] == 192
    assert spec.options == {"maxnreg": 168} and spec.num_warps == 4
    assert launch.aligned_specialization(spec)["num_heads_k"] == "none"


@pytest.mark.parametrize("change, message", [
    ({"BLOCK_M1": 64}, "takes BLOCK_M1 in \\[32\\]"),
    ({"num_stages": 4}, "takes num_stages in \\[2, 3\\]"),
    ({"BLOCK_M2": 128}, "unknown keys \\['BLOCK_M2'\\]"),    # dQ is the Triton kernel's: no dQ keys
    ({"num_warps": None}, "lacks keys \\['num_warps'\\]"),
])
def test_a_bad_pe_gluon_config_is_refused(change, message):
    bad = {k: v for k, v in {**PE_CONFIG, **change}.items() if v is not None}
    with pytest.raises(config_mod.ConfigFileError, match=message):
        config_mod._check_gluon(bad, "backward", "pe", "f.json: backward.pe.gluon")


# ------------------------------------------------------------------ on the GPU (H200, sm90)
needs_gluon = pytest.mark.skipif(HAS_CUDA and not SELECTED_HERE,
                                 reason="this toolchain's config does not select the Gluon backward")


# and GQA 8: eight query heads through each key tile's ring
CASES = GLUON_CASES | {"causal_gqa8": Case(1, 1024, 1024, 8, 1, 128, 128, causal=True)}


@pytest.mark.gpu
@needs_gluon
@pytest.mark.parametrize("dtype", [dtype_param(torch.bfloat16), dtype_param(torch.float16)])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_gradients(case, dtype, device, launched):
    run_dense(case, dtype, device)
    assert tuple(launched[1:]) == GLUON_BACKWARD


@pytest.mark.gpu
@needs_gluon
@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("dqk, kernels", [(128, GLUON_BACKWARD), (192, PE_BACKWARD)], ids=["d128", "pe"])
def test_two_backwards_are_bitwise_identical(dqk, kernels, deterministic, device, launched):
    check_two_backwards_identical(device, dqk, deterministic, launched, kernels)


@pytest.mark.gpu
@needs_gluon
@pytest.mark.parametrize("dtype", [dtype_param(torch.bfloat16), dtype_param(torch.float16)])
@pytest.mark.parametrize("case", GLUON_PE_CASES.values(), ids=GLUON_PE_CASES.keys())
def test_pe_gradients(case, dtype, device, launched):
    kernels = []
    observe = lambda spec, _kernel: kernels.append(spec.fn.__name__)  # noqa: E731
    launch.LAUNCH_OBSERVERS.append(observe)
    try:
        run_dense(case, dtype, device)
    finally:
        launch.LAUNCH_OBSERVERS.remove(observe)
    assert tuple(launched[1:]) == PE_BACKWARD and "attn_bwd_dkdv_gluon_pe" in kernels


@pytest.mark.gpu
@needs_gluon
@pytest.mark.parametrize("case", GLUON_FALLBACK_CASES.values(), ids=GLUON_FALLBACK_CASES.keys())
def test_other_lengths_run_the_triton_backward(case, device, launched):
    run_dense(case, torch.bfloat16, device)
    assert tuple(launched[1:]) == ("bwd_preprocess", "bwd_dkdv", "bwd_dq")


@pytest.mark.gpu
@needs_gluon
def test_a_strided_input_runs_the_triton_backward_and_a_strided_dout_is_copied(device, launched):
    check_strided_backward(device, torch.bfloat16, 256, launched, GLUON_BACKWARD)
