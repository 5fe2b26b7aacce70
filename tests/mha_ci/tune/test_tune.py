"""mha-ci tune: the candidate space, the config guards, pruning, targets from a report, the out
folder's resume, the choice, and the proposal branch. No torch here; the real compile is the
slow test at the end, the GPU timing path is covered only up to its record keeping (docs/tune.md)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from mha_ci.model.loader import load_pipeline
from mha_ci.perf.buckets import bucket_of, select_bucket
from mha_ci.tune import outdir, plan, prune, rules, select, session, space, targets

ROOT = Path(__file__).resolve().parents[3]
# the regressed rows of the 2026-11-29 record's golden-3.4-vs-tot-3.8-full/compare.json
REPORT = ROOT / "tests/fixtures/tune/golden-3.4-vs-tot-3.8-full.compare.json"
FWD = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
KEYS = {"forward": {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "warp_specialize"},
        "backward": {"BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "num_warps", "num_stages"}}


@pytest.fixture(scope="module")
def guards():
    return rules.guards_module(ROOT)


# space ---------------------------------------------------------------------------------------

def test_space_current_first_then_nearest_without_duplicates():
    cands = space.candidates("nvidia", "forward", FWD)
    assert cands[0].id == space.CURRENT and cands[0].cfg == FWD
    table = space.SPACES["nvidia"]["forward"]
    size = 1
    for values in table.values():
        size *= len(values)
    assert len(cands) == size          # the current config is in the table: not listed twice
    assert len({c.config for c in cands}) == len(cands)
    distances = [c.distance(FWD) for c in cands[1:]]
    assert distances == sorted(distances) and distances[0] == 1


def test_backward_space_ties_the_two_kernels_tiles():
    current = {"BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 32, "num_warps": 8, "num_stages": 3}
    for cand in space.candidates("nvidia", "backward", current)[1:]:
        cfg = cand.cfg
        assert cfg["BLOCK_M1"] == cfg["BLOCK_N2"] and cfg["BLOCK_N1"] == cfg["BLOCK_M2"]


def test_unknown_vendor_is_refused():
    with pytest.raises(ValueError, match="no candidate space"):
        space.candidates("cpu", "forward", FWD)


# guards --------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec,version,expected", [
    (">=3.8", "3.8.0", True), (">=3.8", "3.4.0", False), (">=3.8", "3.10.1", True), ("<3.5", "3.4.0", True),
    ("==3.4", "3.4.2", True), ("==3.4", "3.5.0", False), (None, "3.4.0", True), (">=3.8", None, True),
])
def test_guard_version_match(guards, spec, version, expected):
    assert guards.version_matches(spec, version) is expected


def _config(guard_list, stages=3):
    bucket = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": stages}
    return {"forward": {"default": dict(bucket), "small_head": dict(bucket, num_stages=1)},
            "backward": {}, "guards": guard_list}


PROHIBIT = {"id": "p", "when": {"head_dim_at_most": 16}, "forbid": {"num_stages": [3]}, "why": "miscompiles"}


def test_config_violating_its_own_prohibition_is_refused(guards):
    with pytest.raises(guards.GuardError, match="forward.default uses {'num_stages': 3}.*miscompiles"):
        guards.check_config(_config([PROHIBIT]), "x.json", KEYS, select_bucket)
    guards.check_config(_config([PROHIBIT], stages=2), "x.json", KEYS, select_bucket)


def test_prohibition_only_for_buckets_its_problems_reach(guards):
    large = dict(PROHIBIT, when={"head_dim_above": 128})   # no problem of default reaches it
    guards.check_config(_config([large]), "x.json", KEYS, select_bucket)


def test_replacement_is_not_a_violation_and_acts_at_launch(guards):
    replace = dict(PROHIBIT, fallback={"num_stages": 2})
    guards.check_config(_config([replace]), "x.json", KEYS, select_bucket)
    cfg = {"BLOCK_M": 64, "num_stages": 3}
    assert guards.enforce([replace], "forward", cfg, 16, 16, "fp16", "3.8.0")["num_stages"] == 2
    assert guards.enforce([replace], "forward", cfg, 64, 64, "fp16", "3.8.0")["num_stages"] == 3


def test_guard_with_a_config_condition_acts_only_on_configs_that_hold_it(guards):
    ws = dict(PROHIBIT, when={"config": {"warp_specialize": True}}, fallback={"num_stages": 2}, triton="<3.8")
    plain = {"BLOCK_M": 128, "num_stages": 3}
    assert guards.enforce([ws], "forward", dict(plain, warp_specialize=True), 128, 128, "bf16", "3.4.0")["num_stages"] == 2
    assert guards.enforce([ws], "forward", dict(plain, warp_specialize=True), 128, 128, "bf16", "3.8.0")["num_stages"] == 3
    assert guards.enforce([ws], "forward", dict(plain, warp_specialize=False), 128, 128, "bf16", "3.4.0") == \
        dict(plain, warp_specialize=False)
    assert guards.enforce([ws], "forward", plain, 128, 128, "bf16", "3.4.0") == plain   # absent: unset
    prohibit = dict(PROHIBIT, when={"config": {"warp_specialize": True}})
    guards.check_config(_config([prohibit]), "x.json", KEYS, select_bucket)   # no bucket holds the flag


@pytest.mark.parametrize("when,match", [({"config": {"warp_specialise": True}}, "when.config names"),
                                        ({"config": ["warp_specialize"]}, "when.config must be an object")])
def test_malformed_config_condition_is_refused(guards, when, match):
    with pytest.raises(guards.GuardError, match=match):
        guards.check_config(_config([dict(PROHIBIT, when=when)], stages=1), "x.json", KEYS, select_bucket)


def test_shipped_sm90_fences_the_warp_specialized_three_stage_nan(guards):
    data = rules.load_config(ROOT, "sm90")
    cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "warp_specialize": True}
    for version, stages in (("3.4.0", 2), ("3.6.0", 2), ("3.8.0", 3)):
        assert guards.enforce(data["guards"], "forward", cfg, 128, 128, "bf16", version)["num_stages"] == stages
    assert guards.enforce(data["guards"], "backward", cfg, 128, 128, "bf16", "3.4.0")["num_stages"] == 3


def test_prohibition_raises_at_launch_only_on_its_toolchain(guards):
    fenced = dict(PROHIBIT, triton=">=3.8")
    with pytest.raises(guards.GuardError, match="guard 'p'"):
        guards.enforce([fenced], "forward", {"num_stages": 3}, 16, 16, "bf16", "3.8.0")
    assert guards.enforce([fenced], "forward", {"num_stages": 3}, 16, 16, "bf16", "3.4.0") == {"num_stages": 3}


@pytest.mark.parametrize("bad,match", [
    ({"id": "x", "forbid": {"num_stages": [3]}}, "needs 'why'"),
    ({"id": "x", "forbid": {"BLOK_M": [3]}, "why": "w"}, "not a config key"),
    ({"id": "x", "forbid": {"num_stages": [3]}, "fallback": {"num_stages": 3}, "why": "w"}, "itself forbidden"),
    ({"id": "x", "forbid": {"num_stages": [3]}, "when": {"head_dim": 16}, "why": "w"}, "unknown `when`"),
    ({"id": "x", "forbid": {"num_stages": [3]}, "triton": "3.8+", "why": "w"}, "expected e.g."),
])
def test_malformed_guards_are_refused(guards, bad, match):
    with pytest.raises(guards.GuardError, match=match):
        guards.check_config(_config([bad], stages=1), "x.json", KEYS, select_bucket)


@pytest.mark.parametrize("arch", ["gfx942", "gfx950", "sm90", "interpreter"])
def test_shipped_configs_pass_their_guards(guards, arch):
    data = rules.load_config(ROOT, arch)
    assert data["guards"], "every shipped config carries the head-dim-16 stage guard"
    guards.check_config(data, arch, KEYS, select_bucket)


def test_shipped_gfx950_fences_the_triton_38_miscompile(guards):
    data = rules.load_config(ROOT, "gfx950")
    fence = [g for g in data["guards"] if g.get("triton") == ">=3.8" and "fallback" not in g]
    assert fence and fence[0]["forbid"] == {"num_stages": [3]} and fence[0]["when"] == {"head_dim_at_most": 16}


# pruning -------------------------------------------------------------------------------------

def test_guard_prunes_stage3_on_gfx950_38_only(guards):
    data = rules.load_config(ROOT, "gfx950")
    current = data["forward"]["small_head"]
    cands = space.candidates("amd", "forward", current)
    on38 = prune.by_guards(cands, guards, data["guards"], "forward", "small_head", "3.8.0")
    on34 = prune.by_guards(cands, guards, data["guards"], "forward", "small_head", "3.4.0")
    stage3 = [d for d in on38 if d.candidate.cfg["num_stages"] == 3]
    assert stage3 and all(d.rule == "guard" and "gfx950-triton-3.8" in d.why for d in stage3)
    assert all(d.rule is None for d in on38 if d.candidate.cfg["num_stages"] != 3)
    assert all(d.rule is None for d in on34)


def test_replacement_guard_notes_but_keeps_sm90_stage3(guards):
    data = rules.load_config(ROOT, "sm90")
    cands = space.candidates("nvidia", "forward", plan.own_config(data["forward"]["default"]))
    decisions = prune.by_guards(cands, guards, data["guards"], "forward", "default", "3.8.0")
    three = next(d for d in decisions if d.candidate.cfg["num_stages"] == 3 and d.candidate.id != "current")
    assert three.survives and any("stages-above-2-head16" in n for n in three.notes)


def _kernel(shared=1000, regs=100, spills=0, error=None):
    return {"fwd": {"shared_bytes": shared, "registers": regs, "spills": spills, "error": error}}


def test_resource_rules_in_order():
    cands = [space.Candidate("current", (("BLOCK_M", 1),)), *[space.Candidate(n, (("BLOCK_M", i),))
                                                              for i, n in enumerate("abcde", 2)]]
    decisions = [prune.Decision(c) for c in cands]
    compiled = {"current": {"kernels": _kernel(spills=4)}, "a": {"kernels": _kernel(shared=300_000, regs=300)},
                "b": {"kernels": _kernel(regs=300)}, "c": {"kernels": _kernel(spills=8)},
                "d": {"kernels": _kernel(error="CompilationError: boom\nout of resources")},
                "e": {"kernels": _kernel(spills=4)}}
    limits = SimpleNamespace(shared_bytes=232448, registers=255)
    prune.by_resources(decisions, compiled, limits)
    got = {d.candidate.id: d.rule for d in decisions}
    assert got == {"current": None, "a": "shared", "b": "registers", "c": "spills", "d": "compile", "e": None}
    assert "out of resources" in next(d.why for d in decisions if d.candidate.id == "d")
    assert prune.summary(decisions) == {"candidates": 5, "remaining": 1,
                                        "pruned": {"guard": 0, "compile": 1, "shared": 1, "registers": 1,
                                                   "spills": 1}}


# targets -------------------------------------------------------------------------------------

def test_report_picks_regressed_buckets_and_shapes():
    chosen = targets.choose([], None, targets.read_report(REPORT))
    counts = {t.bucket: len(t.shapes) for t in chosen}
    assert counts == {"default": 2, "small_head": 19, "pe": 1}     # no workloads given: the report's shapes
    small = next(t for t in chosen if t.bucket == "small_head")
    problem = targets.compile_problem(small, "forward")
    assert problem["dqk"] == 64 and problem["has_sink"] and problem["varlen"] and problem["window"][0] == 128
    assert targets.choose([], ["pe"], targets.read_report(REPORT))[0].bucket == "pe"


def test_report_buckets_are_timed_on_all_their_workload_shapes():
    """The regressed shapes are the goal; every other workload shape of the bucket is timed too,
    so a candidate that recovers the regressions by slowing the rest cannot be chosen."""
    from mha_ci.perf.request import selected_workloads
    workloads = selected_workloads(load_pipeline(ROOT), "full")
    entries = [w.to_dict() for w in workloads]
    chosen = {t.bucket: t for t in targets.choose(entries, None, targets.read_report(REPORT))}
    for target in chosen.values():
        keys = [s["key"] for s in target.shapes]
        assert len(keys) == len(set(keys))
        assert set(target.regressed) <= set(keys) and len(keys) > len(target.regressed)
        assert all(s["bucket"] == target.bucket for s in target.shapes)
    everything = sum(1 for e in entries if bucket_of(targets.shape_of(e)) == "small_head"
                     and targets.shape_of(e).pass_ == "fwd")      # the report's regressions are forward ones
    assert len(chosen["small_head"].shapes) == everything


def test_choice_is_ranked_on_the_goal_shapes_and_judged_on_all():
    rows = [_row("regressed", 100, fast_on_goal=70, even=95),
            _row("other", 100, fast_on_goal=110, even=95)]
    ranked = select.scores(rows, ["fast_on_goal", "even"], 3.0, goal=frozenset({"regressed"}))
    by_id = {s.id: s for s in ranked}
    assert by_id["fast_on_goal"].geomean == pytest.approx(0.70)
    assert "other slower by 10.0 %" in by_id["fast_on_goal"].disqualified
    assert select.best(ranked).id == "even"
    assert by_id["even"].to_json()["geomean_ratio_all"] == pytest.approx(0.95)


def test_a_bucket_with_an_unmasked_config_is_tuned_on_its_banded_shapes_only():
    """The `unmasked` config serves the shapes without a band; tune changes only the bucket's own
    config, so it times only the shapes that config serves, and says so when none is left."""
    from mha_ci.errors import ConfigError
    from mha_ci.perf.request import selected_workloads
    entries = [w.to_dict() for w in selected_workloads(load_pipeline(ROOT), "full")]
    target = targets.choose(entries, ["default"], None)[0]
    sm90 = rules.load_config(ROOT, "sm90")["forward"]["default"]
    assert "unmasked" in sm90
    own = targets.own_config_shapes(target, sm90)
    banded = [e for e in target.shapes if targets.shape_of(e).causal or max(targets.shape_of(e).window) >= 0]
    assert own.shapes == banded and 0 < len(banded) < len(target.shapes)
    assert targets.own_config_shapes(target, plan.own_config(sm90)) is target
    assert "unmasked" not in plan.own_config(sm90) and plan.own_config(sm90)["BLOCK_M"] == sm90["BLOCK_M"]
    unbanded = targets.BucketTarget("default", [e for e in target.shapes if e not in banded])
    with pytest.raises(ConfigError, match="nothing left to judge"):
        targets.own_config_shapes(unbanded, sm90)


def test_a_bucket_with_a_gluon_config_leaves_its_shapes_out_where_the_toolchain_runs_it():
    """Under a Triton the `gluon` config names, the shapes the Gluon forward takes run it, not the
    bucket's own config: tune leaves them out; under another Triton they stay."""
    from mha_ci.perf.request import selected_workloads
    entries = [w.to_dict() for w in selected_workloads(load_pipeline(ROOT), "full")]
    target = targets.choose(entries, ["default"], None)[0]
    sm90 = rules.load_config(ROOT, "sm90")["forward"]["default"]
    assert sm90["gluon"]["triton"] == ">=3.8"
    golden = targets.own_config_shapes(target, sm90, "sm90", "3.4.0")
    top = targets.own_config_shapes(target, sm90, "sm90", "3.8.0")
    gone = {e["key"] for e in golden.shapes} - {e["key"] for e in top.shapes}
    assert {e["key"] for e in top.shapes} < {e["key"] for e in golden.shapes}
    assert "dense_b1_hq64_hk8_sq8192_sk8192_dqk128_dv128_c1" in gone
    assert all(k.startswith("dense_") and "_dqk128_dv128_c1" in k and "_wl" not in k for k in gone)
    kept = {e["key"] for e in top.shapes}
    assert "varlen_b1_hq64_hk8_sq8192_sk8192_dqk128_dv128_c1" in kept          # varlen: the Triton forward
    assert "dense_b64_hq64_hk8_sq1_sk8192_dqk128_dv128_c1" in kept             # Sq 1: not a multiple of 128
    assert "gluon" not in plan.own_config(sm90)
    assert targets.own_config_shapes(target, sm90, "gfx942", "3.8.0").shapes == golden.shapes


def test_a_backward_gluon_config_leaves_its_backward_shapes_out_where_the_toolchain_runs_it():
    """The backward bucket's `gluon` config (the Gluon dK/dV and dQ kernels) takes the same problems
    as the forward's, and a `ws` config (the warp-specialized backward) the same again: tune of
    the backward leaves those shapes out under Triton 3.8 (gluon) and 3.4 (ws), and keeps them
    under a Triton that runs neither (3.6). The file holds no `ws` now (docs/configs.md), so 3.4
    keeps them all; the test adds the withdrawn one."""
    from mha_ci.perf.request import selected_workloads
    entries = [w.to_dict() for w in selected_workloads(load_pipeline(ROOT), "full")]
    target = targets.choose(entries, ["default"], None, "backward")[0]
    in_file = rules.load_config(ROOT, "sm90")["backward"]["default"]
    assert in_file["gluon"]["triton"] == ">=3.8" and "ws" not in in_file
    assert targets.own_config_shapes(target, in_file, "sm90", "3.4.0") is target
    sm90 = {**in_file, "ws": {"triton": "==3.4", "BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 64,
                              "num_warps": 4, "num_stages": 2}}
    neither = targets.own_config_shapes(target, sm90, "sm90", "3.6.0")
    assert neither is target
    top = targets.own_config_shapes(target, sm90, "sm90", "3.8.0")
    gone = {e["key"] for e in neither.shapes} - {e["key"] for e in top.shapes}
    assert "dense_b1_hq64_hk8_sq8192_sk8192_dqk128_dv128_c1_bwd" in gone
    assert all(k.startswith("dense_") and "_dqk128_dv128_c" in k and k.endswith("_bwd") for k in gone)
    assert "varlen_b1_hq64_hk8_sq8192_sk8192_dqk128_dv128_c1_bwd" in {e["key"] for e in top.shapes}
    golden = targets.own_config_shapes(target, sm90, "sm90", "3.4.0")
    assert {e["key"] for e in golden.shapes} == {e["key"] for e in top.shapes}
    assert not {"gluon", "ws"} & set(plan.own_config(sm90)) and plan.own_config(sm90)["num_warps"] == 8


def test_the_pe_buckets_gluon_configs_leave_their_dense_shapes_out_under_triton_3_8():
    """The `pe` bucket's `gluon` configs (the Gluon forward; the Gluon dK/dV beside the Triton dQ)
    take the dense Dqk 192 / Dv 128 shapes of whole tiles: tune's overrides run the Triton kernels
    on them, which the toolchain then does not launch."""
    from mha_ci.perf.request import selected_workloads
    entries = [w.to_dict() for w in selected_workloads(load_pipeline(ROOT), "full")]
    target = targets.choose(entries, ["pe"], None, "backward")[0]
    pe = rules.load_config(ROOT, "sm90")["backward"]["pe"]
    golden = targets.own_config_shapes(target, pe, "sm90", "3.4.0")
    top = targets.own_config_shapes(target, pe, "sm90", "3.8.0")
    gone = {e["key"] for e in golden.shapes} - {e["key"] for e in top.shapes}
    assert "dense_b1_hq128_hk128_sq8192_sk8192_dqk192_dv128_c1_bwd" in gone
    assert all(k.startswith("dense_") and "_dqk192_dv128_" in k and "_wl" not in k for k in gone)
    assert any(k.startswith("varlen_") for k in {e["key"] for e in top.shapes})
    assert "gluon" not in plan.own_config(pe)
    forward = targets.choose(entries, ["pe"], None, "forward")[0]
    pe_forward = rules.load_config(ROOT, "sm90")["forward"]["pe"]
    assert targets.own_config_shapes(forward, pe_forward, "sm90", "3.4.0") is forward
    kept = {e["key"] for e in targets.own_config_shapes(forward, pe_forward, "sm90", "3.8.0").shapes}
    gone = {e["key"] for e in forward.shapes} - kept
    assert "dense_b1_hq128_hk128_sq8192_sk8192_dqk192_dv128_c1" in gone
    assert all(k.startswith("dense_") and "_wl" not in k for k in gone)
    assert "dense_b64_hq128_hk128_sq1_sk8192_dqk192_dv128_c1" in kept         # sq 1: not whole tiles
    assert "gluon" not in plan.own_config(pe_forward)


def test_unknown_bucket_is_a_usage_error():
    from mha_ci.errors import ConfigError
    with pytest.raises(ConfigError, match="unknown bucket"):
        targets.choose([], ["smallhead"], None)


# out folder, resume, choice --------------------------------------------------------------------

def _stats(us):
    return {"trimmed_mean_us": us}


def _row(key, cur, **cands):
    return {"key": key, "bucket": "small_head",
            "configs": {"current": {"stats": _stats(cur), "max_abs_diff": 0.0},
                        **{c: {"stats": _stats(v), "max_abs_diff": 0.0} for c, v in cands.items()}}}


def test_resume_keeps_finished_shapes_and_ignores_a_torn_line(tmp_path):
    from mha_ci.payloads.tune import done_shapes

    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_row("s1", 10, a=9)) + "\n" + json.dumps(_row("s2", 10, a=9)) + "\n"
                    + '{"key": "s3", "configs": {"curr')      # killed mid-write
    assert set(outdir.latest_rows(path)) == {"s1", "s2"}
    assert done_shapes(path) == {"s1": {"current", "a"}, "s2": {"current", "a"}}
    # a later run that measured s1 again with more candidates: the later row wins
    with open(path, "a") as handle:
        handle.write("\n" + json.dumps(_row("s1", 11, a=10, b=9)) + "\n")
    assert set(outdir.latest_rows(path)["s1"]["configs"]) == {"current", "a", "b"}


def test_rep_order_alternates():
    from mha_ci.payloads.tune import rep_order
    assert rep_order(["current", "a", "b"], 0) == ["current", "a", "b"]
    assert rep_order(["current", "a", "b"], 1) == ["b", "a", "current"]


def test_choice_needs_every_shape_no_slowdown_and_the_same_output():
    rows = [_row("s1", 100, a=90, b=80, c=95), _row("s2", 100, a=95, b=104, c=96)]
    rows[0]["configs"]["c"]["max_abs_diff"] = 0.5
    ranked = select.scores(rows, ["a", "b", "c"], floor_pct=3.0)
    by_id = {s.id: s for s in ranked}
    assert "slower by 4.0 %" in by_id["b"].disqualified
    assert "output differs" in by_id["c"].disqualified
    assert select.best(ranked).id == "a"
    assert select.best(select.scores([_row("s1", 100, a=99.5)], ["a"], 3.0)) is None    # within noise


# proposal ------------------------------------------------------------------------------------

def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def test_propose_makes_a_branch_with_config_and_records_and_keeps_the_report_in_out(tmp_path, monkeypatch, tune_repo):
    from mha_ci.tune import proposal

    repo = tune_repo
    config = repo / "src/mha/configs/sm90-MHA-DEFAULT.json"
    out = tmp_path / "out"
    report_row = {"baseline_us": 100.0, "candidate_us": 104.0, "delta_pct": 4.0, "threshold_pct": 3.0}
    plan = {"arch": "sm90", "toolchain": "triton-3.8", "pass": "forward",
            "buckets": [{"bucket": "small_head", "report_rows": {"s1": report_row}}]}
    outdir.write_json(out / "plan.json", plan)
    new = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
    outdir.write_json(out / "choices.json", {"small_head": {"choice": "m64-n64-w4-s3", "config": new}})
    shape = {"layout": "dense", "batch": 1, "hq": 8, "hk": 1, "sq": 128, "sk": 128, "dqk": 64, "dv": 64,
             "causal": True, "window": [-1, -1], "sink": False, "dropout_p": 0.0, "dtype": "bf16"}
    outdir.write_json(out / "verify" / "plan.json", {"shapes": [{"key": "s1", "shape": shape}, {"key": "s2", "shape": shape}]})
    full = {"trimmed_mean_us": 0, "median_us": 0, "max_us": 0, "noise_pct": 0.5, "reps": 5, "dispatches": 40}
    lines = [{"key": k, "bucket": "small_head",
              "configs": {"current": {"stats": dict(full, trimmed_mean_us=100.0, median_us=100.0, max_us=101.0)},
                          "proposed": {"stats": dict(full, trimmed_mean_us=v, median_us=v, max_us=v + 1)}}}
             for k, v in (("s1", 96.0), ("s2", 99.5))]
    (out / "verify" / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    outdir.write_json(out / "verify" / "results.provenance.json",
                      {"device": {"gpu": "NVIDIA H200", "arch": "sm90"}, "pins": {"versions": {"triton": "3.8.0"}}})
    outdir.write_json(out / "timing" / "method.json", {"reps": 5})

    def fake_records(root, plan_, changed, scratch, executor_name):
        # the real one compiles in a worktree (covered by the checksums tests and the slow test below)
        text = proposal.session.proposed_config_text(config.read_text(), "forward", changed)
        return {"src/mha/configs/sm90-MHA-DEFAULT.json": text.encode(),
                "perf_baselines/code_objects/triton-3.8.json": b"{}\n"}

    monkeypatch.setattr(proposal, "records_for", fake_records)
    assert proposal.propose(load_pipeline(repo), out, branch="tune/test", executor_name="venv") == 0
    assert _git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"      # checkout untouched
    files = _git(repo, "show", "--name-only", "--format=", "tune/test").split()
    assert "src/mha/configs/sm90-MHA-DEFAULT.json" in files
    assert "perf_baselines/code_objects/triton-3.8.json" in files
    assert not any(f.startswith("docs/") for f in files)      # the report stays under --out
    assert {"compare.json", "compare.md", "proposal.json", "README.md"} <= {p.name for p in (out / "proposal").iterdir()}
    shipped = json.loads(_git(repo, "show", "tune/test:src/mha/configs/sm90-MHA-DEFAULT.json"))
    # The tuned keys replaced; a sub-config of another kernel (gluon, unmasked) stays as it was.
    tuned = {k: v for k, v in shipped["forward"]["small_head"].items() if k not in ("gluon", "unmasked")}
    assert tuned == new and shipped["guards"]
    message = _git(repo, "log", "-1", "--format=%B", "tune/test")
    assert "s1: +4.0 % -> -0.2 %" in message and "NOT RUN" in message
    summary = json.loads((out / "proposal" / "proposal.json").read_text())
    assert summary["recovered"][0]["recovered"] is True


def test_propose_refuses_a_regression(tmp_path):
    from mha_ci.tune import proposal

    out = tmp_path / "out"
    outdir.write_json(out / "plan.json", {"arch": "sm90", "toolchain": "triton-3.8", "pass": "forward", "buckets": []})
    outdir.write_json(out / "choices.json", {"small_head": {"choice": "x", "config": {"BLOCK_M": 64}}})
    outdir.write_json(out / "verify" / "plan.json", {"shapes": [{"key": "s1"}, {"key": "s2"}]})
    (out / "verify" / "results.jsonl").write_text(json.dumps(_row("s1", 10, proposed=9)) + "\n")
    with pytest.raises(proposal.ProposalRefused, match="verify measured 1 of 2"):
        proposal.propose(load_pipeline(ROOT), out, branch=None, executor_name="venv")


# the real compile ----------------------------------------------------------------------------

@pytest.mark.slow
def test_real_aot_compile_prunes_an_oversized_sm90_candidate(tmp_path, monkeypatch):
    """A handful of sm90 candidates through the real compile payload in the triton-3.8 venv."""
    from mha_ci.executors.venv import VenvExecutor
    from mha_ci.tune import plan as plan_mod

    monkeypatch.setattr(space, "SPACES", {"nvidia": {"forward": {"BLOCK_M": (64, 256), "BLOCK_N": (64, 256),
                                                                 "num_warps": (8,), "num_stages": (4,)}}})
    pipeline = load_pipeline(ROOT)
    target = targets.BucketTarget("small_head")
    result = plan_mod.build(ROOT, pipeline, "sm90", "triton-3.8", "forward", [target], VenvExecutor(ROOT),
                            tmp_path, jobs=2)
    decisions = {c["id"]: c for c in result["buckets"][0]["candidates"]}
    assert decisions["current"]["resources"]["fwd"]["shared_bytes"] > 0
    assert decisions["m256-n256-w8-s4"]["pruned"] in ("shared", "registers", "spills", "compile")
    assert "m256-n256-w8-s4" in plan_mod.render(result)


@pytest.mark.slow
def test_a_named_kernel_list_that_misses_what_the_config_launches_is_refused(tmp_path):
    """A named list must cover what the config launches: with `single_pass` the backward
    launches bwd_dkdv_dq instead of bwd_dkdv and bwd_dq, whose code would go unjudged, so the
    item is refused; the launched kernel is compiled when no list is named, and every backward
    spec when the item asks for every kernel of the pass (perf bisect's items)."""
    from mha_ci.checksums.candidates import compile_candidates
    from mha_ci.checksums.compile import EVERY_KERNEL_OF_THE_PASS
    from mha_ci.executors.venv import VenvExecutor

    pipeline = load_pipeline(ROOT)
    problem = {"dtype": "fp16", "dqk": 64, "dv": 64, "causal": True}
    config = {"BLOCK_M1": 32, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 32, "num_warps": 4, "num_stages": 2,
              "single_pass": True}
    items = [{"key": "named", "arch": "sm90", "pass": "backward", "problem": problem, "config": config,
              "kernels": ["bwd_preprocess", "bwd_dkdv", "bwd_dq"]},
             {"key": "launched", "arch": "sm90", "pass": "backward", "problem": problem, "config": config},
             {"key": "every", "arch": "sm90", "pass": "backward", "problem": problem, "config": config,
              "kernels": EVERY_KERNEL_OF_THE_PASS}]
    data = compile_candidates(ROOT, pipeline.toolchains["triton-3.8"], pipeline.archs["sm90"], pipeline, items,
                              VenvExecutor(ROOT), tmp_path, jobs=1)
    assert "launches ['bwd_dkdv_dq'], which the request does not name" in data["results"]["named"]["error"]
    assert set(data["results"]["launched"]["kernels"]) == {"bwd_dkdv_dq"}
    assert data["results"]["launched"]["kernels"]["bwd_dkdv_dq"]["sha256"]
    every = data["results"]["every"]["kernels"]
    assert set(every) >= {"bwd_preprocess", "bwd_dkdv", "bwd_dq", "bwd_dkdv_dq"} and "fwd" not in every
    assert all(entry["sha256"] for entry in every.values())


@pytest.mark.slow
def test_timing_payload_runs_and_resumes_under_the_interpreter(tmp_path):
    """The GPU timing path end to end on the CPU (Triton interpreter, the interpreter arch's
    config): two configs timed in turns per shape, one line per shape, a second call skips them."""
    from mha_ci.executors.venv import VenvExecutor
    from mha_ci.tune import session

    shape = {"layout": "dense", "batch": 1, "hq": 2, "hk": 1, "sq": 32, "sk": 32, "dqk": 32, "dv": 32,
             "causal": True, "window": [16, 0], "sink": True, "dropout_p": 0.0, "dtype": "fp16"}
    plan = {"arch": "interpreter", "toolchain": "triton-3.8"}
    outdir.write_json(tmp_path / "timing" / "method.json",
                      {"warmup": 2, "dispatches": 3, "reps": 2, "min_dispatches": 3, "max_seconds_per_shape": 0.5})
    outdir.write_json(tmp_path / "timing" / "b" / "plan.json", {
        "arch": None, "shapes": [{"key": "s1", "bucket": "small_head", "shape": shape},
                                 {"key": "s2", "bucket": "small_head", "shape": dict(shape, layout="varlen")}],
        "configs": {"small_head": {"m32-n16-w4-s1": {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}}}})
    pipeline = load_pipeline(ROOT)
    executor = VenvExecutor(ROOT)
    import time as _time
    session._run_time_payload(executor, pipeline, plan, "timing/b", tmp_path, _time.time() + 300)
    rows = outdir.latest_rows(tmp_path / "timing" / "b" / "results.jsonl")
    assert set(rows) == {"s1", "s2"}
    for row in rows.values():
        assert set(row["configs"]) == {"current", "m32-n16-w4-s1"}
        assert all(c["stats"]["trimmed_mean_us"] > 0 and c["max_abs_diff"] < 1e-2 for c in row["configs"].values())
    session._run_time_payload(executor, pipeline, plan, "timing/b", tmp_path, _time.time() + 300)
    assert len(outdir.read_lines(tmp_path / "timing" / "b" / "results.jsonl")) == 2      # resumed: nothing re-measured


def test_the_check_runs_the_correctness_jobs_through_the_callable_it_is_given(tmp_path):
    """session.check hands the copied checkout to the job layer's runner (passed in by the command),
    no subprocess; the exit code it returns is the verdict recorded."""
    calls = []

    def correctness(tree, out, job_ids, select):
        config = json.loads((tree / "src" / "mha" / "configs" / "sm90-MHA-DEFAULT.json").read_text())
        calls.append((out, job_ids, select, config["forward"]["default"]["BLOCK_M"]))
        return 1

    plan = {"arch": "sm90", "toolchain": "triton-3.8", "pass": "forward"}
    choices = {"default": {"choice": "c1", "config": {"BLOCK_M": 16}}}
    assert session.check(correctness, ROOT, tmp_path, plan, choices) == 1
    (out, job_ids, select, block_m), = calls
    assert out == tmp_path / "check" / "run" and select == session.CHECK_SELECT and block_m == 16
    assert job_ids == [f"correctness-sm90-triton-3.8-{i}of4" for i in range(1, 5)]
    assert outdir.read_json(tmp_path / "check" / "verdict.json")["exit_code"] == 1
