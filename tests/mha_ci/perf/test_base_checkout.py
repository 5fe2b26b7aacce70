"""The base side of `mha-ci perf measure --against REF` (mha_ci.perf.base_checkout): REF's kernel
package with the working tree's harness; and the command end to end on the CPU."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mha_ci.errors import ConfigError
from mha_ci.perf.base_checkout import materialise, resolve

SRC = Path(__file__).resolve().parents[3] / "src"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    (r / "src" / "mha").mkdir(parents=True)
    (r / "src" / "mha_ci").mkdir(parents=True)
    (r / "src" / "mha" / "kernel.py").write_text("BLOCK = 64\n")
    (r / "src" / "mha_ci" / "harness.py").write_text("VERSION = 1\n")
    git(r, "init", "-q")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "base")
    return r


def test_base_side_is_refs_kernel_with_the_working_trees_harness(repo, tmp_path):
    base = git(repo, "rev-parse", "HEAD")
    (repo / "src" / "mha" / "kernel.py").write_text("BLOCK = 128\n")          # the change under test
    (repo / "src" / "mha_ci" / "harness.py").write_text("VERSION = 2\n")      # harness, uncommitted
    (repo / "src" / "mha_ci" / "__pycache__").mkdir()
    (repo / "src" / "mha_ci" / "__pycache__" / "harness.cpython-311.pyc").write_bytes(b"x")
    dest = tmp_path / "base"
    assert materialise(repo, "HEAD", dest) == base
    assert (dest / "src" / "mha" / "kernel.py").read_text() == "BLOCK = 64\n"
    assert (dest / "src" / "mha_ci" / "harness.py").read_text() == "VERSION = 2\n"
    assert not (dest / "src" / "mha_ci" / "__pycache__").exists()
    assert (dest / "BASE_COMMIT").read_text().strip() == base
    # made again from scratch, not merged into what was there
    (dest / "src" / "mha" / "stale.py").write_text("")
    materialise(repo, base[:10], dest)
    assert not (dest / "src" / "mha" / "stale.py").exists()


def test_a_ref_that_names_no_commit_or_no_kernel_is_a_usage_error(repo, tmp_path):
    with pytest.raises(ConfigError, match="names no commit"):
        resolve(repo, "no-such-branch")
    git(repo, "rm", "-q", "-r", "src/mha")
    git(repo, "commit", "-q", "-m", "no kernel")
    with pytest.raises(ConfigError, match="has no src/mha"):
        materialise(repo, "HEAD", tmp_path / "base")


@pytest.mark.slow     # builds (or reuses) a toolchain venv, like its --interleave sibling
def test_perf_measure_against_takes_turns_between_base_and_working_tree(tmp_path):
    """`mha-ci perf measure --against HEAD` end to end on the CPU, through the venv executor: two
    payloads of one toolchain, one from a base checkout folder, taking turns per shape, then
    gated base vs head. (SDPA stands in for the kernel: the CPU interpreter is far too slow for
    timing; what is checked here is the plumbing, each side's commit and the schedule.)"""
    root = SRC.parent
    head = git(root, "rev-parse", "HEAD")
    done = subprocess.run([sys.executable, "-m", "mha_ci", "--root", str(root), "perf", "measure",
                           "--arch", "interpreter", "--toolchain", "triton-3.4", "--against", "HEAD",
                           "--kernel", "sdpa", "--subset", "pr", "--shape", "dense_b64_hq4_hk1_sq1_sk1024*",
                           "--shape", "dense_b64_hq8_hk1_sq1_sk1024_dqk64*", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=1200,
                          env={**{k: v for k, v in os.environ.items() if k != "MHA_CI_COMMIT"},
                               "PYTHONPATH": str(SRC)})
    assert done.returncode in (0, 1), done.stderr[-3000:]      # 1: CPU timings may "regress"
    run_dir = tmp_path / f"perf-interpreter-triton-3.4-against-{head[:12]}"
    # perf.yaml's two rounds: each its own lockstep pair, the head role a (first) in the second
    for n in (1, 2):
        logged = [line.split()[1] for line in (run_dir / f"round{n}" / "lockstep" / "log").read_text().splitlines()]
        assert logged == ["a", "b", "a", "b", "b", "a"]
    for side, roles in (("base", ["a", "b"]), ("head", ["b", "a"])):
        doc = json.loads((run_dir / f"perf-{side}.json").read_text())
        assert doc["provenance"]["commit"] == head and doc["selection"]["rounds"] == 2
        assert [i["role"] for i in doc["selection"]["rounds_interleave"]] == roles
        assert all(i["broken"] is None for i in doc["selection"]["rounds_interleave"])
    assert (run_dir / "base-checkout" / "src" / "mha" / "interface.py").is_file()
    assert "Tally:" in done.stdout and (run_dir / "compare.html").is_file()
    bad = subprocess.run([sys.executable, "-m", "mha_ci", "--root", str(root), "perf", "measure", "--arch",
                          "interpreter", "--against", "HEAD", "--interleave", "triton-3.8", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert bad.returncode == 2 and "two different comparisons" in bad.stderr


def test_host_code_digest_leaves_out_configs_and_caches(tmp_path):
    """Equal across a config-only change, different across any other file of the package."""
    from mha_ci.perf.base_checkout import host_code_digest, unchanged_host

    def package(root, config="{}", launch="x = 1\n"):
        pkg = root / "src" / "mha"
        (pkg / "configs").mkdir(parents=True)
        (pkg / "__pycache__").mkdir()
        (pkg / "configs" / "sm90.json").write_text(config)
        (pkg / "launch.py").write_text(launch)
        (pkg / "__pycache__" / "launch.cpython-312.pyc").write_bytes(root.name.encode())
        return root

    a = package(tmp_path / "a")
    b = package(tmp_path / "b", config='{"BLOCK_N2": 32}')
    c = package(tmp_path / "c", launch="x = 2\n")
    assert host_code_digest(a / "src" / "mha") == host_code_digest(b / "src" / "mha")
    assert unchanged_host(a, b) and not unchanged_host(a, c)
    (b / "src" / "mha" / "kernels").mkdir()
    (b / "src" / "mha" / "kernels" / "new.py").write_text("")
    assert not unchanged_host(a, b)
