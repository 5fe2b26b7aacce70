"""The warp-specialized forward (mha.kernels.forward_ws), chosen by the config key
`warp_specialize`: its selection, its guard, its launch checks, and its results against the
float64 reference. On the CPU the interpreter runs it (tensor descriptors included); the
warp-specialization pass itself only runs in a compile, so what it makes of a tile's rows is read
from an sm90 compile without a GPU (sm90_ttgir.py, in a process without the interpreter). Shapes
stay small: a few seconds per case.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from cases import Case, run_dense, run_varlen
from checks import dtype_param
from mha import config, launch
from mha.kernels.forward import attn_fwd
from mha.kernels.forward_ws import attn_fwd_ws

# num_warps 4: the only count the Hopper pass acts on, so that a GPU run tests the specialized code.
WS = {"forward": {"warp_specialize": True, "num_warps": 4}}


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
    with pytest.raises(ValueError, match=r"config\['warp_specialize'\]: expected a bool, got int 1"):
        config.resolve("forward", "sm90", 128, 128, "bf16", 0.0, {"warp_specialize": 1})


@pytest.mark.parametrize("version,stages", [("3.4.0", 2), ("3.6.0", 2), ("3.8.0", 3)])
def test_ws_three_stages_fall_back_to_two_before_triton_38(monkeypatch, version, stages):
    monkeypatch.setattr(config, "triton_version", lambda: version)
    _, cfg = config.resolve("forward", "sm90", 128, 128, "bf16", 0.0,
                            {"warp_specialize": True, "num_warps": 4, "num_stages": 3})
    assert cfg["num_stages"] == stages
    _, plain = config.resolve("forward", "sm90", 128, 128, "bf16", 0.0, {"num_stages": 3})
    assert plain["num_stages"] == 3          # the plain kernel's 3 stages are not the miscompile


def test_tma_ready_needs_16_byte_strides_and_a_contiguous_head_dim():
    q = torch.randn(1, 8, 2, 41, dtype=torch.float16)[..., :40]   # row stride 82 bytes
    k = torch.randn(1, 8, 2, 40, dtype=torch.float16)
    assert not launch.tma_ready(q, k, k)
    assert not launch.tma_ready(k.transpose(-1, -2).contiguous().transpose(-1, -2), k, k)
    assert launch.tma_ready(q.contiguous(), k, k)


def test_inputs_tma_cannot_read_run_the_plain_forward_with_the_same_tiles(monkeypatch, device):
    launched = []
    monkeypatch.setattr(launch, "LAUNCH_OBSERVERS", [lambda spec, _kernel: launched.append(spec)])
    # One head of 36 fp16: a row stride of 72 bytes, which a TMA descriptor cannot take.
    run_dense(Case(1, 33, 20, 1, 1, 36, 36), torch.float16, device, backward=False,
              config={"forward": {"warp_specialize": True, "num_warps": 4, "BLOCK_M": 32, "BLOCK_N": 16}})
    fwd = [s for s in launched if s.name == "fwd"]
    assert fwd and all(s.fn is attn_fwd for s in fwd)
    assert "WARP_SPECIALIZE" not in fwd[0].constexprs and fwd[0].num_warps == 4
    assert (fwd[0].constexprs["BLOCK_M"], fwd[0].constexprs["BLOCK_N"]) == (32, 16)


# Head dims whose row strides are multiples of 16 elements: Triton 3.4's interpreter checks a
# descriptor's strides in elements where the hardware counts bytes (3.8 counts bytes).
DIMS = {"d64": (64, 64), "d80": (80, 80), "d128": (128, 128), "d192_128": (192, 128)}
# Query tiles that fill one or both 64-row halves of a 128-row tile (the pass splits a tile
# between two consumer groups), more queries than keys and fewer, ragged key blocks.
LENGTHS = {"q45_k70": (45, 70), "q65_k40": (65, 40), "q193_k161": (193, 161)}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lengths", list(LENGTHS.values()), ids=list(LENGTHS))
@pytest.mark.parametrize("dims", list(DIMS.values()), ids=list(DIMS))
def test_ws_forward_against_reference(dims, lengths, causal, device):
    run_dense(Case(2, *lengths, 4, 2, *dims, causal=causal), torch.float16, device, backward=False, config=WS)


@pytest.mark.parametrize("dtype", [dtype_param(torch.float16), dtype_param(torch.bfloat16)])
@pytest.mark.parametrize("feature", [dict(window=(8, 4)), dict(sink=True, causal=True, window=(12, 0)),
                                     dict(causal=True), dict(sink=True)],
                         ids=["window", "sink_causal_window", "causal_q_gt_k", "sink"])
def test_ws_forward_features_and_backward(feature, dtype, device):
    run_dense(Case(1, 70, 45, 2, 1, 64, 64, **feature), dtype, device, config=WS)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_ws_forward_varlen_with_empty_and_padded_tiles(causal, device):
    # The grid is sized by the longest sequence: tiles past a short one loop over no key, and
    # store nothing (an empty sequence's descriptor has one row, at row 0 of the tensor).
    run_varlen([5, 70, 0, 33], [40, 64, 7, 33], 4, 2, 64, 64, torch.float16, device, causal=causal,
               config=WS)


UNMASKED = {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "warp_specialize": True}


@pytest.fixture
def sm90_file(tmp_path, monkeypatch):
    """A copy of the shipped sm90 file, changed by the test through the returned function."""
    shipped = config.config_path("sm90").read_text()

    def write(change):
        data = json.loads(shipped)
        change(data)
        (tmp_path / "sm90-MHA-DEFAULT.json").write_text(json.dumps(data))
        config.load_arch_configs.cache_clear()
    monkeypatch.setattr(config, "CONFIG_DIR", tmp_path)
    yield write
    config.load_arch_configs.cache_clear()


@pytest.mark.parametrize("causal,window,warp_specialized", [(False, (-1, -1), True), (True, (-1, -1), False),
                                                             (False, (64, 0), False), (False, (-1, 8), False)])
def test_an_unmasked_config_serves_only_problems_without_a_band(sm90_file, causal, window, warp_specialized):
    sm90_file(lambda d: d["forward"]["default"].update(unmasked=UNMASKED))
    spec = launch.kernel_specs(launch.Problem("bf16", 128, 128, causal=causal, window=window), "sm90")["fwd"]
    assert (spec.fn is attn_fwd_ws) is warp_specialized
    tiles = (spec.constexprs["BLOCK_M"], spec.constexprs["BLOCK_N"], spec.num_warps, spec.num_stages)
    plain = config.load_arch_configs("sm90")["forward"]["default"]
    want = UNMASKED if warp_specialized else plain
    assert tiles == (want["BLOCK_M"], want["BLOCK_N"], want["num_warps"], want["num_stages"])
    assert spec.bucket == "default"


def test_an_override_still_wins_over_the_unmasked_config(sm90_file):
    sm90_file(lambda d: d["forward"]["default"].update(unmasked=UNMASKED))
    spec = launch.kernel_specs(launch.Problem("bf16", 128, 128), "sm90", {"forward": {"num_stages": 1}})["fwd"]
    assert spec.fn is attn_fwd_ws and spec.num_stages == 1 and spec.constexprs["BLOCK_N"] == 128


@pytest.mark.parametrize("pass_,unmasked,message", [
    ("forward", {"BLOCK_M": 128}, "lacks keys"),
    ("forward", {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "BLOCK_M1": 1}, "unknown keys"),
    ("forward", {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "warp_specialize": 1},
     "warp_specialize must be true or false"),
    ("forward", [128, 64], "must be an object"),
    ("backward", {}, "only forward buckets"),
])
def test_unmasked_configs_are_checked_like_buckets(sm90_file, pass_, unmasked, message):
    sm90_file(lambda d: d[pass_]["default"].update(unmasked=unmasked))
    with pytest.raises(config.ConfigFileError, match=message):
        config.load_arch_configs("sm90")


def test_guards_reach_unmasked_configs(sm90_file):
    def change(data):
        # A shipped guard without its fallback: a prohibition, which check_config holds every bucket to.
        data["guards"] = [{k: v for k, v in g.items() if k != "fallback"}
                          for g in data["guards"] if g["id"] == "ws-stages-above-2-before-3.8"]
        data["forward"]["default"]["unmasked"] = dict(UNMASKED, num_stages=3)
    sm90_file(change)
    with pytest.raises(config.ConfigFileError, match=r"forward\.default\.unmasked uses \{'num_stages': 3\}"):
        config.load_arch_configs("sm90")


@pytest.mark.parametrize("version", ["3.4.0", "3.6.0", "3.8.0"])
@pytest.mark.parametrize("banded,dropout_p,block_m", [(False, 0.0, 128), (True, 0.0, 64), (False, 0.1, 64)],
                         ids=["no_band", "band", "dropout"])
def test_ws_tiles_of_128_rows_only_without_a_band_or_dropout(monkeypatch, version, banded, dropout_p, block_m):
    # Two consumer groups of 64 rows: right once O and lse go through descriptors, but not with
    # a band mask in the loop (docs/records/2026-12-01-h200-ws-repro); dropout masks per row too.
    monkeypatch.setattr(config, "triton_version", lambda: version)
    _, cfg = config.resolve("forward", "sm90", 128, 128, "bf16", dropout_p,
                            {"warp_specialize": True, "num_warps": 4, "BLOCK_M": 128}, banded=banded)
    assert cfg["BLOCK_M"] == block_m
    _, plain = config.resolve("forward", "sm90", 128, 128, "bf16", dropout_p, {"BLOCK_M": 128}, banded=banded)
    assert plain["BLOCK_M"] == 128


def test_a_guard_on_band_or_dropout_must_say_true_or_false():
    from mha import guards
    guard = {"id": "g", "forbid": {"BLOCK_M": [128]}, "why": "w", "when": {"band_or_dropout": "yes"}}
    with pytest.raises(guards.GuardError, match="band_or_dropout must be true or false"):
        guards.check_guard(guard, "f", {"BLOCK_M"})
    guard["when"]["band_or_dropout"] = True
    assert guards.applies_to_problem(guard, 64, 64, "fp16", True)
    assert not guards.applies_to_problem(guard, 64, 64, "fp16", False)
    assert guards.applies_to_problem(guard, 64, 64, "fp16")     # not known: counts as met


# --- what the Hopper pass makes of the tile's rows (an sm90 compile, no GPU needed) -----------------
# BLOCK_M 128 given again after the guard ws-two-consumer-groups-band-or-dropout narrowed it: the
# question is what two consumer groups of a 128-row tile compute.
TWO_GROUPS = {"warp_specialize": True, "num_warps": 4, "num_stages": 2, "BLOCK_M": 128, "BLOCK_N": 128}


@pytest.fixture(scope="module")
def two_group_ttgir() -> dict:
    wanted = {"causal": [{"causal": True}, TWO_GROUPS, 128], "dropout": [{"dropout": True}, TWO_GROUPS, 128]}
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="mha-test-ttgir-")
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("sm90_ttgir.py")), json.dumps(wanted)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _consumer_rows(ttgir: str) -> list[tuple[tuple[int, int], list[str]]]:
    """Per consumer partition (one with MMAs): its row range (the make_range of the rows' layout)
    and the tensor types that a scalar shifted by 64 (the pass's second-group tile start) reaches
    through scalar arithmetic and a splat."""
    parts = re.split(r"\n\s+partition\d+\(", ttgir)[1:]
    out = []
    for body in parts:
        if "warp_group_dot" not in body:
            continue                                  # the producer: loads only
        ranges = re.findall(r"tt.make_range \{[^}]*end = (\d+) : i32, start = (\d+) : i32\} : "
                            r"tensor<\d+xi32, #ttg.slice<\{dim = 1", body)
        shifted = set(re.findall(r"(%\w+) = arith.addi %\w+, %c64_i32\w* [^\n]*: i32", body))
        grew = True
        while grew:                                   # scalars computed from a shifted one
            grew = False
            for res, operands in re.findall(r"(%\w+) = arith.\w+ ([^{:\n]*)[^\n]*: i32(?: loc\([^)]*\))?\n", body):
                if res not in shifted and shifted & set(re.findall(r"%\w+", operands)):
                    shifted.add(res)
                    grew = True
        reached = [ty.split(" loc(")[0] for src, ty in re.findall(r"= tt.splat (%\w+) [^\n]*-> (tensor<[^\n]*)", body)
                   if src in shifted]
        out.append(((int(ranges[0][1]), int(ranges[0][0])), reached))
    return out


@pytest.mark.parametrize("problem", ["causal", "dropout"])
def test_the_second_consumer_group_offsets_its_rows_once(two_group_ttgir, problem):
    """With two consumer groups the pass gives the second group m0 + 64 for the tile start and
    the rows [64, 128) of tl.arange: a row index built from both counted 64 twice (wrong rows on
    the H200, docs/records/2026-12-03-ws-rows-ttgir). attn_fwd_ws keeps row indices tl.arange
    alone; this holds it to that, in the TTGIR of both pinned Tritons."""
    groups = _consumer_rows(two_group_ttgir[problem])
    assert [rows for rows, _ in groups] == [(0, 64), (64, 128)]
    assert [reached for _, reached in groups] == [[], []]
