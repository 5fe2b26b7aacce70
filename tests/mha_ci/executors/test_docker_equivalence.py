"""A job gives the same verdict and the same checksums whatever executor ran it (docs/architecture.md):
docker against venv, for a sample of one correctness shard and of the checksum job of each
toolchain. Real dockerd and real toolchains (markers `docker` and `slow`).

Correctness goes through the command line (`mha-ci run --job ... --executor venv|docker
--select ...`), narrowed to the kernel tests of every head-dim class and the determinism tests,
forward and backward: the whole shard is two minutes a run, and `make test` runs every shard in
full on the venv executor anyway; what this test adds is the comparison between executors.
Checksums go through the checksum job's own entry (mha_ci.checksums.verify.compute) with the
interpreter arch as the job's arch, as `mha-ci run --job checksums-interpreter-*` does, but
restricted to a sample of variants: the full set is 511 compiles, ~15 min per executor on two
cores. (`mha-ci checksums compute --executor docker` itself starts the payload with the first
GPU arch, which asks the docker executor for the ROCm image: see the docker helper's report.)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TOOLCHAINS = ("triton-3.4", "triton-3.8")
EXECUTORS = ("venv", "docker")
# Every arch and pass of one head dim / dtype / mask: forward and backward kernels of each
# bucket that selects them, on gfx942, gfx950 and sm90.
CHECKSUM_SAMPLE = "fp16-d64-causal"
# Kernel tests, forward and backward, of every head-dim class: a sample of the shard's outcomes.
CORRECTNESS_SAMPLE = ("tests/mha/test_head_dim_classes.py::*", "tests/mha/test_determinism.py::*")
CODE_OBJECT_FIELDS = ("key", "arch", "bucket", "sha256", "shared_bytes", "registers", "spills")


def mha_ci(repo_root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(repo_root / "src")}
    proc = subprocess.run([sys.executable, "-m", "mha_ci", *args], cwd=repo_root, env=env,
                          capture_output=True, text=True, timeout=3600)
    sys.stderr.write(proc.stderr[-4000:])
    return proc


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed | failed | error | skipped, from a JUnit XML file."""
    found = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[f"{case.get('classname')}::{case.get('name')}"] = kinds[0] if kinds else "passed"
    return found


@pytest.mark.parametrize("toolchain", TOOLCHAINS)
def test_correctness_shard_same_verdict_and_outcomes(repo_root, tmp_path, toolchain):
    job = f"correctness-interpreter-{toolchain}-1of2"
    select = [arg for glob in CORRECTNESS_SAMPLE for arg in ("--select", glob)]
    runs = {ex: mha_ci(repo_root, "run", "--job", job, "--executor", ex, "--out", str(tmp_path / ex), *select)
            for ex in EXECUTORS}
    assert runs["venv"].returncode in (0, 1), runs["venv"].stderr[-2000:]
    assert runs["docker"].returncode == runs["venv"].returncode, runs["docker"].stderr[-2000:]

    per_executor = {ex: outcomes(tmp_path / ex / "junit" / f"{job}.xml") for ex in EXECUTORS}
    assert per_executor["venv"], "the shard ran no tests: nothing was compared"
    assert per_executor["docker"] == per_executor["venv"]
    print(f"{job}: {len(per_executor['venv'])} test outcomes identical under venv and docker")

    verdicts = {}
    for ex in EXECUTORS:
        (entry,) = [j for j in json.loads((tmp_path / ex / "results.json").read_text())["jobs"]
                    if j["job_id"] == job]
        verdicts[ex] = (entry["verdict"], entry["exit_code"])
    assert verdicts["docker"] == verdicts["venv"]


@pytest.mark.parametrize("toolchain", TOOLCHAINS)
def test_checksums_sample_identical(repo_root, tmp_path, toolchain):
    from mha_ci.checksums import verify as checksums_job
    from mha_ci.executors import make_executor
    from mha_ci.model.loader import load_pipeline

    pipeline = load_pipeline(repo_root)
    archs = checksums_job.compile_archs(pipeline.archs.values())
    records = {}
    for ex in EXECUTORS:
        computed = checksums_job.compute(
            repo_root, pipeline.toolchains[toolchain], archs, make_executor(ex, repo_root),
            tmp_path / ex, job_arch=pipeline.archs["interpreter"], only=CHECKSUM_SAMPLE,
            use_cache=False, determinism_sample=0)  # compared across executors here; the checksums job checks determinism
        records[ex] = sorted(tuple(getattr(r, f) for f in CODE_OBJECT_FIELDS)
                             for r in computed.codeobjs.records)
        # a variant that does not compile must fail to compile under both
        records[ex].append(("compile errors",) + tuple(sorted(e["key"] for e in computed.codeobjs.errors)))
    assert len(records["venv"]) > 1, "the sample selected no variant: nothing was compared"
    assert records["docker"] == records["venv"]
    print(f"{toolchain}: {len(records['venv']) - 1} code objects and "
          f"{len(records['venv'][-1]) - 1} compile errors identical under venv and docker")
