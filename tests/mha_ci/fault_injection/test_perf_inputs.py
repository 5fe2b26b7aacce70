"""Perf inputs that are not what they claim: workload shapes the kernel cannot run, and perf
documents that are not regular files or stored baselines that are not perf documents. Each is a
usage error (exit 2) naming the file, never a crash or a hang."""
import json
import os
import re
from pathlib import Path

import pytest

from mha_ci.cli import main
from mha_ci.errors import ExitCode
from mha_ci.model.perf_schema import HEAD_DIM_RANGE

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("old,new,key", [
    ("window: [128, 0]}", "window: [-5, 0]}", "window"),
    ("sq: 2048, sk: 2048, dqk: 64, dv: 64, causal: true}", "sq: 2048, sk: 2048, dqk: 300, dv: 64, causal: true}", "dqk"),
    ("- {layouts: [dense, varlen], batch: 8, hq: 48", "- {layouts: [dense, varlen], batch: true, hq: 48", "batch"),
])
def test_workload_shapes_the_kernel_cannot_run_are_refused(pipeline_root, capsys, old, new, key):
    path = pipeline_root / "pipelines" / "workloads.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    assert main(["--root", str(pipeline_root), "validate"]) == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "workloads.yaml" in err and key in err


def test_the_head_dim_range_is_the_kernel_packages():
    # mha.validation imports torch; its bounds are read from the source.
    source = (REPO / "src" / "mha" / "validation.py").read_text()
    found = re.search(r"^MIN_HEAD_DIM, MAX_HEAD_DIM = (\d+), (\d+)$", source, re.M)
    assert found and (int(found[1]), int(found[2])) == HEAD_DIM_RANGE


def test_a_fifo_as_a_perf_document_is_refused_without_hanging(tmp_path, capsys):
    fifo = tmp_path / "cand.json"
    os.mkfifo(fifo)
    base = tmp_path / "base.json"
    base.write_text("{}")
    assert main(["--root", str(REPO), "perf", "compare", str(fifo), str(fifo)]) == ExitCode.CONFIG_ERROR
    assert "FIFO" in capsys.readouterr().err


def test_a_stored_baseline_that_is_not_a_perf_document_is_a_usage_error(pipeline_root, tmp_path, capsys):
    import subprocess

    stored = pipeline_root / "perf_baselines" / "sm90" / "triton-3.4.json"
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps({"schema": "mha-ci.perf/1", "provenance": {}, "method": {},
                                  "results": [{"key": 1}]}))
    for args in (["init", "-q", "-b", "main"], ["add", "."],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init"]):
        subprocess.run(["git", "-C", str(pipeline_root), *args], check=True)
    head = subprocess.run(["git", "-C", str(pipeline_root), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    doc = {"schema": "mha-ci.perf/1",
           "provenance": {"gpu": "NVIDIA H200", "arch": "sm90", "toolchain": "triton-3.4", "kernel": "mha",
                          "versions": {"torch": "2.8.0", "triton": "3.4.0"}, "commit": head, "pins_checked": True},
           "method": {"warmup": 10, "dispatches": 40, "reps": 5, "trim": [10, 10]},
           "selection": {"subset": "full", "count": 0}, "results": []}
    measured = tmp_path / "m.json"
    measured.write_text(json.dumps(doc))
    code = main(["--root", str(pipeline_root), "perf", "refresh", "--arch", "sm90", "--measurement",
                 f"triton-3.4={measured}", "--out", str(tmp_path / "out"), "--date", "2026-12-01"])
    assert code == ExitCode.CONFIG_ERROR
    assert "triton-3.4.json" in capsys.readouterr().err
