"""The perf job as a same-GPU A/B (`mha-ci run --perf-against REF|DIR`), a fake executor playing
both payloads: judged base against head with the --against thresholds and numerics, the stored
baseline only a note, and red (never a weaker comparison) when the base cannot be measured."""
import json
import shutil
from pathlib import Path

import pytest

from mha_ci.baselines import perf_baseline
from mha_ci.commands.options import run_options
from mha_ci.errors import ConfigError
from mha_ci.jobs import perf as perf_kind
from mha_ci.jobs.context import JobContext, RunOptions
from mha_ci.model.loader import load_pipeline
from mha_ci.model.types import Job
from mha_ci.perf.request import selected_workloads

from ab_sides import AbSides  # noqa: E402
from perf_builders import doc, entry  # noqa: E402

SRC = Path(__file__).resolve().parents[3] / "src"
JOB = Job(kind="perf", arch="sm90", toolchain="triton-3.4")
PR = RunOptions(perf_subset="pr")


@pytest.fixture
def checkout(pipeline_root):
    """A checkout root with the harness (the base side copies it) and a base folder beside it."""
    shutil.copytree(SRC / "mha_ci", pipeline_root / "src" / "mha_ci",
                    ignore=shutil.ignore_patterns("__pycache__"))
    base = pipeline_root.parent / f"{pipeline_root.name}-base"
    (base / "src" / "mha").mkdir(parents=True)
    (base / "src" / "mha" / "__init__.py").write_text("")
    return pipeline_root, base


def _run(checkout, tmp_path, fake, monkeypatch, name, against=None):
    root, base = checkout
    monkeypatch.setattr(perf_kind, "make_executor", lambda *a, **kw: fake)
    options = RunOptions(perf_subset="pr", perf_against=str(against or base))
    return perf_kind.run_job(JOB, JobContext(load_pipeline(root), fake, tmp_path / name, options))


@pytest.mark.slow   # over a second: out of `make test-fast`
def test_the_ab_judges_head_against_base_and_notes_the_stored_baseline(checkout, tmp_path, monkeypatch):
    root, _ = checkout
    keys = [w.key for w in selected_workloads(load_pipeline(root), "pr")]
    result = _run(checkout, tmp_path, AbSides(), monkeypatch, "o1")
    assert result.verdict == "pass", result.message
    assert result.details["summary"]["ok"] == len(keys) and result.details["against"]
    assert "no stored baseline" in result.details["base_vs_stored"]["line"]
    # the stored baseline is slower than the base measured here: a note, not a verdict
    stored = root / perf_baseline("sm90", "triton-3.4")
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_text(json.dumps(doc([entry(k, 150.0) for k in keys], versions={"torch": "2.13.0", "triton": "3.4.0"})))
    result = _run(checkout, tmp_path, AbSides(), monkeypatch, "o2")
    assert result.verdict == "pass"
    assert f"{len(keys)} faster of {len(keys)}" in result.details["base_vs_stored"]["line"]
    # the head 5 % slower on one shape than the base beside it: red, on exactly that shape
    slow = AbSides(us=lambda key, side: 105.0 if side == "head" and key == keys[0] else 100.0)
    result = _run(checkout, tmp_path, slow, monkeypatch, "o3")
    assert result.verdict == "fail" and result.details["regressions"] == [keys[0]]
    head = json.loads((tmp_path / "o3" / "jobs" / JOB.id / "perf-head.json").read_text())
    assert all(r["numerics"]["versus"]["outputs"]["out"]["identical"] for r in head["results"])


@pytest.mark.slow
def test_a_base_that_cannot_be_measured_is_red_and_says_why(checkout, tmp_path, monkeypatch):
    result = _run(checkout, tmp_path, AbSides(fail_side="base"), monkeypatch, "o1")
    assert result.verdict == "fail" and result.exit_code == 3
    assert "could not be measured" in result.message and "did not build" in result.message
    empty = tmp_path / "not-a-checkout"
    empty.mkdir()
    result = _run(checkout, tmp_path, AbSides(), monkeypatch, "o2", against=empty)
    assert result.verdict == "fail" and "holds no src/mha" in result.message
    result = _run(checkout, tmp_path, AbSides(), monkeypatch, "o3", against="no-such-ref")
    assert result.verdict == "fail" and "could not be measured" in result.message


def test_perf_against_refuses_repeated_runs():
    class Args:
        select, pins, gate_from, perf_against = (), "enforce", None, "main"

    with pytest.raises(ConfigError, match="MHA_CI_PERF_REPEAT"):
        run_options(Args(), {"MHA_CI_PERF_REPEAT": "3"})
    assert run_options(Args(), {}).perf_against == "main"
