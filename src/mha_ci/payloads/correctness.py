"""Correctness payload: collect the kernel tests, or run one shard of them.

    python -m mha_ci.payloads.correctness collect --tests-dir tests/mha --out FILE
    python -m mha_ci.payloads.correctness run --tests FILE --junit FILE --report FILE
        [--known-failures FILE] [--workers W] [--visible-devices-env NAME]

File arguments are relative to $MHA_CI_OUT (see mha_ci.payloads). `collect` writes
{"tests": [node ids], "versions": {...}}. `run` runs exactly the node ids listed in --tests
(one a line), with pytest-xdist when W > 1 (one GPU per worker, mha_ci.payloads.gpu_per_worker),
known failures as strict xfail (mha_ci.payloads.known_failures), JUnit XML to --junit, and a
report to --report: every test's outcome and duration (setup + call + teardown, the numbers
the durations file is refreshed from) and the installed versions.

Exit: 0 all passed, 1 tests failed, 3 pin mismatch, 4 no result (nothing ran, pytest could
not start, or no JUnit file came out). pytest's own codes are mapped because its 3 (internal
error) would otherwise read as an environment problem.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from mha_ci.errors import EnvironmentProblem
from mha_ci.files import write_atomic
from mha_ci.payloads import EXIT_ENVIRONMENT, EXIT_GATE_FAILED, EXIT_NO_RESULT, EXIT_OK, out_path, pincheck

REPORT_SCHEMA = "mha-ci.correctness-shard/1"
COLLECT_SCHEMA = "mha-ci.collected-tests/1"


class _Collector:
    """Records the node ids pytest collected (sturdier than parsing `--collect-only -q` output)."""

    def __init__(self) -> None:
        self.tests: list[str] = []
        self.errors: list[str] = []

    def pytest_collection_finish(self, session) -> None:
        self.tests = [item.nodeid for item in session.items]

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.errors.append(f"{report.nodeid}: {str(report.longrepr).splitlines()[-1] if report.longrepr else ''}")


class _Recorder:
    """Outcome and duration of every test, seen in the controlling process (xdist forwards reports)."""

    def __init__(self) -> None:
        self.durations: dict[str, float] = {}
        self.outcomes: dict[str, str] = {}

    def pytest_runtest_logreport(self, report) -> None:
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + float(report.duration)
        outcome = _outcome(report)
        if outcome is None:
            return
        # the first non-pass phase decides (a failing teardown after a passing call is a failure)
        if self.outcomes.get(report.nodeid) in (None, "passed"):
            self.outcomes[report.nodeid] = outcome


def _outcome(report) -> str | None:
    if report.when == "call" or report.outcome != "passed":
        if hasattr(report, "wasxfail"):
            return "xfailed" if report.skipped else "xpassed"
        if report.when != "call" and report.failed:
            return "error"
        return report.outcome  # passed | failed | skipped
    return None


def collect(args: argparse.Namespace) -> int:
    versions = pincheck.enforce()
    import pytest  # toolchain only: after the pin check

    collector = _Collector()
    code = pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", args.tests_dir], plugins=[collector])
    result = {"schema": COLLECT_SCHEMA, "tests": collector.tests, "errors": collector.errors,
              "pytest_exit": int(code), "versions": versions}
    _write_json(out_path(args.out), result)
    if collector.errors:
        print(f"mha-ci: collecting {args.tests_dir} failed in {len(collector.errors)} place(s)", file=sys.stderr)
        return EXIT_GATE_FAILED
    if int(code) not in (0, 5):     # 5: nothing collected; the job decides what an empty list means
        return EXIT_NO_RESULT
    return EXIT_OK


def _gpus_given(variable: str) -> int:
    """GPUs this runner may use: the entries of $variable, else every GPU torch sees."""
    given = [d for d in os.environ.get(variable, "").split(",") if d.strip()]
    if given:
        return len(given)
    import torch  # toolchain only: after the pin check

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run(args: argparse.Namespace) -> int:
    pins = pincheck.enforce_report()
    versions = pins["versions"]
    import pytest  # toolchain only: after the pin check

    tests = [line.strip() for line in out_path(args.tests).read_text().splitlines() if line.strip()]
    junit = out_path(args.junit)
    junit.parent.mkdir(parents=True, exist_ok=True)
    # Stale files of an earlier run must not pass for this run's result.
    for stale in (junit, out_path(args.report)):
        if stale.exists():
            stale.unlink()
    report = {"schema": REPORT_SCHEMA, "tests": len(tests), "versions": versions, "workers": args.workers,
              "pins_checked": pins["pins_checked"], "pin_mismatches": pins["pin_mismatches"]}
    if not tests:
        report.update(pytest_exit=None, outcomes={}, durations={}, counts={}, wall_s=0.0,
                      problem="the shard has no tests")
        _write_json(out_path(args.report), report)
        print("mha-ci: the shard has no tests", file=sys.stderr)
        return EXIT_NO_RESULT
    if args.known_failures:
        os.environ["MHA_CI_KNOWN_FAILURES"] = str(out_path(args.known_failures).resolve())
    if args.visible_devices_env:
        os.environ["MHA_CI_VISIBLE_DEVICES_ENV"] = args.visible_devices_env
        gpus = _gpus_given(args.visible_devices_env)
        if gpus and args.workers > gpus:
            # One GPU per worker: a runner with fewer GPUs than archs.yaml's `workers` runs fewer workers.
            print(f"mha-ci: {gpus} GPU(s) here, so {gpus} xdist worker(s) instead of {args.workers}", file=sys.stderr)
            args.workers = gpus
        report["workers"] = args.workers
    if args.workers > 1 and versions.get("pytest-xdist") is None:
        # Without it pytest refuses `-n` as a usage error, which would read as a failed shard;
        # under `--pins record` no pin check caught the missing package first.
        raise EnvironmentProblem(f"{args.workers} workers need pytest-xdist, which this environment does not have "
                                 "(install the toolchain's pytest-xdist pin)")
    pytest_args = ["-q", "-rfEX", "-p", "no:cacheprovider", f"--junitxml={junit}", "-o", "junit_family=xunit2",
                   "-p", "mha_ci.payloads.known_failures", "-p", "mha_ci.payloads.gpu_per_worker"]
    if args.workers > 1:
        pytest_args += ["-n", str(args.workers), "--dist", "load"]
    else:
        pytest_args += ["-p", "no:xdist"]
    recorder = _Recorder()
    started = time.monotonic()
    code = int(pytest.main(pytest_args + tests, plugins=[recorder]))
    counts: dict[str, int] = {}
    for outcome in recorder.outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    report.update(pytest_exit=code, outcomes=recorder.outcomes, counts=counts,
                  durations={k: round(v, 4) for k, v in recorder.durations.items()},
                  wall_s=round(time.monotonic() - started, 3))
    missing = sorted(set(tests) - set(recorder.outcomes))
    if missing:
        report["not_run"] = missing
    _write_json(out_path(args.report), report)
    if not junit.is_file():
        print("mha-ci: pytest wrote no JUnit XML", file=sys.stderr)
        return EXIT_NO_RESULT
    if code == 0:
        return EXIT_OK
    if code == 1:
        return EXIT_GATE_FAILED
    print(f"mha-ci: pytest ended with exit {code} (not a plain test failure: nothing or not all ran)", file=sys.stderr)
    return EXIT_NO_RESULT


def _write_json(path: Path, data: dict) -> None:
    # Whole or not at all: a report cut short by a full disk would be read as this shard's result.
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_ci.payloads.correctness")
    sub = parser.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--tests-dir", default="tests/mha")
    c.add_argument("--out", required=True)
    c.set_defaults(fn=collect)
    r = sub.add_parser("run")
    r.add_argument("--tests", required=True, help="file of node ids, one a line")
    r.add_argument("--junit", required=True)
    r.add_argument("--report", required=True)
    r.add_argument("--known-failures", help="JSON list of {test, reason, arch, toolchain}")
    r.add_argument("--workers", type=int, default=1)
    r.add_argument("--visible-devices-env", help="CUDA_VISIBLE_DEVICES | HIP_VISIBLE_DEVICES")
    r.set_defaults(fn=run)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except EnvironmentProblem as exc:      # a storage failure under a write (files.write_atomic)
        print(f"mha-ci: environment error: {exc}; no result", file=sys.stderr, flush=True)
        return EXIT_ENVIRONMENT


if __name__ == "__main__":
    raise SystemExit(main())
