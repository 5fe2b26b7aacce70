"""The Gluon forward (mha.kernels.forward_gluon): which problems and toolchains select it, which
inputs fall back to the Triton forward, and, on the GPU, its results against the float64
reference (through the public API, so the backward runs on its out and lse).

The kernel is Gluon, which the interpreter cannot run: on the CPU only the selection is tested
here; the code-object records (the checksums job) compile it for sm90 without a GPU."""
import dataclasses
import types

import pytest
import torch

import mha
from mha import config as config_mod
from mha import guards, launch
from cases import GLUON_CASES, GLUON_FALLBACK_CASES, GLUON_PE_CASES, SCALE_CASES, run_dense
from checks import dtype_param
from conftest import HAS_CUDA

GLUON_CONFIG = config_mod.load_arch_configs("sm90")["forward"]["default"]["gluon"]
PE_CONFIG = config_mod.load_arch_configs("sm90")["forward"]["pe"]["gluon"]
SELECTED_HERE = config_mod.gluon_selected(GLUON_CONFIG)


@pytest.mark.parametrize("problem, served", [
    (launch.Problem("bf16", 128, 128), True),
    (launch.Problem("fp16", 128, 128, causal=True), True),
    (launch.Problem("bf16", 64, 64, causal=True), True),
    (launch.Problem("bf16", 128, 128, window=(-1, 0)), True),      # the causal band, spelled as a window
    (launch.Problem("fp32", 128, 128), False),
    (launch.Problem("bf16", 96, 96), False),
    (launch.Problem("bf16", 192, 128, causal=True), True),           # the `pe` bucket: q/k head dim in two parts
    (launch.Problem("bf16", 192, 192), False),
    (launch.Problem("bf16", 128, 64), False),
    (launch.Problem("bf16", 128, 128, varlen=True), False),
    (launch.Problem("bf16", 128, 128, window=(16, 0)), False),
    (launch.Problem("bf16", 128, 128, window=(-1, 4)), False),
    (launch.Problem("bf16", 128, 128, has_sink=True), False),
    (launch.Problem("bf16", 128, 128, dropout=True), False),
])
def test_which_problems_it_serves(problem, served):
    """The Gluon backward serves the same problems (test_backward_gluon)."""
    assert launch.gluon_serves(problem, "sm90", "forward") is served
    assert launch.gluon_serves(problem, "sm90", "backward") is served
    assert not launch.gluon_serves(problem, "gfx942", "forward")
    assert not launch.gluon_serves(problem, "gfx942", "backward")


@pytest.mark.parametrize("version, selected", [("3.4.0", False), ("3.6.0", False), ("3.8.0", True), ("3.9.1", True)])
def test_the_config_names_the_toolchains_that_run_it(monkeypatch, version, selected):
    """Selected as data: the sm90 file's `gluon` config holds the Triton versions; the resolved
    config of a served problem carries `gluon: true` only there."""
    monkeypatch.setattr(config_mod, "triton_version", lambda: version)
    _, cfg = config_mod.resolve("forward", "sm90", 128, 128, "bf16", 0.0, banded=True, serves_gluon=True)
    assert bool(cfg.get("gluon")) is selected
    _, plain = config_mod.resolve("forward", "sm90", 128, 128, "bf16", 0.0, banded=True, serves_gluon=False)
    assert "gluon" not in plain and plain["BLOCK_N"] == 64          # the Triton forward's own tiles
    assert guards.version_matches(GLUON_CONFIG["triton"], version) is selected


def test_the_triton_forward_stays_for_inputs_the_gluon_one_cannot_take():
    specs = launch.kernel_specs(launch.Problem("bf16", 128, 128, causal=True), "sm90")
    assert specs["fwd"].fn is launch.attn_fwd                       # the fallback keeps the bucket's config
    assert ("fwd_gluon" in specs) is SELECTED_HERE is ("fwd_gluon_tile" in specs)
    assert launch.launched_kernels(specs, "forward") == (("fwd_gluon", "fwd_gluon_tile") if SELECTED_HERE
                                                         else ("fwd",))


@pytest.mark.skipif(not SELECTED_HERE, reason="this toolchain's config does not select the Gluon forward")
def test_the_gluon_spec():
    spec = launch.kernel_specs(launch.Problem("fp16", 128, 128, causal=True), "sm90")["fwd_gluon"]
    assert spec.signature["q_desc"].startswith("tensordesc<fp16[64,128]")
    assert spec.signature["k_desc"].startswith(f"tensordesc<fp16[{GLUON_CONFIG['BLOCK_N']},128]")
    assert spec.constexprs["CAUSAL"] is True and spec.constexprs["STAGES"] == GLUON_CONFIG["num_stages"]
    assert spec.options == {"maxnreg": 168} and spec.num_warps == 4
    assert spec.constexprs["PINGPONG"] is True and spec.constexprs["FOLD_SCALE"] is True
    assert spec.constexprs["HEAD_DQK1"] == 0 and spec.constexprs["q2_desc"] is None    # one head-dim part
    assert spec.constexprs["HEAD_GROUP"] == 0                       # the one-pass causal order
    assert spec.signature["q2_desc"] == "constexpr" == spec.signature["k2_desc"]
    assert set(launch.aligned_specialization(spec).items()) >= {("Lse", "aligned16"), ("q_desc", "none"),
                                                              ("seqlen_q", "none"), ("group", "none")}


@pytest.mark.skipif(not SELECTED_HERE, reason="this toolchain's config does not select the Gluon forward")
@pytest.mark.parametrize("dims", [(128, 128), (64, 64), (192, 128)])
def test_the_one_tile_form_is_the_same_kernel_without_the_walk(dims):
    """"fwd_gluon_tile" differs from "fwd_gluon" only where a program has a single tile: no tile
    loop, and no second Q buffer to load a next tile's Q into."""
    specs = launch.kernel_specs(launch.Problem("bf16", *dims, causal=True), "sm90")
    walking, one_tile = specs["fwd_gluon"], specs["fwd_gluon_tile"]
    assert one_tile.fn is walking.fn and one_tile.signature == walking.signature
    assert (one_tile.num_warps, one_tile.num_stages, one_tile.options, one_tile.bucket) == \
        (walking.num_warps, walking.num_stages, walking.options, walking.bucket)
    assert walking.constexprs["ONE_TILE"] is False and one_tile.constexprs["ONE_TILE"] is True
    assert one_tile.constexprs["Q_BUFS"] == 1 and walking.constexprs["Q_BUFS"] == (1 if dims[0] > dims[1] else 2)
    differ = {k for k in walking.constexprs if walking.constexprs[k] != one_tile.constexprs[k]}
    assert differ <= {"ONE_TILE", "Q_BUFS"}
    assert launch.gluon_forwards(specs) == (walking, one_tile)


@pytest.mark.parametrize("programs, tiles, form", [(96, 96, "one"), (1, 1, "one"), (132, 5000, "walking"),
                                                   (3, 96, "walking")])
def test_the_grid_picks_the_form(programs, tiles, form):
    specs = (types.SimpleNamespace(name="walking"), types.SimpleNamespace(name="one"))
    assert launch.gluon_forward_form(specs, programs, tiles).name == form


@pytest.mark.parametrize("fold, taken", [(True, {0.125: True, 1e-30: True, 0.0: False, -0.125: False}),
                                         (False, {0.125: True, 1e-30: True, 0.0: True, -0.125: True})])
def test_the_folded_scale_takes_positive_scales_only(fold, taken):
    """The Triton forward takes the other scales (on the GPU: test_scales_that_are_not_positive)."""
    spec = types.SimpleNamespace(constexprs={"CAUSAL": True, "FOLD_SCALE": fold})
    assert {scale: launch.gluon_scale_ok(spec, scale) for scale in taken} == taken


def test_an_override_of_the_forward_configures_the_triton_kernel(monkeypatch):
    """`config=` overrides (the tuner's candidates among them) set the Triton forward's tiles; an
    override of the backward only leaves the Gluon forward selected; `gluon` is no override key."""
    monkeypatch.setattr(config_mod, "triton_version", lambda: "3.8.0")
    _, cfg = config_mod.resolve("forward", "sm90", 128, 128, "bf16", 0.0, {"forward": {"num_warps": 8}},
                                serves_gluon=True)
    assert "gluon" not in cfg and cfg["num_warps"] == 8 and cfg["BLOCK_N"] == 64
    _, cfg = config_mod.resolve("forward", "sm90", 128, 128, "bf16", 0.0, {"backward": {"num_warps": 8}},
                                serves_gluon=True)
    assert cfg["gluon"] is True and cfg["num_warps"] == 4
    with pytest.raises(config_mod.ConfigOverrideError, match="config-file key"):
        config_mod.check_override({"gluon": False}, "sm90")


@pytest.mark.parametrize("bad, message", [
    ({"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2}, "lacks keys \\['triton'\\]"),
    ({"triton": "3.8+", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2}, "expected e.g."),
    ({"triton": ">=3.8", "BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2}, "takes BLOCK_M"),
    ({"triton": ">=3.8", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "x": 1}, "unknown keys"),
])
def test_a_bad_gluon_config_is_refused(bad, message):
    with pytest.raises(config_mod.ConfigFileError, match=message):
        config_mod._check_gluon(bad, "forward", "default", "f.json: forward.default.gluon")
    with pytest.raises(config_mod.ConfigFileError, match="lacks keys"):      # the backward's keys differ
        config_mod._check_gluon(dict(GLUON_CONFIG), "backward", "default", "f.json: backward.default.gluon")


@pytest.mark.skipif(not SELECTED_HERE, reason="this toolchain's config does not select the Gluon forward")
def test_the_pe_gluon_spec():
    """Dqk 192 / Dv 128: the same kernel with the q/k head dim in a 128 and a 64 part, each its own
    TMA box; v and o are Dv wide."""
    spec = launch.kernel_specs(launch.Problem("bf16", 192, 128, causal=True), "sm90")["fwd_gluon"]
    assert spec.bucket == "pe" and spec.fn is launch.kernel_specs(launch.Problem("bf16", 128, 128),
                                                                   "sm90")["fwd_gluon"].fn
    block_n = PE_CONFIG["BLOCK_N"]
    assert spec.signature["q_desc"].startswith("tensordesc<bf16[64,128]")
    assert spec.signature["q2_desc"].startswith("tensordesc<bf16[64,64]")
    assert spec.signature["k_desc"].startswith(f"tensordesc<bf16[{block_n},128]")
    assert spec.signature["k2_desc"].startswith(f"tensordesc<bf16[{block_n},64]")
    assert spec.signature["v_desc"] == spec.signature["k_desc"] and spec.signature["o_desc"] == spec.signature["q_desc"]
    assert spec.constexprs["HEAD_DIM"] == 128 and spec.constexprs["HEAD_DQK1"] == 64
    assert spec.constexprs["HEAD_GROUP"] == 4                       # causal slices walked 4 at a time
    assert spec.constexprs["STAGES"] == PE_CONFIG["num_stages"] and spec.options == {"maxnreg": 168}


def test_the_pe_gluon_config_is_shaped_as_every_gluon_forward():
    config_mod._check_gluon(dict(PE_CONFIG), "forward", "pe", "f.json: forward.pe.gluon")
    with pytest.raises(config_mod.ConfigFileError, match="takes BLOCK_N"):
        config_mod._check_gluon({**PE_CONFIG, "BLOCK_N": 32}, "forward", "pe", "f.json: forward.pe.gluon")


# ------------------------------------------------------------------ on the GPU (H200, sm90)
needs_gluon = pytest.mark.skipif(HAS_CUDA and not SELECTED_HERE,
                                 reason="this toolchain's config does not select the Gluon forward")
# Dqk == Dv, and Dqk 192 / Dv 128 (the `pe` bucket's split head dim) in the same geometries.
RESULT_CASES = (GLUON_CASES | {f"pe_{name}": case for name, case in GLUON_PE_CASES.items()}
                | {f"d64_{name}": dataclasses.replace(case, dqk=64, dv=64) for name, case in GLUON_CASES.items()})


@pytest.mark.gpu
@needs_gluon
@pytest.mark.parametrize("dtype", [dtype_param(torch.bfloat16), dtype_param(torch.float16)])
@pytest.mark.parametrize("case", RESULT_CASES.values(), ids=RESULT_CASES.keys())
def test_results(case, dtype, device, launched):
    """The default grid: the test problems are smaller than a persistent grid, so one program per
    tile, in the form without the tile loop."""
    run_dense(case, dtype, device)
    assert launched[0] == "fwd_gluon_tile"


@pytest.mark.gpu
@needs_gluon
@pytest.mark.parametrize("case", RESULT_CASES.values(), ids=RESULT_CASES.keys())
def test_results_when_each_program_walks_many_tiles(case, device, launched, monkeypatch):
    """Three programs, so each walks several tiles and its K/V rings, turns and Q buffers run on
    across tiles (the test problems are smaller than a persistent grid, which the default grid
    therefore launches one program per tile for)."""
    from mha.tile_schedule import PROGRAMS_ENV
    monkeypatch.setenv(PROGRAMS_ENV, "3")
    run_dense(case, torch.bfloat16, device)
    tiles = case.batch * case.heads_q * case.seqlen_q // config_mod.GLUON_TILE_ROWS
    assert launched[0] == ("fwd_gluon" if tiles > 3 else "fwd_gluon_tile")     # 3 programs at most one a tile


@pytest.mark.gpu
@needs_gluon
@pytest.mark.parametrize("case", SCALE_CASES.values(), ids=SCALE_CASES.keys())
def test_scales_that_are_not_positive(case, device, launched):
    """Forward and backward against the reference. The Gluon backward serves these problems;
    the Triton forward does where the Gluon one folds the scale into its exponent."""
    run_dense(case, torch.bfloat16, device)
    spec = launch.kernel_specs(launch.Problem("bf16", case.dqk, case.dv, causal=case.causal), "sm90")["fwd_gluon"]
    assert launched[0] == ("fwd_gluon_tile" if launch.gluon_scale_ok(spec, case.softmax_scale) else "fwd")
    assert "bwd_dkdv_gluon" in launched


@pytest.mark.gpu
@needs_gluon
@pytest.mark.parametrize("case", GLUON_FALLBACK_CASES.values(), ids=GLUON_FALLBACK_CASES.keys())
def test_other_inputs_run_the_triton_forward(case, device, launched):
    run_dense(case, torch.bfloat16, device)
    assert launched[0] == "fwd"


@pytest.mark.gpu
@needs_gluon
def test_a_strided_input_runs_the_triton_forward(device, launched):
    q = torch.randn(1, 256, 2, 256, device=device, dtype=torch.bfloat16)[..., :128]
    k = torch.randn(1, 256, 2, 128, device=device, dtype=torch.bfloat16)
    v = torch.randn(1, 256, 2, 128, device=device, dtype=torch.bfloat16)
    out = mha.flash_attn_func(q, k, v, causal=True)
    ref = mha.flash_attn_func(q.contiguous(), k, v, causal=True)
    assert launched == ["fwd", "fwd_gluon_tile"]
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=0)
