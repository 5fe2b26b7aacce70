"""`mha-ci run` with fake job kinds: job selection, devices, exit codes, and what gets written.

The fake kinds are registered through the runner's registry, exactly as the perf and checksums
kinds plug in; nothing here builds an environment or imports torch.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mha_ci import cli
from mha_ci.errors import EnvironmentProblem, ExitCode
from mha_ci.jobs import JobResult, runner
from mha_ci.model.types import JOB_KINDS
from mha_ci.reports import summary

INTERP_1 = "correctness-interpreter-triton-3.4-1of2"
INTERP_2 = "correctness-interpreter-triton-3.4-2of2"
GFX950_1 = "correctness-gfx950-triton-3.4-1of4"


class FakeKinds:
    """Records calls; outcome per job id: "pass" (default), "fail", "env", "crash"."""

    def __init__(self) -> None:
        self.outcome: dict[str, str] = {}
        self.calls: list[str] = []
        self.results_seen: list[dict] = []      # results.json as each job started

    def __call__(self, job, ctx) -> JobResult:
        self.calls.append(job.id)
        self.results_seen.append(json.loads((ctx.out_dir / "results.json").read_text()))
        outcome = self.outcome.get(job.id, "pass")
        if outcome == "env":
            raise EnvironmentProblem("toolchain triton-3.4 pins triton==3.4.0 but the environment has triton 3.6.0")
        if outcome == "crash":
            raise RuntimeError("boom")
        if outcome == "fail":
            return JobResult(job.id, job.kind, "fail", ExitCode.GATE_FAILED, message="2 tests failed")
        return JobResult(job.id, job.kind, "pass", message="all good", timings={"total": 1.5})


@pytest.fixture
def fake(monkeypatch) -> FakeKinds:
    kinds = FakeKinds()
    for kind in JOB_KINDS:
        monkeypatch.setitem(runner._REGISTERED, kind, kinds)
    monkeypatch.setenv("MHA_CI_ASSUME_DEVICES", "")     # this machine: no GPU of any kind
    return kinds


def _run(root: Path, *args: str) -> tuple[int, dict, str]:
    out = root / "out"
    code = cli.main(["--root", str(root), "run", "--out", str(out), *args])
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    summary_text = (out / "summary.md").read_text() if (out / "summary.md").exists() else ""
    return code, results, summary_text


def test_all_pass_is_exit_0_and_gpu_jobs_are_listed_not_dropped(pipeline_root, fake):
    code, results, text = _run(pipeline_root, "--event", "pull_request")
    assert code == 0
    ran = {j["job_id"] for j in results["jobs"]}
    not_run = {n["id"]: n for n in results["not_run"]}
    assert INTERP_1 in ran and INTERP_2 in ran
    assert GFX950_1 in not_run and not not_run[GFX950_1]["requested"]
    assert "needs a gfx950 device" in not_run[GFX950_1]["reason"]
    # nothing planned disappears: every planned job either ran or is listed as not run
    from mha_ci.model.loader import load_pipeline
    from mha_ci.plan.events import build_event
    from mha_ci.plan.policy import plan
    planned = {p.job.id for p in plan(load_pipeline(pipeline_root), build_event(kind="pull_request")).jobs}
    assert planned == ran | set(not_run)
    assert f"`{GFX950_1}`: not run: needs a gfx950 device" in text
    assert "exit 0 (all gates pass)" in text
    assert results["status"] == "finished" and results["provenance"]["executor"] == "venv"


def test_a_failing_job_is_exit_1_and_the_other_results_are_kept(pipeline_root, fake):
    fake.outcome[INTERP_1] = "fail"
    code, results, text = _run(pipeline_root, "--job", INTERP_1, "--job", INTERP_2)
    assert code == 1
    verdicts = {j["job_id"]: j["verdict"] for j in results["jobs"]}
    assert verdicts == {INTERP_1: "fail", INTERP_2: "pass"}
    assert f"| `{INTERP_1}` | FAIL |" in text and f"| `{INTERP_2}` | PASS |" in text
    assert "requested with --job" in text
    job_file = pipeline_root / "out" / "jobs" / INTERP_1 / "result.json"
    assert json.loads(job_file.read_text())["verdict"] == "fail"


def test_environment_problem_is_exit_3_and_does_not_stop_the_run(pipeline_root, fake):
    fake.outcome[INTERP_1] = "env"
    code, results, text = _run(pipeline_root, "--job", INTERP_1, "--job", INTERP_2)
    assert code == 3
    first, second = results["jobs"]
    assert first["verdict"] == "error" and "pins triton==3.4.0 but the environment has triton 3.6.0" in first["message"]
    assert second["verdict"] == "pass"


def test_a_crashing_job_kind_is_an_error_and_the_run_goes_on(pipeline_root, fake):
    fake.outcome[INTERP_1] = "crash"
    code, results, _ = _run(pipeline_root, "--job", INTERP_1, "--job", INTERP_2)
    assert code == 1
    assert results["jobs"][0]["verdict"] == "error" and "RuntimeError: boom" in results["jobs"][0]["message"]
    assert results["jobs"][1]["verdict"] == "pass"


def test_results_are_written_as_each_job_finishes(pipeline_root, fake):
    _run(pipeline_root, "--job", INTERP_1, "--job", INTERP_2)
    before_first, before_second = fake.results_seen
    assert before_first["status"] == "running" and before_first["jobs"] == []
    assert [j["job_id"] for j in before_second["jobs"]] == [INTERP_1]
    assert before_second["pending"] == [INTERP_2]


def test_unknown_job_is_exit_2_with_the_closest_id(pipeline_root, fake, capsys):
    code, _, _ = _run(pipeline_root, "--job", "correctness-interpreter-triton-3.4-1of3")
    assert code == 2
    assert f"did you mean '{INTERP_1}'" in capsys.readouterr().err
    assert fake.calls == []


def test_a_job_that_never_runs_is_exit_2_with_why(pipeline_root, fake, capsys):
    code, _, _ = _run(pipeline_root, "--job", "perf-interpreter-triton-3.4")
    assert code == 2
    assert "never runs" in capsys.readouterr().err


def test_requested_job_without_its_device_is_exit_3(pipeline_root, fake):
    code, results, text = _run(pipeline_root, "--job", GFX950_1, "--job", INTERP_1)
    assert code == 3
    assert [n["id"] for n in results["not_run"]] == [GFX950_1] and results["not_run"][0]["requested"]
    assert [j["job_id"] for j in results["jobs"]] == [INTERP_1]      # what can run still runs
    assert "requested with --job: exit 3" in text


def test_requested_job_runs_when_the_device_is_there(pipeline_root, fake, monkeypatch):
    monkeypatch.setenv("MHA_CI_ASSUME_DEVICES", "amd-gpu")
    code, results, _ = _run(pipeline_root, "--job", GFX950_1)
    assert code == 0 and fake.calls == [GFX950_1]


def test_a_job_not_planned_for_the_event_can_still_be_requested(pipeline_root, fake):
    code, results, _ = _run(pipeline_root, "--event", "schedule", "--job", INTERP_1)
    assert code == 0
    assert results["jobs"][0]["reason"].startswith("requested with --job")


def test_every_job_kind_has_a_runner_and_no_other():
    # imported directly: a kind whose module went missing fails at import, not on its first job
    assert set(runner.KIND_RUNNERS) == set(JOB_KINDS)
    with pytest.raises(runner.NoRunner, match="no runner for job kind 'bogus'"):
        runner.runner_for("bogus")


def test_overall_exit_code_order():
    def result(code):
        return JobResult("j", "correctness", "pass" if code == 0 else "fail", code)
    assert runner.overall_exit_code([]) == 0
    assert runner.overall_exit_code([result(0), result(1)]) == 1
    assert runner.overall_exit_code([result(1), result(3)]) == 3
    assert runner.overall_exit_code([result(1), result(2)]) == 2
    assert runner.overall_exit_code([result(0)], [runner.NotRun("x", "needs a sm90 device", requested=False)]) == 0
    assert runner.overall_exit_code([result(0)], [runner.NotRun("x", "needs a sm90 device", requested=True)]) == 3


def test_unknown_verdict_is_refused():
    with pytest.raises(ValueError):
        JobResult("j", "perf", "passed")


def test_summary_reports_predicted_and_actual_shard_balance():
    def shard(index, actual):
        return {"job_id": f"correctness-interpreter-triton-3.4-{index}of2", "kind": "correctness", "verdict": "pass",
                "exit_code": 0, "message": "ok", "reason": "pull_request default", "timings": {"total": actual + 2},
                "details": {"shard": index, "shards": 2,
                            "predicted": {"this_shard_s": 10.0, "loads_s": [10.0, 10.0], "imbalance": 1.0},
                            "actual": {"this_shard_s": actual, "wall_s": actual + 1},
                            "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "triton": "3.4.0", "numpy": "2.2.6"}}}
    text = summary.render({"exit_code": 0, "provenance": {"executor": "venv", "commit": "0123456789abcdef"},
                           "jobs": [shard(1, 12.0), shard(2, 8.0)], "not_run": [], "skipped": []})
    assert "| `correctness-interpreter-triton-3.4` | 2 | 10.0, 10.0 | 1.00 | 12.0, 8.0 | 1.20 |" in text
    assert "| `correctness-interpreter-triton-3.4-1of2` | 3.11.7 | 2.13.0+cpu | 3.4.0 | 2.2.6 |" in text
    assert "commit `0123456789ab`" in text
    partial = summary.render({"exit_code": 0, "jobs": [shard(1, 12.0)]})
    assert "1 of 2 shards ran here" in partial


def test_summary_warns_when_shards_collected_different_test_lists():
    def shard(index, digest):
        return {"job_id": f"correctness-sm90-triton-3.8-{index}of2", "kind": "correctness", "verdict": "pass",
                "details": {"shard": index, "shards": 2, "collected_sha256": digest,
                            "predicted": {"loads_s": [1.0, 1.0], "imbalance": 1.0}}}
    same = summary.render({"jobs": [shard(1, "aa"), shard(2, "aa")]})
    differ = summary.render({"jobs": [shard(1, "aa"), shard(2, "bb")]})
    assert "collected different test lists" not in same
    assert "the shards of `correctness-sm90-triton-3.8` collected different test lists" in differ


def test_without_a_list_the_changed_paths_come_from_git(pipeline_root, fake, monkeypatch, capsys):
    """A docs-only branch runs only the docs check; `--all` runs the full pipeline
    (mha_ci.plan.local_changes; its own tests cover every fallback)."""
    import subprocess

    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(pipeline_root / "no-gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name, value in (("NAME", "t"), ("EMAIL", "t@example.invalid")):
        monkeypatch.setenv(f"GIT_AUTHOR_{name}", value)
        monkeypatch.setenv(f"GIT_COMMITTER_{name}", value)

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(pipeline_root), *args], check=True, capture_output=True)

    (pipeline_root / ".gitignore").write_text("/out/\n/no-gitconfig\n")
    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    git("switch", "-q", "-c", "docs-edit")
    (pipeline_root / "docs").mkdir()
    (pipeline_root / "docs" / "guide.md").write_text("words\n")

    code, results, _ = _run(pipeline_root, "--event", "pull_request")
    assert code == 0
    assert {j["job_id"] for j in results["jobs"]} == {"docs-interpreter"}
    assert "mha-ci: changed files: 1 against main" in capsys.readouterr().err

    code, results, _ = _run(pipeline_root, "--event", "pull_request", "--all")
    assert code == 0 and any(j["job_id"].startswith("checksums-") for j in results["jobs"])
    assert {INTERP_1, INTERP_2, "docs-interpreter"} <= {j["job_id"] for j in results["jobs"]}
    assert "(--all)" in capsys.readouterr().err


def test_a_run_in_which_no_job_ran_is_not_a_pass(pipeline_root, fake, capsys):
    """Only GPU jobs planned on a machine without a GPU, or a plan of nothing: nothing vouches for
    the change, so the run is a failed gate (exit 1), said in the output and in summary.md."""
    code, results, text = _run(pipeline_root, "--event", "manual", "--labels", "ci:sm90")
    assert code == 1 and results["exit_code"] == 1 and results["jobs"] == [] and fake.calls == []
    assert {n["id"] for n in results["not_run"]} and "**No job ran on this machine**" in text
    assert "no job ran on this machine" in capsys.readouterr().err
    code, results, text = _run(pipeline_root, "--event", "pull_request", "--labels", "", "--changed-files",
                               str(pipeline_root / "pipelines" / "jobs.yaml"), "--job", "docs-interpreter")
    assert code == 0 and [j["job_id"] for j in results["jobs"]] == ["docs-interpreter"]
