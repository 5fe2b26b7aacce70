"""Probes of the runner's inputs as a careless user or an attacker would send them: each one is a
usage or environment error with a clear message (exit 2 or 3), never a crash (exit 4) and never a
verdict reached on less than it claims."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mha_ci.cli import main as cli
from mha_ci.executors.base import Executor, PayloadResult, PayloadRun
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


def _correctness(pipeline_root: Path):
    from mha_ci.jobs.correctness.job import run_job
    return lambda out: run_job(Job("correctness", "interpreter", "triton-3.4", 1, 1), load_pipeline(pipeline_root),
                               _CollectOnly(), out)


def test_an_inherited_select_variable_does_not_narrow_a_run(pipeline_root, tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_CI_SELECT", "*test_one")
    result = _correctness(pipeline_root)(tmp_path / "out")
    assert result.details["tests"] == len(COLLECTED) and "selection" not in result.details


def test_only_the_select_option_narrows_a_run(pipeline_root, tmp_path):
    from mha_ci.jobs.correctness.job import narrowed
    with narrowed(["*test_one"]):
        result = _correctness(pipeline_root)(tmp_path / "out")
    assert result.details["tests"] == 1
    assert result.details["selection"] == {"patterns": ["*test_one"], "selected": 1, "collected": 3}


@pytest.mark.parametrize("select, narrowed_to", [((), None), (("*test_one", "*three"), 2)], ids=["env-only", "option"])
def test_the_run_command_narrows_on_its_option_alone(pipeline_root, tmp_path, monkeypatch, select, narrowed_to):
    from mha_ci.jobs import runner
    from mha_ci.jobs.correctness.job import run_job
    monkeypatch.setenv("MHA_CI_SELECT", "*test_one")
    runner.register("correctness", lambda job, pipeline, executor, out: run_job(job, pipeline, _CollectOnly(), out))
    try:
        cli(["--root", str(pipeline_root), "run", "--job", "correctness-interpreter-triton-3.4-1of2",
             "--executor", "host", "--out", str(tmp_path / "out"), *[x for s in select for x in ("--select", s)]])
    finally:
        runner.unregister("correctness")
    details = json.loads((tmp_path / "out" / "results.json").read_text())["jobs"][0]["details"]
    assert details.get("selection", {}).get("selected") == narrowed_to
