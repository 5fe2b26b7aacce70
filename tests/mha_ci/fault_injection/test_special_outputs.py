"""A FIFO, a folder or a device where mha-ci writes an output file (issue 34 item 6): opening a
FIFO for writing waits for a reader forever. Each is refused with exit 2 naming the path, before
any work and without hanging; the commands run as the `mha-ci` command does, under a timeout."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perf_builders import doc, entry

REPO = Path(__file__).resolve().parents[3]
A = "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"


def mha_ci(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "mha_ci", "--root", str(REPO), *args], capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.fixture
def perf_doc(tmp_path) -> Path:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(doc([entry(A, 100.0)])))
    return path


@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir], ids=["fifo", "folder"])
def test_perf_merge_out_that_is_not_a_regular_file(tmp_path, perf_doc, make):
    out = tmp_path / "merged.json"
    make(out)
    done = mha_ci("perf", "merge", str(perf_doc), "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert "merged.json" in done.stderr


@pytest.mark.parametrize("name", ["compare.md", "compare.json"])
def test_perf_compare_output_that_is_a_fifo(tmp_path, perf_doc, name):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / name)
    done = mha_ci("perf", "compare", str(perf_doc), str(perf_doc), "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert name in done.stderr and "FIFO" in done.stderr


@pytest.mark.parametrize("name", ["results.json", "summary.md"])
def test_run_output_that_is_a_fifo(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / name)
    done = mha_ci("run", "--job", "no-such-job", "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert name in done.stderr and "FIFO" in done.stderr
    assert (out / name).is_fifo()


def test_write_atomic_refuses_a_fifo_in_place_of_its_file(tmp_path):
    from mha_ci.errors import ConfigError
    from mha_ci.files import write_atomic

    os.mkfifo(tmp_path / "x.json")
    with pytest.raises(ConfigError, match="FIFO"):
        write_atomic(tmp_path / "x.json", "{}")
