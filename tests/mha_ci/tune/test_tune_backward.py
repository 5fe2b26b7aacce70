"""mha-ci tune --pass backward without a GPU: the plan holds backward shapes and backward
configs, the choice judges gradients relative to their scale, and a run whose GPU payload is
faked times, chooses, verifies and proposes the backward section."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from mha.config import REQUIRED_KEYS
from mha_ci.model.loader import load_pipeline
from mha_ci.perf.buckets import bucket_of
from mha_ci.perf.request import perf_request
from mha_ci.tune import outdir, plan as plan_mod, proposal, rules, select, session, targets

ROOT = Path(__file__).resolve().parents[3]
CONFIG = "src/mha/configs/sm90-MHA-DEFAULT.json"


def _stats(us: float) -> dict:
    return {"trimmed_mean_us": us, "median_us": us, "max_us": us * 1.01, "noise_pct": 0.5, "reps": 5,
            "dispatches": 40}


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def workloads():
    from mha_ci.perf.request import selected_workloads
    found = selected_workloads(load_pipeline(ROOT), "full")
    return [w.to_dict() for w in found]


@pytest.fixture(scope="module")
def pipeline():
    from mha_ci.model.loader import load_pipeline
    return load_pipeline(ROOT)


def _plan(pipeline, workloads, pass_, out, monkeypatch, compiled_items=None):
    """plan.build for sm90 `default` with the ahead-of-time compile faked (every candidate fits)."""
    def fake_compile(root, toolchain, arch, pipeline_, items, executor, out_, jobs):
        if compiled_items is not None:
            compiled_items.extend(items)
        kernels = {"forward": ("fwd",), "backward": ("bwd_dkdv", "bwd_dq")}
        return {"triton": "3.8.0", "results": {
            item["key"]: {"error": None, "kernels": {k: {"shared_bytes": 1000, "registers": 128, "spills": 0}
                                                     for k in kernels[item["pass"]]}} for item in items}}

    monkeypatch.setattr(plan_mod, "compile_candidates", fake_compile)
    chosen = targets.choose(workloads, ["default"], None, pass_)
    return plan_mod.build(ROOT, pipeline, "sm90", "triton-3.8", pass_, chosen, None, out)


def test_each_pass_is_tuned_on_its_own_shapes(workloads):
    for pass_, mark in (("forward", "fwd"), ("backward", "bwd")):
        chosen = targets.choose(workloads, None, None, pass_)
        shapes = [s for t in chosen for s in t.shapes]
        assert shapes and all(s["shape"]["pass"] == mark for s in shapes)
        assert len(shapes) == sum(1 for w in workloads if w["shape"].get("pass", "fwd") == mark)
        assert all(s["bucket"] == bucket_of(targets.shape_of(s)) for s in shapes)


def test_a_report_s_regressions_of_the_other_pass_are_left_out():
    shape = {"layout": "dense", "batch": 1, "hq": 8, "hk": 8, "sq": 1024, "sk": 1024, "dqk": 128, "dv": 128,
             "causal": True}
    rows = [{"key": "f", "status": "regression", "shape": shape},
            {"key": "b", "status": "regression", "shape": {**shape, "pass": "bwd"}}]
    report = {"schema": "mha-ci.perf-compare/1", "shapes": rows}
    assert [t.regressed for t in targets.choose([], None, report, "backward")] == [["b"]]
    assert [t.regressed for t in targets.choose([], None, report, "forward")] == [["f"]]


def test_backward_plan_holds_backward_shapes_and_configs(pipeline, workloads, tmp_path, monkeypatch):
    items: list[dict] = []
    plan = _plan(pipeline, workloads, "backward", tmp_path, monkeypatch, items)
    bucket = plan["buckets"][0]
    current = rules.load_config(ROOT, "sm90")["backward"]["default"]
    assert plan["pass"] == "backward" and bucket["current"] == plan_mod.own_config(current)
    assert bucket["bucket_config"] == current and "gluon" in current      # verify reads its `gluon` config
    assert bucket["shapes"] and all(s["key"].endswith("_bwd") and s["shape"]["pass"] == "bwd"
                                    for s in bucket["shapes"])
    assert all(set(c["config"]) == set(REQUIRED_KEYS["backward"]) for c in bucket["candidates"])
    assert bucket["summary"]["remaining"] == bucket["summary"]["candidates"] > 0
    assert items and all(i["pass"] == "backward" for i in items)
    assert bucket["compile_problem"]["dqk"] == max(s["shape"]["dqk"] for s in bucket["shapes"])


def test_gradients_are_judged_relative_to_their_scale():
    """dK and dQ have no fixed scale: a difference of 0.3 on gradients in the hundreds is rounding."""
    def row(rel):
        return {"key": "s", "configs": {"current": {"stats": {"trimmed_mean_us": 100.0}},
                                        "a": {"stats": {"trimmed_mean_us": 90.0}, "max_abs_diff": 0.3,
                                              "max_rel_diff": rel}}}
    assert select.best(select.scores([row(0.004)], ["a"], 3.0)).id == "a"
    ranked = select.scores([row(0.05)], ["a"], 3.0)
    assert "max_rel_diff 0.05" in ranked[0].disqualified and select.best(ranked) is None


def _fake_payload(speed, wrong=frozenset()):
    """The GPU payload's stand-in: every shape of the plan, each config timed at `speed(id, config)`
    us; configs in `wrong` compute other gradients."""
    def run(executor, pipeline, plan, rel, out, deadline):
        timing = outdir.read_json(out / rel / "plan.json")
        with open(out / rel / "results.jsonl", "a") as handle:
            for entry in timing["shapes"]:
                assert entry["shape"]["pass"] == "bwd"
                configs = {"current": None, **timing["configs"].get(entry["bucket"], {})}
                row = {cid: {"error": None, "max_abs_diff": 0.3, "max_rel_diff": 0.3 if cid in wrong else 0.004,
                             "stats": _stats(speed(cid, cfg))}
                       for cid, cfg in configs.items()}
                handle.write(json.dumps({"key": entry["key"], "bucket": entry["bucket"], "configs": row}) + "\n")
    return run


def test_backward_run_chooses_the_fastest_config_verifies_and_proposes(pipeline, workloads, tmp_path,
                                                                       monkeypatch, tune_repo):
    out = tmp_path / "out"
    plan = _plan(pipeline, workloads, "backward", out, monkeypatch)
    bucket = plan["buckets"][0]
    timed = session.timed_candidates(bucket, 6)
    *_, wrong, fastest = timed          # the two farthest from the current config: the last tried
    speeds = {fastest: 80.0, wrong: 70.0}
    monkeypatch.setattr(session, "_run_time_payload",
                        _fake_payload(lambda cid, cfg: 100.0 if cfg is None else speeds.get(cid, 97.0),
                                      wrong=frozenset({wrong})))
    args = SimpleNamespace(root=ROOT, seconds_per_shape=0.3, max_candidates=6, no_check=True)
    request = perf_request(pipeline, arch=plan["arch"], toolchains=(plan["toolchain"],), out_dir=out, executor=None)
    assert session.gpu_phases(args, request, plan, deadline=time.time() + 60) == 0

    choice = outdir.read_json(out / "choices.json")["default"]
    assert choice["choice"] == fastest and choice["config"] == timed[fastest]
    assert "output differs" in next(r["disqualified"] for r in choice["ranking"] if r["id"] == wrong)
    verify_plan = outdir.read_json(out / "verify" / "plan.json")
    # every full-set bwd shape of the bucket that its own config runs: no fwd one, none the Gluon
    # backward takes under the plan's Triton 3.8 (a proposal does not change those)
    assert {s["key"] for s in verify_plan["shapes"]} == {s["key"] for s in bucket["shapes"]}
    assert not any(s["key"] == "dense_b1_hq64_hk8_sq8192_sk8192_dqk128_dv128_c1_bwd" for s in verify_plan["shapes"])
    assert verify_plan["configs"] == {"default": {"proposed": timed[fastest]}}

    config = tune_repo / CONFIG

    def fake_records(root, plan_, changed, scratch, executor_name):
        text = session.proposed_config_text(config.read_text(), plan_["pass"], changed)
        return {CONFIG: text.encode(), "perf_baselines/code_objects/triton-3.8.json": b"{}\n"}

    monkeypatch.setattr(proposal, "records_for", fake_records)
    assert proposal.propose(load_pipeline(tune_repo), out, branch="tune/bwd", executor_name="venv") == 0
    before = json.loads(config.read_text())
    shipped = json.loads(_git(tune_repo, "show", f"tune/bwd:{CONFIG}"))
    assert plan_mod.own_config(shipped["backward"]["default"]) == timed[fastest]
    assert shipped["backward"]["default"]["gluon"] == before["backward"]["default"]["gluon"]     # kept as it was
    assert shipped["forward"] == before["forward"] and shipped["guards"] == before["guards"]
    assert {b: c for b, c in shipped["backward"].items() if b != "default"} == \
        {b: c for b, c in before["backward"].items() if b != "default"}
    message = _git(tune_repo, "log", "-1", "--format=%B", "tune/bwd")
    assert f"backward.default: {timed[fastest]}" in message


def test_the_command_takes_a_backward_plan_to_the_gpu_phases(tmp_path, monkeypatch):
    from mha_ci.commands import tune as command

    seen = {}
    plan = {"arch": "sm90", "toolchain": "triton-3.8", "pass": "backward", "triton": "3.8.0", "limits": None,
            "seconds": 0.0, "buckets": []}
    monkeypatch.setattr(command, "_plan", lambda args, pipeline, executor, out: plan)

    def gpu_phases(args, request, plan_, deadline, correctness):
        seen["pass"] = plan_["pass"]
        return 0

    monkeypatch.setattr(session, "gpu_phases", gpu_phases)
    args = SimpleNamespace(action="run", arch="sm90", toolchain="triton-3.8", executor="host", pins="record",
                           root=ROOT, out=tmp_path, dry_run=False, budget_s=60.0, pass_="backward")
    assert command.handle(args) == 0 and seen == {"pass": "backward"}


@pytest.mark.slow
def test_backward_timing_payload_under_the_interpreter(tmp_path, pipeline):
    """The GPU timing path of a backward shape end to end on the CPU (Triton interpreter): the
    perf payload's backward step for the current config and a backward candidate, in turns, the
    gradients compared relative to their scale."""
    shape = {"layout": "dense", "batch": 1, "hq": 2, "hk": 1, "sq": 32, "sk": 32, "dqk": 32, "dv": 32,
             "causal": True, "window": [-1, -1], "sink": True, "dropout_p": 0.0, "dtype": "fp16", "pass": "bwd"}
    candidate = {"BLOCK_M1": 32, "BLOCK_N1": 16, "BLOCK_M2": 16, "BLOCK_N2": 32, "num_warps": 4, "num_stages": 1}
    outdir.write_json(tmp_path / "timing" / "method.json",
                      {"warmup": 1, "dispatches": 1, "reps": 2, "min_dispatches": 1, "max_seconds_per_shape": 0.1})
    outdir.write_json(tmp_path / "timing" / "b" / "plan.json", {
        "arch": None, "shapes": [{"key": "s1_bwd", "bucket": "small_head", "shape": shape}],
        "configs": {"small_head": {"c": candidate}}})
    from mha_ci.executors.venv import VenvExecutor
    session._run_time_payload(VenvExecutor(ROOT), pipeline, {"arch": "interpreter", "toolchain": "triton-3.8"},
                              "timing/b", tmp_path, time.time() + 300)
    row = outdir.latest_rows(tmp_path / "timing" / "b" / "results.jsonl")["s1_bwd"]
    assert set(row["configs"]) == {"current", "c"}
    assert all(c["stats"]["trimmed_mean_us"] > 0 for c in row["configs"].values()), row
    assert row["configs"]["current"]["max_rel_diff"] == 0.0 and row["configs"]["c"]["max_rel_diff"] < 1e-2
