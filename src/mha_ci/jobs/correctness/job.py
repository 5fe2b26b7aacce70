"""One correctness shard: collect tests/mha in the toolchain, pick this shard, run it, judge it.

Steps (each payload run goes through the executor, so venv, docker and host behave alike):
1. `correctness collect` lists the node ids of tests/mha inside the toolchain environment
   (what exists can depend on the toolchain; collection errors fail the job).
2. sharding.split over perf_baselines/test_durations/<arch>.json picks this shard's tests;
   the predicted balance of all N shards goes into the result.
3. `correctness run` runs them: xdist workers = arch.workers, one GPU each, known failures of
   (arch, toolchain) as strict xfail (with `--gate-from`, the base checkout's, and the verdict
   names what the checkout lists otherwise: jobs.context.with_known_failures), TRITON_INTERPRET=1
   on the interpreter arch.
4. Verdict from the payload's exit and the JUnit XML: a shard that produced no JUnit result,
   or a JUnit file with zero tests, is a failure, never a pass.

Files (relative to the run's out folder): jobs/<id>/{collected.json, tests.txt,
known_failures.json, report.json}, junit/<id>.xml, and test_durations/<arch>.json (measured
durations of every shard of the run merged: what the nightly refresh stores).
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Callable, Sequence

from mha_ci.baselines import test_durations
from mha_ci.errors import ExitCode
from mha_ci.executors.base import Executor, PayloadResult, PayloadRun
from mha_ci.files import write_atomic
from mha_ci.jobs import JobResult
from mha_ci.jobs.context import JobContext, with_known_failures
from mha_ci.jobs.correctness import sharding
from mha_ci.model.pipeline import Pipeline
from mha_ci.model.types import Arch, Job

TESTS_DIR = "tests/mha"


def durations_file(root: Path, arch: str) -> Path:
    return Path(root) / test_durations(f"{arch}.json")


def _selected(tests: list[str], select: Sequence[str], result: JobResult) -> list[str]:
    """The tests `mha-ci run --select` keeps (all without it); records the selection in `result`."""
    patterns = [p.strip() for p in select if p.strip()]
    if not patterns:
        return tests
    chosen = [t for t in tests if any(fnmatch.fnmatchcase(t, p) for p in patterns)]
    result.details["selection"] = {"patterns": patterns, "selected": len(chosen), "collected": len(tests)}
    if not chosen:
        result.message = f"no collected test matches --select {' '.join(patterns)}: no result"
    return chosen


def run_job(job: Job, ctx: JobContext) -> JobResult:
    return with_known_failures(_run, job, ctx)


def _run(job: Job, ctx: JobContext, pipeline: Pipeline) -> JobResult:
    """The job with `pipeline`'s known failures (the base's with --gate-from)."""
    started = time.monotonic()
    executor, out_dir = ctx.executor, ctx.out_dir
    arch = pipeline.archs[job.arch]
    toolchain = pipeline.toolchains[job.toolchain].on(arch.platform)
    index, count = job.shard or 1, job.shards or 1
    rel = f"jobs/{job.id}"
    job_dir = out_dir / rel
    job_dir.mkdir(parents=True, exist_ok=True)
    env = {"TRITON_INTERPRET": "1"} if arch.compile_target is None else {}
    timeout = ctx.options.job_timeout_s

    def payload(args: tuple[str, ...], step: str) -> PayloadRun:
        return PayloadRun(module="correctness", args=args, toolchain=toolchain, arch=arch, out_dir=out_dir,
                          env=env, timeout_s=timeout, log_prefix=f"{job.id} {step}")

    result = JobResult(job_id=job.id, kind=job.kind, verdict="fail", exit_code=ExitCode.GATE_FAILED)

    # 1. collect
    tests = _collect(executor, payload, job_dir, rel, ctx.options.select, result, started)
    if not tests:
        return _finish(result, started)

    # 2. shard
    mine = _shard(tests, pipeline, arch, toolchain.name, index, count, job_dir, result)
    if not mine:
        return _finish(result, started)

    # 3. run
    junit_rel = f"junit/{job.id}.xml"
    args = ["run", "--tests", f"{rel}/tests.txt", "--junit", junit_rel, "--report", f"{rel}/report.json",
            "--known-failures", f"{rel}/known_failures.json", "--workers", str(max(1, arch.workers))]
    if arch.visible_devices_env:
        args += ["--visible-devices-env", arch.visible_devices_env]
    run_started = time.monotonic()
    ran = executor.run(payload(tuple(args), f"{index}of{count}"))
    result.timings["tests"] = round(time.monotonic() - run_started, 3)
    result.details["executor"] = ran.provenance

    # 4. judge
    _judge(result, ran, out_dir, rel, junit_rel, arch.name, toolchain.name, timeout)
    return _finish(result, started)


def _collect(executor: Executor, payload: Callable[[tuple[str, ...], str], PayloadRun], job_dir: Path, rel: str,
             select: Sequence[str], result: JobResult, started: float) -> list[str]:
    """The collected tests this job runs (after `--select`); none, with the reason in `result`, when
    collection failed or found nothing."""
    collected_path = job_dir / "collected.json"
    collected = executor.run(payload(("collect", "--tests-dir", TESTS_DIR, "--out", f"{rel}/collected.json"), "collect"))
    result.timings["collect"] = round(time.monotonic() - started, 3)
    result.details["executor"] = collected.provenance
    if collected.exit_code != 0 or not collected_path.is_file():
        result.message = _collect_problem(collected, collected_path)
        return []
    listing = json.loads(collected_path.read_text())
    tests = listing["tests"]
    result.details["versions"] = listing.get("versions", {})
    if not tests:
        result.message = f"no tests collected in {TESTS_DIR}: a shard with no result is a failure"
        return []
    return _selected(tests, select, result)


def _shard(tests: list[str], pipeline: Pipeline, arch: Arch, toolchain: str, index: int, count: int,
           job_dir: Path, result: JobResult) -> tuple[str, ...]:
    """This shard's tests, written to tests.txt with the known failures beside them; the split's
    predicted balance goes into `result` (and the reason, when the shard is empty)."""
    recorded_path = durations_file(pipeline.root, arch.name)
    recorded = sharding.load_durations(recorded_path)
    shards = sharding.split(tests, recorded, count)
    mine = shards[index - 1]
    balance = sharding.predicted_balance(shards)
    result.details.update(
        collected=len(set(tests)), shard=index, shards=count, tests=len(mine.tests),
        # Every shard splits its own collection; shards that collected different lists (different
        # checkouts) may run a test twice or never. The summary compares these digests.
        collected_sha256=hashlib.sha256("\n".join(sorted(set(tests))).encode()).hexdigest(),
        durations_source=_relative(recorded_path, pipeline.root) if recorded else None,
        known_durations=sum(1 for t in set(tests) if t in recorded),
        predicted={"this_shard_s": round(mine.predicted_s, 3), **balance.to_json()})
    # Whole or not at all: a tests.txt cut short by a full disk would be a shard that runs less and passes.
    write_atomic(job_dir / "tests.txt", "".join(t + "\n" for t in mine.tests))
    known = [{"test": k.test, "reason": k.reason, "arch": k.arch, "toolchain": k.toolchain}
             for k in pipeline.known_failures_for(arch.name, toolchain)]
    write_atomic(job_dir / "known_failures.json", json.dumps(known, indent=2) + "\n")
    if not mine.tests:
        # More shards than tests: this shard is legitimately empty, but it cannot vouch for anything.
        result.message = f"shard {index} of {count} got no tests ({len(set(tests))} collected): no result"
    return mine.tests


def _judge(result: JobResult, ran: PayloadResult, out_dir: Path, rel: str, junit_rel: str, arch: str,
           toolchain: str, timeout: float) -> None:
    """The verdict from the payload's exit, the JUnit XML and the payload's report."""
    junit_path = out_dir / junit_rel
    junit = read_junit(junit_path) if junit_path.is_file() else None
    report_path = out_dir / rel / "report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    if junit is not None:
        result.artifacts.append(junit_rel)
        result.details["junit"] = junit
        result.details["actual"] = {"this_shard_s": junit["time_s"], "wall_s": result.timings["tests"]}
    if report:
        result.artifacts.append(f"{rel}/report.json")
        result.details["counts"] = report.get("counts", {})
        result.details["versions"] = report.get("versions", result.details.get("versions", {}))
        result.details["pins_checked"] = report.get("pins_checked", False)
        result.details["pin_mismatches"] = report.get("pin_mismatches", [])
        failed = sorted(t for t, o in report.get("outcomes", {}).items() if o in ("failed", "error"))
        result.details["failed_tests"] = failed[:50]
        if report.get("durations"):
            _merge_durations(out_dir, arch, toolchain, report["durations"], report.get("versions", {}))
    if ran.timed_out:
        result.message = f"timed out after {timeout:g} s (MHA_CI_JOB_TIMEOUT)"
    elif ran.error:
        result.message = f"the test run was {ran.error}: the shard produced no complete result"
    elif junit is None:
        result.message = f"the shard produced no JUnit result (payload exit {ran.exit_code}): counted as a failure"
    elif junit["tests"] == 0:
        result.message = "the JUnit result holds zero tests: counted as a failure"
    elif ran.exit_code == 0 and junit["failures"] == 0 and junit["errors"] == 0:
        result.verdict, result.exit_code = "pass", ExitCode.OK
        result.message = _counts_line(junit)
    else:
        failed = result.details.get("failed_tests", [])
        head = ", ".join(failed[:3]) + (" ..." if len(failed) > 3 else "")
        result.message = _counts_line(junit) + (f"; failed: {head}" if head else f"; payload exit {ran.exit_code}")


def _finish(result: JobResult, started: float) -> JobResult:
    result.timings["total"] = round(time.monotonic() - started, 3)
    chosen = result.details.get("selection")
    if chosen and result.message:
        result.message += f" (SELECTION: {chosen['selected']} of {chosen['collected']} collected tests)"
    return result


def _collect_problem(ran, path: Path) -> str:
    if ran.timed_out:
        return f"collecting {TESTS_DIR} timed out"
    if path.is_file():
        errors = json.loads(path.read_text()).get("errors", [])
        if errors:
            return f"collecting {TESTS_DIR} failed: " + "; ".join(errors[:3])
    return f"collecting {TESTS_DIR} produced no test list (payload exit {ran.exit_code})"


def _counts_line(junit: dict) -> str:
    return (f"{junit['tests']} tests: {junit['failures']} failed, {junit['errors']} errors, "
            f"{junit['skipped']} skipped, in {junit['time_s']:.1f} s")


def read_junit(path: Path) -> dict | None:
    """Totals of a JUnit XML file (pytest writes <testsuites><testsuite ...>); None if unreadable."""
    try:
        tree = ElementTree.parse(path)
    except ElementTree.ParseError:
        return None
    root = tree.getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    time_s = 0.0
    for suite in suites:
        for key in totals:
            totals[key] += int(suite.get(key, 0))
        # The sum of test times, not the suite wall time: comparable with the predicted sums.
        time_s += sum(float(case.get("time", 0) or 0) for case in suite.iter("testcase"))
    return {**totals, "time_s": round(time_s, 3)}


def _merge_durations(out_dir: Path, arch: str, toolchain: str, durations: dict, versions: dict) -> None:
    """Fold one shard's measured durations into out/test_durations/<arch>.json. Where two
    toolchains measured the same test, the slower time is kept: sharding on the pessimistic
    number keeps the slowest toolchain's shards balanced."""
    path = out_dir / "test_durations" / f"{arch}.json"
    merged, toolchains, measured = {}, [toolchain], {}
    if path.is_file():
        previous = json.loads(path.read_text())
        merged = sharding.load_durations(path)
        toolchains += previous.get("toolchains", [])
        measured = previous.get("provenance", {}).get("versions", {})
    for test, seconds in durations.items():
        merged[test] = max(float(seconds), merged.get(test, 0.0))
    measured[toolchain] = {k: versions.get(k) for k in ("python", "torch", "triton", "numpy") if k in versions}
    sharding.write_durations(path, merged, arch=arch, toolchains=toolchains,
                             provenance={"measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                         "versions": measured})


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return str(path)
