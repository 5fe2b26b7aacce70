"""The correctness job end to end: a real toolchain venv, the Triton interpreter, both shards,
JUnit XML, known failures as strict xfail, results.json and summary.md.

The checkout is a throwaway copy (pipelines/, lock files, src/ of this repository) whose
tests/mha holds a few tiny tests, one of them a real Triton kernel run by the interpreter, so
the job is exercised without waiting for the kernel package's own suite. The toolchain venv is
the real one (triton-3.4 lock, about a minute to build once); it is the machine's (the slow tests'
MHA_CI_CACHE, tests/mha_ci/conftest.py), so it is built at most once per lock file.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from mha_ci import cli
from mha_ci.jobs.context import JobContext, RunOptions
from mha_ci.payloads import known_failures

REPO = Path(__file__).resolve().parents[3]
SHARD_1 = "correctness-interpreter-triton-3.4-1of2"
SHARD_2 = "correctness-interpreter-triton-3.4-2of2"

TINY_TESTS = '''
import os

import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@pytest.mark.parametrize("n", [7, 64, 100])
def test_triton_add_in_the_interpreter(n):
    assert os.environ.get("TRITON_INTERPRET") == "1"
    x, y = torch.randn(n), torch.randn(n)
    out = torch.empty(n)
    _add[(triton.cdiv(n, 32),)](x, y, out, n, BLOCK=32)
    torch.testing.assert_close(out, x + y)


@pytest.mark.parametrize("case", ["a", "b"])
def test_plain(case):
    assert case in "ab"


def test_documented_failure():
    assert 1 == 2, "fails on purpose; pipelines/known_failures.yaml lists it"
'''

KNOWN_FAILURE = '''known_failures:
  - test: tests/mha/test_tiny.py::test_documented_*
    arch: interpreter
    toolchain: triton-3.4
    reason: fails on purpose (test fixture)
'''


@pytest.fixture
def checkout(pipeline_root: Path, monkeypatch) -> Path:
    (pipeline_root / "src").symlink_to(REPO / "src")
    (pipeline_root / "tests" / "mha").mkdir(parents=True)
    (pipeline_root / "tests" / "mha" / "test_tiny.py").write_text(TINY_TESTS)
    (pipeline_root / "pipelines" / "known_failures.yaml").write_text(KNOWN_FAILURE)
    monkeypatch.setenv("MHA_CI_ASSUME_DEVICES", "")
    return pipeline_root


def _run(root: Path, *args: str) -> tuple[int, dict, str]:
    out = root / "out"
    code = cli.main(["--root", str(root), "run", "--out", str(out), *args])
    return code, json.loads((out / "results.json").read_text()), (out / "summary.md").read_text()


@pytest.mark.slow
def test_both_shards_pass_in_a_real_venv(checkout):
    code, results, text = _run(checkout, "--job", SHARD_1, "--job", SHARD_2)
    assert code == 0, text
    jobs = {j["job_id"]: j for j in results["jobs"]}
    total = 0
    for job_id in (SHARD_1, SHARD_2):
        job = jobs[job_id]
        assert job["verdict"] == "pass", job["message"]
        junit = checkout / "out" / "junit" / f"{job_id}.xml"
        assert f"junit/{job_id}.xml" in job["artifacts"] and junit.is_file()
        suite = ElementTree.parse(junit).getroot().find("testsuite")
        total += int(suite.get("tests"))
        assert job["details"]["versions"]["triton"] == "3.4.0"
        assert job["details"]["versions"]["numpy"] == "2.2.6"
        assert job["details"]["executor"]["executor"] == "venv"
        assert job["details"]["predicted"]["loads_s"] and job["details"]["actual"]["this_shard_s"] >= 0
    assert total == 6                                        # every collected test ran in exactly one shard
    counts = [jobs[j]["details"]["counts"] for j in (SHARD_1, SHARD_2)]
    assert sum(c.get("xfailed", 0) for c in counts) == 1     # the known failure, applied as xfail
    assert "## Correctness shard balance" in text and "`correctness-interpreter-triton-3.4` | 2 |" in text
    durations = json.loads((checkout / "out" / "test_durations" / "interpreter.json").read_text())
    assert durations["schema"] == "mha-ci.durations/1" and len(durations["durations"]) == 6
    assert results["provenance"]["toolchains"]["triton-3.4"]["pins"]["triton"] == "3.4.0"


@pytest.mark.slow
def test_a_failing_test_and_a_known_failure_that_passes_fail_the_shard(checkout):
    source = (checkout / "tests" / "mha" / "test_tiny.py").read_text()
    source = source.replace('assert case in "ab"', 'assert case == "a"')            # test_plain[b] fails now
    source = source.replace("assert 1 == 2,", "assert 1 == 1,")                      # the known failure passes
    (checkout / "tests" / "mha" / "test_tiny.py").write_text(source)
    code, results, text = _run(checkout, "--job", SHARD_1, "--job", SHARD_2)
    assert code == 1
    failed = [t for j in results["jobs"] for t in j["details"].get("failed_tests", [])]
    assert sorted(failed) == ["tests/mha/test_tiny.py::test_documented_failure", "tests/mha/test_tiny.py::test_plain[b]"]
    assert "## Failed tests" in text


@pytest.mark.slow
def test_a_shard_without_tests_is_a_failure(checkout):
    (checkout / "tests" / "mha" / "test_tiny.py").write_text("def helper():\n    pass\n")
    code, results, _ = _run(checkout, "--job", SHARD_1)
    assert code == 1
    assert "no tests collected" in results["jobs"][0]["message"]


def test_host_executor_refuses_a_host_without_the_pins(checkout):
    # this interpreter has no torch: a triton-3.4 job must not pretend it ran there
    code, results, text = _run(checkout, "--executor", "host", "--job", SHARD_1)
    assert code == 3
    job = results["jobs"][0]
    assert job["verdict"] == "error"
    assert "toolchain triton-3.4 pins torch==2.13.0+cpu but the environment" in job["message"]


def test_known_failure_patterns_treat_brackets_literally():
    node = "tests/mha/test_forward.py::test_dense[bf16-causal-128]"
    assert known_failures.matches(node, node)
    assert known_failures.matches("tests/mha/test_forward.py::test_dense[bf16-causal-*]", node)
    assert known_failures.matches("tests/mha/*::test_dense[bf16-????al-128]", node)
    assert not known_failures.matches("tests/mha/test_forward.py::test_dense[fp16-*]", node)
    assert not known_failures.matches("tests/mha/test_forward.py::test_dense", node)   # no implicit prefix match


def _host_pipeline(root: Path):
    """A pipeline with the `host` toolchain (pins recorded, not enforced) so the job runs on this
    interpreter, which has pytest but no torch: enough for tests that do not import torch."""
    from types import SimpleNamespace

    from mha_ci.model.types import Arch, Toolchain
    arch = Arch(name="interpreter", vendor="cpu", description="", device="none", runner_labels=(),
                visible_devices_env=None, compile_target=None, workers=1)
    lock = REPO / "containers" / "triton-3.4" / "requirements.lock"
    toolchain = Toolchain(name="host", role="test", lock=lock, container_dir=lock.parent, pins={})
    return SimpleNamespace(root=root, archs={"interpreter": arch}, toolchains={"host": toolchain},
                           known_failures_for=lambda arch, toolchain: ())


def _host_checkout(tmp_path: Path, source: str) -> Path:
    root = tmp_path / "checkout"
    (root / "tests" / "mha").mkdir(parents=True)
    (root / "src").symlink_to(REPO / "src")
    (root / "tests" / "mha" / "test_host.py").write_text(source)
    return root


@pytest.mark.slow   # over a second (subprocesses): out of `make test-fast`
def test_a_shard_whose_test_process_dies_is_a_failure(tmp_path):
    import io

    from mha_ci.executors.host import HostExecutor
    from mha_ci.jobs.correctness.job import run_job
    from mha_ci.model.types import Job
    root = _host_checkout(tmp_path, "import os, signal\n\ndef test_ok():\n    pass\n\n"
                                    "def test_segfault():\n    os.kill(os.getpid(), signal.SIGSEGV)\n")
    result = run_job(Job("correctness", "interpreter", "host", 1, 1),
                     JobContext(_host_pipeline(root), HostExecutor(root, stream=io.StringIO()), tmp_path / "out"))
    assert result.verdict == "fail" and result.exit_code == 1
    assert "SIGSEGV" in result.message and "no complete result" in result.message
    assert not (tmp_path / "out" / "junit" / "correctness-interpreter-host-1of1.xml").exists()


@pytest.mark.slow   # over a second (subprocesses): out of `make test-fast`
def test_host_toolchain_shard_runs_and_reports_versions(tmp_path):
    import io

    from mha_ci.executors.host import HostExecutor
    from mha_ci.jobs.correctness.job import run_job
    from mha_ci.model.types import Job
    root = _host_checkout(tmp_path, "import pytest\n\n@pytest.mark.parametrize('i', range(5))\n"
                                    "def test_i(i):\n    assert i < 5\n")
    out = tmp_path / "out"
    shards = [run_job(Job("correctness", "interpreter", "host", i, 2),
                      JobContext(_host_pipeline(root), HostExecutor(root, stream=io.StringIO()), out)) for i in (1, 2)]
    assert [s.verdict for s in shards] == ["pass", "pass"]
    assert sorted(s.details["tests"] for s in shards) == [2, 3]
    assert shards[0].details["collected_sha256"] == shards[1].details["collected_sha256"]
    assert shards[0].details["versions"]["pytest"]
    ran = [line for i in (1, 2) for line in (out / "jobs" / f"correctness-interpreter-host-{i}of2" / "tests.txt")
           .read_text().splitlines()]
    assert sorted(ran) == [f"tests/mha/test_host.py::test_i[{i}]" for i in range(5)]


@pytest.mark.slow   # over a second (subprocesses): out of `make test-fast`
@pytest.mark.parametrize("patterns, expect", [("*test_i[[]1[]]", 1), ("*test_i[[]1[]],*test_i[[]3[]]", 2)])
def test_a_selection_runs_only_the_matching_tests_and_says_so(tmp_path, patterns, expect):
    import io

    from mha_ci.executors.host import HostExecutor
    from mha_ci.jobs.correctness.job import run_job
    from mha_ci.model.types import Job
    root = _host_checkout(tmp_path, "import pytest\n\n@pytest.mark.parametrize('i', range(5))\n"
                                    "def test_i(i):\n    assert i < 5\n")
    options = RunOptions(select=tuple(patterns.split(",")))
    result = run_job(Job("correctness", "interpreter", "host", 1, 1),
                     JobContext(_host_pipeline(root), HostExecutor(root, stream=io.StringIO()), tmp_path / "out", options))
    assert result.verdict == "pass" and result.details["tests"] == expect
    assert f"(SELECTION: {expect} of 5 collected tests)" in result.message


def test_a_selection_that_matches_nothing_is_no_result(tmp_path):
    import io

    from mha_ci.executors.host import HostExecutor
    from mha_ci.jobs.correctness.job import run_job
    from mha_ci.model.types import Job
    root = _host_checkout(tmp_path, "def test_ok():\n    pass\n")
    options = RunOptions(select=tuple(["*no_such_test*"]))
    result = run_job(Job("correctness", "interpreter", "host", 1, 1),
                     JobContext(_host_pipeline(root), HostExecutor(root, stream=io.StringIO()), tmp_path / "out", options))
    assert result.verdict == "fail" and "no collected test matches" in result.message
