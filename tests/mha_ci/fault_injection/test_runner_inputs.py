"""Probes of the runner's inputs as a careless user or an attacker would send them: each one is a
usage or environment error with a clear message (exit 2 or 3), never a crash (exit 4) and never a
verdict reached on less than it claims."""
from __future__ import annotations

import errno
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from mha_ci.cli import main as cli
from mha_ci.executors.base import Executor, PayloadResult, PayloadRun
from mha_ci.jobs.context import JobContext, RunOptions
from mha_ci.jobs.correctness.job import run_job as correctness_job
from mha_ci.model.loader import load_pipeline
from mha_ci.model.types import Job

COLLECTED = ["tests/mha/test_a.py::test_one", "tests/mha/test_a.py::test_two", "tests/mha/test_b.py::test_three"]


class _CollectOnly(Executor):
    """Collects COLLECTED; the test run itself produces nothing (the verdict does not matter here)."""

    name = "fake"

    def run(self, payload: PayloadRun) -> PayloadResult:
        if payload.args[0] == "collect":
            out = payload.out_dir / payload.args[payload.args.index("--out") + 1]
            out.write_text(json.dumps({"tests": COLLECTED, "versions": {}}))
        return PayloadResult(exit_code=0)


def _correctness(pipeline_root: Path, options: RunOptions = RunOptions()):
    return lambda out: correctness_job(Job("correctness", "interpreter", "triton-3.4", 1, 1),
                                       JobContext(load_pipeline(pipeline_root), _CollectOnly(), out, options))


def _collect_only(job, ctx):
    return correctness_job(job, replace(ctx, executor=_CollectOnly()))


def test_an_inherited_select_variable_does_not_narrow_a_run(pipeline_root, tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_CI_SELECT", "*test_one")
    result = _correctness(pipeline_root)(tmp_path / "out")
    assert result.details["tests"] == len(COLLECTED) and "selection" not in result.details


def test_only_the_select_option_narrows_a_run(pipeline_root, tmp_path):
    result = _correctness(pipeline_root, RunOptions(select=("*test_one",)))(tmp_path / "out")
    assert result.details["tests"] == 1
    assert result.details["selection"] == {"patterns": ["*test_one"], "selected": 1, "collected": 3}


@pytest.mark.parametrize("select, narrowed_to", [((), None), (("*test_one", "*three"), 2)], ids=["env-only", "option"])
def test_the_run_command_narrows_on_its_option_alone(pipeline_root, tmp_path, monkeypatch, select, narrowed_to):
    from mha_ci.jobs import runner
    monkeypatch.setenv("MHA_CI_SELECT", "*test_one")
    runner.register("correctness", _collect_only)
    try:
        cli(["--root", str(pipeline_root), "run", "--job", "correctness-interpreter-triton-3.4-1of2",
             "--executor", "host", "--out", str(tmp_path / "out"), *[x for s in select for x in ("--select", s)]])
    finally:
        runner.unregister("correctness")
    details = json.loads((tmp_path / "out" / "results.json").read_text())["jobs"][0]["details"]
    assert details.get("selection", {}).get("selected") == narrowed_to


@pytest.mark.parametrize("file, old, new, why", [
    ("jobs.yaml", "\nkinds:", "\ndeep: " + "[" * 20000 + "]" * 20000 + "\nkinds:", "nested more than"),
    ("jobs.yaml", "\nkinds:", "\ndeep: " + "{a: " * 20000 + "1" + "}" * 20000 + "\nkinds:", "nested more than"),
    ("archs.yaml", "workers: 8", "workers: " + "9" * 400, "400 digits"),
    ("archs.yaml", "workers: 8", "workers: 0x" + "f" * 400, "digits"),
], ids=["flow-lists", "flow-mappings", "giant-int", "giant-hex"])
def test_yaml_nested_too_deep_or_with_giant_integers_is_a_usage_error(pipeline_root, capsys, file, old, new, why):
    path = pipeline_root / "pipelines" / file
    path.write_text(path.read_text().replace(old, new, 1))
    assert cli(["--root", str(pipeline_root), "validate"]) == 2
    err = capsys.readouterr().err
    assert f"{file}:" in err and why in err, err


def _plan(root: Path, *args: str) -> int:
    return cli(["--root", str(root), "plan", "--event", "pull_request", *args])


@pytest.fixture(params=["/dev/zero", "/dev/urandom", "fifo"])
def not_a_regular_file(request, tmp_path) -> Path:
    if request.param != "fifo":
        return Path(request.param)
    fifo = tmp_path / "event.fifo"
    os.mkfifo(fifo)
    return fifo


@pytest.mark.parametrize("option", ["--github-event", "--changed-files"])
def test_a_device_or_fifo_as_an_input_file_is_refused(pipeline_root, capsys, not_a_regular_file, option):
    assert _plan(pipeline_root, option, str(not_a_regular_file)) == 2
    assert f"{not_a_regular_file}: " in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--github-event", "--changed-files"])
def test_an_oversized_input_file_is_refused(pipeline_root, tmp_path, capsys, option):
    from mha_ci.plan.events import MAX_INPUT_BYTES
    big = tmp_path / "big"
    with big.open("wb") as handle:
        handle.truncate(MAX_INPUT_BYTES + 1)
    assert _plan(pipeline_root, option, str(big)) == 2
    assert "more than the" in capsys.readouterr().err


def _pull_request(tmp_path: Path, **pull_request) -> Path:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "labeled", "pull_request": {"base": {"ref": "main"}, **pull_request}}))
    return event


@pytest.mark.parametrize("draft", ["false", 0, [], {"x": 1}])
def test_a_draft_flag_that_is_not_a_boolean_is_refused(pipeline_root, tmp_path, capsys, draft):
    assert _plan(pipeline_root, "--github-event", str(_pull_request(tmp_path, draft=draft))) == 2
    assert "draft" in capsys.readouterr().err


@pytest.mark.parametrize("label, meant", [("ci;sm90", "ci:sm90"), ("ci sm90", "ci:sm90"),
                                          ("cl:gfx950", "ci:gfx950")])
def test_a_near_miss_of_a_ci_label_is_named_with_the_label_meant(pipeline_root, tmp_path, capsys, label, meant):
    event = _pull_request(tmp_path, labels=[{"name": label}, {"name": "bug"}])
    changed = tmp_path / "changed.txt"
    changed.write_text("src/mha/kernels/forward.py\n")
    assert _plan(pipeline_root, "--github-event", str(event), "--changed-files", str(changed)) == 0
    err = capsys.readouterr().err
    assert f"label '{label}'" in err and f"did you mean '{meant}'" in err, err
    assert "'bug'" not in err


def test_an_event_nested_too_deep_is_a_usage_error(pipeline_root, tmp_path, capsys):
    event = tmp_path / "event.json"
    event.write_text('{"pull_request": ' + "[" * 100000 + "]" * 100000 + "}")
    assert _plan(pipeline_root, "--github-event", str(event)) == 2
    assert "event.json" in capsys.readouterr().err


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("failing", ["job files", "results"])
def test_a_full_disk_under_out_is_an_environment_error_not_a_crash(pipeline_root, tmp_path, monkeypatch, capsys,
                                                                   failing):
    from mha_ci.jobs import runner
    out = tmp_path / "out"
    runner.register("correctness", _collect_only)
    if failing == "job files":
        monkeypatch.setattr(Path, "write_text", _no_space)
    else:
        monkeypatch.setattr(os, "fsync", _no_space)
    try:
        code = cli(["--root", str(pipeline_root), "run", "--job", "correctness-interpreter-triton-3.4-1of2",
                    "--executor", "host", "--out", str(out)])
    finally:
        runner.unregister("correctness")
    assert code == 3
    assert "No space left on device" in capsys.readouterr().err
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_an_atomic_write_that_fails_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    from mha_ci.errors import EnvironmentProblem
    from mha_ci.files import write_atomic
    target = tmp_path / "compare.json"
    write_atomic(target, '{"complete": true}\n')
    monkeypatch.setattr(os, "fsync", _no_space)
    with pytest.raises(EnvironmentProblem, match="No space left on device"):
        write_atomic(target, '{"complete": false, "and much more": "' + "x" * 100000 + '"}\n')
    assert json.loads(target.read_text()) == {"complete": True}
    assert [p.name for p in tmp_path.iterdir()] == ["compare.json"]


def test_a_second_run_into_an_out_folder_in_use_is_refused(pipeline_root, tmp_path, capsys):
    from mha_ci.jobs import runner
    out = tmp_path / "out"
    second: list[int | None] = []

    def job_that_starts_a_second_run(job, ctx):
        if not second:                # the second run's own job (if it gets that far) starts no third
            second.append(None)
            second[0] = cli(["--root", str(pipeline_root), "run", "--job", job.id, "--executor", "host",
                             "--out", str(out)])
        return _collect_only(job, ctx)

    runner.register("correctness", job_that_starts_a_second_run)
    try:
        cli(["--root", str(pipeline_root), "run", "--job", "correctness-interpreter-triton-3.4-1of2",
             "--executor", "host", "--out", str(out)])
    finally:
        runner.unregister("correctness")
    assert second == [2]
    assert "in use by another" in capsys.readouterr().err
    assert json.loads((out / "results.json").read_text())["status"] == "finished"


@pytest.mark.parametrize("value", ["ghcr.io/../../x", "ghcr.io/owner/..", "ghcr.io/./repo", "ghcr.io//repo",
                                   "ghcr.io/owner/-repo", "ghcr.io/owner/repo.", "-ghcr.io/owner", "ghcr..io/owner",
                                   "ghcr.io:99999999/owner", "ghcr.io/owner/re___po"])
def test_a_registry_that_is_not_an_image_reference_is_a_usage_error(value):
    from mha_ci.containers.images import registry
    from mha_ci.errors import ConfigError
    with pytest.raises(ConfigError, match="MHA_CI_REGISTRY"):
        registry({"MHA_CI_REGISTRY": value})


@pytest.mark.parametrize("value", ["ghcr.io/owner/repo", "127.0.0.1:5000/owner/repo", "localhost/mha-ci",
                                   "registry.example.com/a/b-c/d__e", "ghcr.io/owner/repo.name_x"])
def test_registry_paths_that_are_references_are_accepted(value):
    from mha_ci.containers.images import registry
    assert registry({"MHA_CI_REGISTRY": value}) == value
