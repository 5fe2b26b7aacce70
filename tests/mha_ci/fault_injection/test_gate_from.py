"""Probes of a pull request that sets its own perf gate: it loosens pipelines/perf.yaml and
stores a slower baseline, and its approved GPU run (pr-gpu.yml) would then judge it by those.
With `mha-ci run --gate-from BASE` the perf job takes its gate settings, shapes and baseline from
BASE (a checkout of the base branch), names what the pull request changes, and a base it cannot
read is a usage error, never a silent fallback to the pull request's own settings."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mha_ci.baselines import perf_baseline
from mha_ci.cli import main
from mha_ci.errors import ConfigError, ExitCode
from mha_ci.executors.base import Executor, PayloadResult
from mha_ci.jobs import perf as perf_kind
from mha_ci.jobs.context import JobContext, RunOptions
from mha_ci.model.loader import load_pipeline
from mha_ci.model.types import Job
from mha_ci.perf.request import selected_workloads
from mha_ci.perf import report
from mha_ci.perf.gate_source import load_gate_source

from perf_builders import doc, entry  # noqa: E402

JOB = Job(kind="perf", arch="sm90", toolchain="triton-3.4")
BASELINE = perf_baseline("sm90", "triton-3.4")


class Measures(Executor):
    """The perf payload's answer: every shape it was given, at `us`."""

    name = "fake"

    def __init__(self, us: float) -> None:
        self.us = us

    def run(self, payload):
        args = dict(zip(payload.args[::2], payload.args[1::2]))
        shapes = json.loads((payload.out_dir / args["--shapes"]).read_text())
        out = payload.out_dir / args["--out"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc([entry(s["key"], self.us) for s in shapes["shapes"]], subset=shapes["subset"])))
        return PayloadResult(exit_code=0, provenance={"executor": "fake"})


@pytest.fixture(autouse=True)
def no_plot(monkeypatch):
    # The reports' plot is not what these probes look at, and drawing it takes seconds.
    monkeypatch.setattr(report, "plot_png", lambda comparison: b"")


def store_baseline(root: Path, us: float) -> None:
    keys = [w.key for w in selected_workloads(load_pipeline(root), "full")]
    path = root / BASELINE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc([entry(k, us) for k in keys])))


@pytest.fixture
def base(sibling_checkout) -> Path:
    """The base branch: pipelines/ as committed and a baseline of 100 us a shape."""
    root = sibling_checkout("base")
    store_baseline(root, 100.0)
    return root


@pytest.fixture
def head(sibling_checkout, base: Path) -> Path:
    """The pull request: the floor at the most validate allows, and its own baseline at 200 us."""
    root = sibling_checkout("head")
    perf_yaml = root / "pipelines" / "perf.yaml"
    perf_yaml.write_text(perf_yaml.read_text().replace("floor_pct: 3.0", "floor_pct: 25", 1))
    store_baseline(root, 200.0)
    return root


def gate(base: Path, checkout: Path):
    """The --gate-from source `base`, read for judging `checkout`."""
    return load_gate_source(base, load_pipeline(checkout))


def judge(head: Path, out: Path, us: float, options: RunOptions = RunOptions(perf_subset="pr")):
    return perf_kind.run_job(JOB, JobContext(load_pipeline(head), Measures(us), out, options))


def test_a_pull_request_passes_its_own_loosened_gate(head, tmp_path):
    # What the approved GPU run did before --gate-from: twice the base's time, judged ok.
    assert judge(head, tmp_path / "out", 200.0).verdict == "pass"


def test_with_gate_from_the_base_judges_and_the_report_names_the_changes(head, base, tmp_path):
    options = RunOptions(perf_subset="pr", gate_from=gate(base, head))
    result = judge(head, tmp_path / "out", 200.0, options)
    assert result.verdict == "fail" and result.exit_code == ExitCode.GATE_FAILED
    assert result.details["summary"]["regression"] == result.details["shapes"] > 0
    changed = ["pipelines/perf.yaml (gate)", BASELINE]
    assert result.details["gate_from"] == {"root": str(base.resolve()), "changed": changed}
    assert (f"this pull request changes {', '.join(changed)}: judged by the base's ({base.resolve()})"
            in result.message)
    # the base's own time passes, the line still says what the pull request changed
    result = judge(head, tmp_path / "out2", 100.0, options)
    assert result.verdict == "pass" and "this pull request changes pipelines/perf.yaml (gate)" in result.message


def test_an_unchanged_gate_adds_no_line(base, tmp_path):
    result = judge(base, tmp_path / "out", 100.0, RunOptions(perf_subset="pr", gate_from=gate(base, base)))
    assert result.verdict == "pass" and result.details["gate_from"]["changed"] == []
    assert "changes" not in result.message


def test_the_shapes_and_method_come_from_the_base_too(head, base, tmp_path):
    # A pull request that shrinks its subset to the four shapes it always holds is still judged
    # on the base's subset.
    perf_yaml = head / "pipelines" / "perf.yaml"
    perf_yaml.write_text(perf_yaml.read_text().replace("size: 40", "size: 4", 1))
    options = RunOptions(perf_subset="pr", gate_from=gate(base, head))
    result = judge(head, tmp_path / "out", 100.0, options)
    assert result.details["shapes"] == len(selected_workloads(load_pipeline(base), "pr")) > 4
    assert "pipelines/perf.yaml (gate, subset)" in result.message


def test_a_baseline_only_the_pull_request_has_is_no_baseline(head, base, tmp_path):
    (base / BASELINE).unlink()
    result = judge(head, tmp_path / "out", 200.0, RunOptions(perf_subset="pr", gate_from=gate(base, head)))
    assert result.verdict == "fail" and "no baseline" in result.message and "base" in result.message


@pytest.mark.parametrize("breakage, phrase", [
    (lambda root: shutil.rmtree(root), "no such folder"),
    (lambda root: shutil.rmtree(root / "pipelines"), "no pipelines/"),
    (lambda root: (root / "pipelines" / "perf.yaml").unlink(), "missing pipeline file pipelines/perf.yaml"),
    (lambda root: (root / "pipelines" / "perf.yaml").write_text("gate: [\n"), "invalid YAML"),
    (lambda root: (root / "pipelines" / "workloads.yaml").write_bytes(b"\xff"), "not UTF-8"),
], ids=["missing", "no-pipelines", "no-perf-yaml", "broken-perf-yaml", "workloads-not-text"])
def test_a_base_it_cannot_read_is_a_usage_error_never_a_fallback(head, base, tmp_path, capsys, breakage, phrase):
    breakage(base)
    with pytest.raises(ConfigError, match="--gate-from"):
        load_gate_source(base, load_pipeline(head))
    code = main(["--root", str(head), "run", "--job", JOB.id, "--executor", "host", "--out", str(tmp_path / "o"),
                 "--gate-from", str(base)])
    assert code == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "--gate-from" in err and phrase in err
    assert not (tmp_path / "o" / "results.json").exists()      # refused before any job ran


def test_a_baseline_linked_to_a_device_is_a_change_not_a_hang(head, base, tmp_path):
    # git stores a symbolic link: the pull request's baseline could point at /dev/zero.
    (head / BASELINE).unlink()
    (head / BASELINE).symlink_to("/dev/zero")
    result = judge(head, tmp_path / "out", 100.0, RunOptions(perf_subset="pr", gate_from=gate(base, head)))
    assert result.verdict == "pass" and BASELINE in result.details["gate_from"]["changed"]
