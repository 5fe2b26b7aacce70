"""Probes of a pull request that allows its own failures: it lists its new kernel-test failure,
or its new sanitizer finding, in pipelines/known_failures.yaml, and its correctness or memcheck
job would then apply it as a strict xfail and pass. With `mha-ci run --gate-from BASE` those jobs
apply BASE's known failures instead, the verdict names what the pull request lists otherwise, and
a base whose file cannot be used is a usage error, never a fallback to the pull request's own."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mha_ci.cli import main
from mha_ci.errors import ConfigError, ExitCode
from mha_ci.executors.base import Executor, PayloadResult
from mha_ci.jobs.context import JobContext, RunOptions
from mha_ci.jobs.correctness import job as correctness
from mha_ci.jobs import memcheck
from mha_ci.model.loader import load_pipeline
from mha_ci.model.types import Job
from mha_ci.perf.gate_source import load_gate_source

CORRECTNESS = Job(kind="correctness", arch="interpreter", toolchain="triton-3.4", shard=1, shards=1)
MEMCHECK = Job(kind="memcheck", arch="sm90", toolchain="triton-3.4", shard=1, shards=1)
NEW_FAILURE = "tests/mha/test_tiny.py::test_new_failure"
NEW_FINDING = "initcheck::fp16-d64-plain"          # not in the repository's known_failures.yaml
LISTED_FINDING = "initcheck::fp16-d16-plain"       # the repository lists it for sm90 / triton-3.4


def entry(test: str, arch: str, toolchain: str = "triton-3.4", reason: str = "the pull request says so") -> str:
    return f"  - {{test: '{test}', arch: {arch}, toolchain: {toolchain}, reason: '{reason}'}}\n"


@pytest.fixture
def base(sibling_checkout) -> Path:
    return sibling_checkout("base")


@pytest.fixture
def head(sibling_checkout) -> Path:
    """The pull request: lists its own new test failure and its new initcheck finding as known,
    drops one listed finding and rewords another."""
    root = sibling_checkout("head")
    path = root / "pipelines" / "known_failures.yaml"
    text = path.read_text()
    listed = '  - test: "initcheck::fp16-d16-plain"\n    arch: sm90\n    toolchain: triton-3.4\n'
    assert listed in text
    reason = "    reason: the warp-specialized forward's TMA stores are invisible to initcheck\n"
    text = text.replace(listed + reason, "", 1)
    reworded = '  - test: "initcheck::fp16-d80-plain"\n    arch: sm90\n    toolchain: triton-3.4\n    reason: '
    assert reworded in text
    text = text.replace(reworded, reworded + "(reworded) ", 1)
    path.write_text(text + entry(NEW_FAILURE, "interpreter") + entry(NEW_FINDING, "sm90"))
    return root


def known_tests(path: Path) -> list[str]:
    return [k["test"] for k in json.loads(path.read_text())]


class Payloads(Executor):
    """The correctness and memcheck payloads in miniature: each applies the known failures it is
    handed as strict xfail, as the real ones do (mha_ci.payloads.known_failures, memcheck)."""

    name = "fake"

    def run(self, payload):
        args = dict(zip(payload.args[1::2], payload.args[2::2]))
        out = payload.out_dir
        if payload.args[0] == "collect":
            (out / args["--out"]).write_text(json.dumps({"tests": ["tests/mha/test_tiny.py::test_ok", NEW_FAILURE]}))
            return PayloadResult(exit_code=0)
        known = set(known_tests(out / args["--known-failures"]))
        if payload.module == "memcheck":
            return self._memcheck(out / args["--report"], known)
        return self._correctness(out, args, known)

    def _correctness(self, out: Path, args: dict, known: set[str]) -> PayloadResult:
        tests = (out / args["--tests"]).read_text().split()
        failed = [t for t in tests if t == NEW_FAILURE and t not in known]
        cases = "".join(f'<testcase name="{t}"><failure/></testcase>' if t in failed else f'<testcase name="{t}"/>'
                        for t in tests)
        junit = out / args["--junit"]
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(f'<testsuites><testsuite tests="{len(tests)}" failures="{len(failed)}" errors="0" '
                         f'skipped="{len(tests) - len(failed) - 1}">{cases}</testsuite></testsuites>')
        outcomes = {t: "failed" if t in failed else ("xfailed" if t == NEW_FAILURE else "passed") for t in tests}
        (out / args["--report"]).write_text(json.dumps({"outcomes": outcomes}))
        return PayloadResult(exit_code=1 if failed else 0)

    def _memcheck(self, report: Path, known: set[str]) -> PayloadResult:
        results = [{"tool": "initcheck", "label": "fp16-d64-plain", "seconds": 1.0, "reports": [
            {"headline": "Uninitialized __global__ memory read", "kernel": "attn_fwd", "lines": []}],
                    "status": "known" if NEW_FINDING in known else "reported"},
                   {"tool": "memcheck", "label": "fp16-d64-plain", "status": "clean", "reports": [], "seconds": 1.0}]
        report.write_text(json.dumps({
            "arch": "sm90", "tools": list(memcheck.TOOLS), "sanitizer": {}, "variants_listed": 2,
            "variants_in_shard": 1, "variants_covered": 1, "uncovered": [], "problems": 1, "results": results,
            "self_tests": [{"tool": t, "status": "seen", "why": ""} for t in memcheck.TOOLS]}))
        return PayloadResult(exit_code=0 if NEW_FINDING in known else 1)


def run(job: Job, head: Path, out: Path, options: RunOptions = RunOptions()):
    kind = memcheck if job.kind == "memcheck" else correctness
    return kind.run_job(job, JobContext(load_pipeline(head), Payloads(), out, options))


def test_without_gate_from_a_pull_request_allows_its_own_failures(head, tmp_path):
    # Today's behaviour, and what a pull request's GPU run did before: its own entries apply.
    for job in (CORRECTNESS, MEMCHECK):
        result = run(job, head, tmp_path / "out")
        assert result.verdict == "pass", result.message
        assert "gate_from" not in result.details and "changes" not in result.message
    assert NEW_FAILURE in known_tests(tmp_path / "out" / "jobs" / CORRECTNESS.id / "known_failures.json")
    written = known_tests(tmp_path / "out" / "jobs" / MEMCHECK.id / "known_failures.json")
    assert NEW_FINDING in written and LISTED_FINDING not in written


def test_with_gate_from_correctness_applies_the_base_and_names_the_change(head, base, tmp_path):
    gate = load_gate_source(base, load_pipeline(head))
    result = run(CORRECTNESS, head, tmp_path / "out", RunOptions(gate_from=gate))
    assert result.verdict == "fail" and result.details["failed_tests"] == [NEW_FAILURE]
    # The repository lists nothing for the interpreter: nor does the file the payload is handed.
    assert known_tests(tmp_path / "out" / "jobs" / CORRECTNESS.id / "known_failures.json") == []
    assert result.details["gate_from"] == {
        "root": str(base.resolve()), "changed": ["pipelines/known_failures.yaml"],
        "known_failures": {"added": [NEW_FAILURE], "removed": [], "reason_changed": []}}
    assert result.message.endswith("; this pull request changes pipelines/known_failures.yaml for interpreter / "
                                   f"triton-3.4 (1 added): judged by the base's ({base.resolve()})")


def test_with_gate_from_memcheck_applies_the_base_and_names_the_change(head, base, tmp_path):
    gate = load_gate_source(base, load_pipeline(head))
    result = run(MEMCHECK, head, tmp_path / "out", RunOptions(gate_from=gate))
    assert result.verdict == "fail" and result.details["failed_tests"] == [NEW_FINDING]
    written = json.loads((tmp_path / "out" / "jobs" / MEMCHECK.id / "known_failures.json").read_text())
    base_entries = load_pipeline(base).known_failures_for("sm90", "triton-3.4")
    assert written == [{"test": k.test, "reason": k.reason} for k in base_entries]
    assert LISTED_FINDING in known_tests(tmp_path / "out" / "jobs" / MEMCHECK.id / "known_failures.json")
    assert result.details["gate_from"]["known_failures"] == {
        "added": [NEW_FINDING], "removed": [LISTED_FINDING], "reason_changed": ["initcheck::fp16-d80-plain"]}
    assert ("this pull request changes pipelines/known_failures.yaml for sm90 / triton-3.4 "
            "(1 added, 1 removed, 1 reason changed): judged by the base's") in result.message


def test_a_job_whose_entries_agree_with_the_base_adds_no_line(head, base, tmp_path):
    # The pull request changes nothing for sm90 / triton-3.8: that job's verdict says nothing.
    job = Job(kind="memcheck", arch="sm90", toolchain="triton-3.8", shard=1, shards=1)
    result = run(job, head, tmp_path / "out", RunOptions(gate_from=load_gate_source(base, load_pipeline(head))))
    assert result.details["gate_from"] == {"root": str(base.resolve()), "changed": [],
                                           "known_failures": {"added": [], "removed": [], "reason_changed": []}}
    assert "changes" not in result.message


def test_a_base_entry_for_an_arch_or_toolchain_the_checkout_lacks_is_left_out(head, base):
    # A pull request that renames a toolchain still gets its GPU run; the old name's allowances
    # match none of its jobs, so leaving them out loosens nothing.
    before = load_pipeline(base).known_failures
    assert before                           # the committed file lists some
    path = base / "pipelines" / "known_failures.yaml"
    path.write_text(path.read_text() + entry("tests/mha/x.py::t", "sm90", "triton-9.9")
                    + entry("tests/mha/x.py::t", "sm100"))
    with pytest.raises(ConfigError, match="unknown toolchain 'triton-9.9'"):
        load_pipeline(base)                     # the loader's own check, which the base's file passed
    assert load_gate_source(base, load_pipeline(head)).known_failures == before


@pytest.mark.parametrize("breakage, phrase", [
    (lambda text: None, "missing pipeline file pipelines/known_failures.yaml"),
    (lambda text: "known_failures: [\n", "invalid YAML"),
    (lambda text: text + "  - {test: x, arch: sm90, toolchain: triton-3.4}\n", "reason"),
    (lambda text: text + entry("initcheck::fp16-d16-plain", "sm90"), "listed twice"),
], ids=["missing", "broken-yaml", "no-reason", "duplicate"])
def test_a_base_known_failures_file_it_cannot_use_is_a_usage_error(head, base, tmp_path, capsys, breakage, phrase):
    path = base / "pipelines" / "known_failures.yaml"
    text = breakage(path.read_text())
    if text is None:
        path.unlink()
    else:
        path.write_text(text)
    with pytest.raises(ConfigError, match="the base's known failures cannot be used"):
        load_gate_source(base, load_pipeline(head))
    code = main(["--root", str(head), "run", "--job", MEMCHECK.id, "--executor", "host", "--out",
                 str(tmp_path / "o"), "--gate-from", str(base)])
    assert code == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "--gate-from" in err and phrase in err
    assert not (tmp_path / "o" / "results.json").exists()      # refused before any job ran
