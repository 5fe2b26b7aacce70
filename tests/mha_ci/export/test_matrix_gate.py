"""`mha-ci export matrix` (plan -> job matrices) and the workflow's merge gate (mha_ci.export.gate)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mha_ci.cli import main as cli
from mha_ci.containers.images import discover
from mha_ci.errors import ConfigError
from mha_ci.export import gate, matrix
from mha_ci.model.loader import load_pipeline

PLAN = {"jobs": [
    {"id": "correctness-interpreter-triton-3.4-1of2", "kind": "correctness", "arch": "interpreter",
     "toolchain": "triton-3.4", "shard": 1, "shards": 2, "reason": "default"},
    {"id": "correctness-gfx950-triton-3.8-2of4", "kind": "correctness", "arch": "gfx950",
     "toolchain": "triton-3.8", "shard": 2, "shards": 4, "reason": "default"},
    {"id": "perf-sm90-triton-3.4", "kind": "perf", "arch": "sm90", "toolchain": "triton-3.4",
     "shard": None, "shards": None, "reason": "label ci:sm90"},
], "skipped": []}


def test_matrix_splits_cpu_and_gpu_jobs_with_images_and_device_options(pipeline_root, monkeypatch):
    monkeypatch.setenv("MHA_CI_REGISTRY", "ghcr.io/owner/repo")
    pipeline = load_pipeline(pipeline_root)
    found = matrix.matrices(pipeline, PLAN)
    assert [e["id"] for e in found["cpu"]["include"]] == ["correctness-interpreter-triton-3.4-1of2"]
    assert "image" not in found["cpu"]["include"][0]
    amd, nvidia = found["gpu"]["include"]
    # the references `mha-ci containers` builds and images.yml publishes, per platform lock
    specs = {(s.toolchain, s.platform): s for s in discover(pipeline.toolchains.values())}
    assert amd["image"] == specs["triton-3.8", "rocm"].reference()
    assert nvidia["image"] == specs["triton-3.4", "cuda"].reference()
    assert specs["triton-3.4", "cuda"].lock.name == "requirements-cuda.lock"
    assert amd["image"].startswith("ghcr.io/owner/repo/triton-3.8-rocm:")
    assert nvidia["image"].startswith("ghcr.io/owner/repo/triton-3.4-cuda:")
    assert amd["container_options"] == "--device /dev/kfd --device /dev/dri --group-add video --security-opt seccomp=unconfined"
    assert nvidia["container_options"] == "--gpus all"
    assert json.loads(amd["runs_on"]) == ["self-hosted", "linux", "mi355x"]


def test_gpu_image_tag_follows_the_platform_lock_not_the_cpu_lock(pipeline_root):
    before = matrix.matrices(load_pipeline(pipeline_root), PLAN)["gpu"]["include"][1]["image"]
    cpu_lock = pipeline_root / "containers/triton-3.4/requirements.lock"
    cpu_lock.write_text(cpu_lock.read_text() + "# cpu only\n")
    assert matrix.matrices(load_pipeline(pipeline_root), PLAN)["gpu"]["include"][1]["image"] == before
    cuda_lock = pipeline_root / "containers/triton-3.4/requirements-cuda.lock"
    cuda_lock.write_text(cuda_lock.read_text() + "# cuda\n")
    assert matrix.matrices(load_pipeline(pipeline_root), PLAN)["gpu"]["include"][1]["image"] != before


def test_matrix_refuses_a_gpu_job_whose_platform_has_no_dockerfile(pipeline_root):
    (pipeline_root / "containers/triton-3.4/Dockerfile.cuda").unlink()
    with pytest.raises(ConfigError, match="Dockerfile.cuda does not exist"):
        matrix.matrices(load_pipeline(pipeline_root), PLAN)


def test_matrix_command_prints_github_output_lines(pipeline_root, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    assert cli(["--root", str(pipeline_root), "export", "matrix", "--plan", str(plan)]) == 0
    lines = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["cpu_count"] == "1" and lines["gpu_count"] == "2"
    assert len(json.loads(lines["gpu"])["include"]) == 2
    plan.write_text(json.dumps({"jobs": [], "skipped": []}))
    assert cli(["--root", str(pipeline_root), "export", "matrix", "--plan", str(plan)]) == 0
    assert "cpu_count=0" in capsys.readouterr().out


def test_matrix_rejects_a_plan_naming_an_unknown_arch(pipeline_root):
    bad = {"jobs": [{"id": "perf-gfx999-triton-3.4", "kind": "perf", "arch": "gfx999", "toolchain": "triton-3.4"}]}
    with pytest.raises(ConfigError, match="gfx999"):
        matrix.matrices(load_pipeline(pipeline_root), bad)


def result_artifact(root: Path, job_id: str, verdict: str = "pass", code: int = 0, status: str = "finished") -> None:
    folder = root / gate.artifact_name(job_id)
    folder.mkdir(parents=True)
    (folder / "exit-code").write_text(f"{code}\n")
    (folder / "results.json").write_text(json.dumps({
        "schema": "mha-ci.results/1", "status": status, "exit_code": code, "provenance": {"pin_mode": "enforce"},
        "jobs": [{"job_id": job_id, "kind": "perf", "verdict": verdict, "exit_code": code, "message": "m"}],
        "not_run": [], "skipped": []}))


@pytest.fixture
def plan_file(tmp_path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(PLAN))
    return path


def test_gate_passes_when_every_planned_job_passed(tmp_path, plan_file):
    for job in PLAN["jobs"]:
        result_artifact(tmp_path / "a", job["id"])
    code, lines = gate.run_gate(plan_file, tmp_path / "a")
    assert code == 0 and "3 of 3 planned jobs passed" in lines


@pytest.mark.parametrize("break_it, why", [
    (lambda a: None, "did not run or did not upload"),                                   # artifact missing
    (lambda a: result_artifact(a, "perf-sm90-triton-3.4", verdict="fail", code=1), "verdict fail"),
    (lambda a: result_artifact(a, "perf-sm90-triton-3.4", status="running"), "not 'finished'"),
    (lambda a: result_artifact(a, "perf-sm90-triton-3.4", code=3), "exited 3"),
], ids=["missing", "failed", "unfinished", "exit-code"])
def test_gate_fails_on_a_missing_or_failed_job(tmp_path, plan_file, break_it, why):
    artifacts = tmp_path / "a"
    for job in PLAN["jobs"][:2]:
        result_artifact(artifacts, job["id"])
    break_it(artifacts)
    code, lines = gate.run_gate(plan_file, artifacts)
    assert code == 1
    assert any("perf-sm90-triton-3.4" in line and "FAIL" in line and why in line for line in lines), lines


def test_gate_on_a_skipped_or_failed_plan(tmp_path, plan_file):
    # skipped = a draft: no verdict, so never green (issue 13: a draft's gate passed)
    code, lines = gate.run_gate(tmp_path / "absent.json", tmp_path, plan_result="skipped")
    assert code == 1 and "ready for review" in lines[-1]
    assert gate.run_gate(plan_file, tmp_path, plan_result="failure")[0] == 1
    assert gate.run_gate(tmp_path / "absent.json", tmp_path, plan_result="success")[0] == 1


def test_gate_command_appends_to_the_step_summary(tmp_path, plan_file):
    summary = tmp_path / "summary.md"
    summary.write_text("before\n")
    assert gate.main(["--plan", str(plan_file), "--artifacts", str(tmp_path / "none"), "--summary", str(summary)]) == 1
    assert summary.read_text().startswith("before\n## CI gate")


def test_gate_names_jobs_withheld_from_a_fork(tmp_path, plan_file):
    artifacts = tmp_path / "a"
    result_artifact(artifacts, PLAN["jobs"][0]["id"])
    code, lines = gate.run_gate(plan_file, artifacts, same_repository=False)
    assert code == 1
    assert any(PLAN["jobs"][1]["id"] in line and "withheld" in line and "fork" in line for line in lines), lines
    assert gate.main(["--plan", str(plan_file), "--artifacts", str(artifacts), "--same-repository", "false"]) == 1


def _rewrite_results(artifacts: Path, job_id: str, change) -> None:
    path = artifacts / gate.artifact_name(job_id) / "results.json"
    results = json.loads(path.read_text())
    change(results)
    path.write_text(json.dumps(results))


def _narrowed(results: dict) -> None:
    results["jobs"][0]["details"] = {"selection": {"patterns": ["*x*"], "selected": 1, "collected": 9}}
    results["jobs"][0]["message"] = "1 tests: 0 failed (SELECTION: 1 of 9 collected tests)"


@pytest.mark.parametrize("change, why", [
    (_narrowed, "narrowed"),
    (lambda r: r["jobs"][0].update(message="UNPINNED: 12 shapes, 0 regressed"), "unpinned"),
    (lambda r: r["jobs"][0].update(details={"pin_mismatches": ["torch 2.8.0 != 2.7.1"]}), "unpinned"),
    (lambda r: r.update(provenance={"pin_mode": "record"}), "unpinned"),
    (lambda r: r.update(exit_code=1), "results.json exit_code 1"),
    (lambda r: r.update(exit_code=None), "results.json exit_code None"),
    (lambda r: r["jobs"].append(dict(r["jobs"][0])), "lists this job 2 times"),
], ids=["select", "unpinned-message", "pin-mismatches", "pin-mode-record", "exit-1", "exit-null", "twice"])
def test_gate_fails_on_a_verdict_that_is_not_a_full_pinned_pass(tmp_path, plan_file, change, why):
    artifacts = tmp_path / "a"
    for job in PLAN["jobs"]:
        result_artifact(artifacts, job["id"])
    _rewrite_results(artifacts, "perf-sm90-triton-3.4", change)
    code, lines = gate.run_gate(plan_file, artifacts)
    assert code == 1
    assert any("perf-sm90-triton-3.4" in line and "FAIL" in line and why in line for line in lines), lines


def test_gate_fails_on_an_empty_plan_or_a_job_planned_twice(tmp_path, plan_file):
    plan_file.write_text(json.dumps({"jobs": [], "skipped": []}))
    code, lines = gate.run_gate(plan_file, tmp_path / "a")
    assert code == 1 and any("no job" in line for line in lines), lines
    artifacts = tmp_path / "a"
    result_artifact(artifacts, PLAN["jobs"][0]["id"])
    plan_file.write_text(json.dumps({"jobs": [PLAN["jobs"][0], PLAN["jobs"][0]], "skipped": []}))
    code, lines = gate.run_gate(plan_file, artifacts)
    assert code == 1 and any("twice" in line or "2 times" in line for line in lines), lines


@pytest.mark.parametrize("name", ["results.json", "exit-code"])
def test_gate_is_red_on_a_fifo_or_an_oversized_result_file_without_waiting(tmp_path, plan_file, name):
    import os
    artifacts = tmp_path / "a"
    for job in PLAN["jobs"]:
        result_artifact(artifacts, job["id"])
    folder = artifacts / gate.artifact_name("perf-sm90-triton-3.4")
    (folder / name).unlink()
    os.mkfifo(folder / name)
    code, lines = gate.run_gate(plan_file, artifacts)
    assert code == 1 and any("perf-sm90-triton-3.4" in line and "FIFO" in line for line in lines), lines
    (folder / name).unlink()
    with (folder / name).open("wb") as handle:
        handle.truncate(gate.MAX_RESULT_BYTES + 1)
    code, lines = gate.run_gate(plan_file, artifacts)
    assert code == 1 and any("perf-sm90-triton-3.4" in line and "allowed" in line for line in lines), lines


def test_the_docs_job_goes_to_the_cpu_matrix_without_a_toolchain(pipeline_root):
    """A kind that runs no toolchain names "" (its cache steps then restore no environment); any
    other kind with "" or a toolchain the pipeline lacks is refused."""
    pipeline = load_pipeline(pipeline_root)
    docs_job = {"id": "docs-interpreter", "kind": "docs", "arch": "interpreter", "toolchain": "",
                "shard": None, "shards": None, "reason": "pull_request: every arch"}
    found = matrix.matrices(pipeline, {"jobs": [docs_job], "skipped": []})
    assert found["cpu"]["include"] == [{"id": "docs-interpreter", "kind": "docs", "arch": "interpreter",
                                        "toolchain": "", "runs_on": '["ubuntu-latest"]'}]
    for bad in ({**docs_job, "toolchain": "triton-3.4"}, {**PLAN["jobs"][0], "toolchain": ""}):
        with pytest.raises(ConfigError, match="does not define"):
            matrix.matrices(pipeline, {"jobs": [bad], "skipped": []})
