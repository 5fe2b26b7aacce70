"""Run a list of planned jobs: dispatch each to its kind, collect verdicts, write the reports.

The job-kind contract
--------------------
A job kind is a function

    run_job(job: model.types.Job, ctx: jobs.context.JobContext) -> jobs.JobResult

- `ctx` holds the pipeline, the executor, the run's output folder and the run's options
  (jobs.context.RunOptions: --select, the perf subset and repeats, timeouts, pins). Read
  settings from there, never from the environment: only the command line fills them.
- `ctx.out_dir` is the run's output folder (`mha-ci run --out`). Write your files under
  `out_dir / "jobs" / job.id` (and shared folders such as `junit/` where a format wants
  them); list them, relative to out_dir, in JobResult.artifacts.
- Run toolchain code only through `ctx.executor.run(PayloadRun(...))` with `out_dir=out_dir`, and
  give payload file arguments relative to it ($MHA_CI_OUT inside the payload, see
  mha_ci.payloads), so the job behaves the same under venv, docker and host.
- Return verdict "pass" (exit_code 0) or "fail" (exit_code 1, a gate failed) with a one-line
  message; put numbers in `details` (JSON-serialisable) and seconds in `timings`.
- Raise EnvironmentProblem (exit 3) or ConfigError (exit 2) for problems that are not the
  code's fault; the runner records them as verdict "error" and goes on with the other jobs.
  Any other exception is recorded as "error" with the traceback's last line, exit 1.

Every kind of pipelines/jobs.yaml (model.types.JOB_KINDS, the one list of kinds) has its module
under mha_ci.jobs, mapped in KIND_RUNNERS. The map cannot move into model/, which sits below
jobs/ (each job module imports model); tests/mha_ci/commands/test_run.py holds the two equal.
`register(kind, fn)` puts another function in a kind's place (tests stand in for slow kinds).

Nothing is lost on failure: after every job, out/jobs/<id>/result.json, out/results.json and
out/summary.md are rewritten, so a run killed halfway leaves the results of the jobs it finished.
While jobs are pending, results.json's status is "running" and its exit_code null: a run that
has not finished has no verdict. A run stopped by Ctrl-C or SIGTERM is written as "interrupted"
with exit code 130 / 143 before the interruption goes on up to the CLI.
"""
from __future__ import annotations

import json
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, TextIO

import mha_ci
from mha_ci.errors import ExitCode, MhaCiError, interruption
from mha_ci.files import storage_failure, write_atomic
from mha_ci.git import commit_or_none, output_or_none
from mha_ci.jobs import JobResult
from mha_ci.jobs import checksums as checksums_kind
from mha_ci.jobs import docs as docs_kind
from mha_ci.jobs import memcheck as memcheck_kind
from mha_ci.jobs import perf as perf_kind
from mha_ci.jobs import refresh as refresh_kind
from mha_ci.jobs.context import JobContext
from mha_ci.jobs.correctness import job as correctness_kind
from mha_ci.model.pipeline import Pipeline
from mha_ci.model.types import Job, PlannedJob, SkippedJob
from mha_ci.reports import summary

RESULTS_SCHEMA = "mha-ci.results/1"

JobRunner = Callable[[Job, JobContext], JobResult]

KIND_RUNNERS: dict[str, JobRunner] = {
    "correctness": correctness_kind.run_job,
    "perf": perf_kind.run_job,
    "refresh": refresh_kind.run_job,
    "checksums": checksums_kind.run_job,
    "memcheck": memcheck_kind.run_job,
    "docs": docs_kind.run_job,
}
_REGISTERED: dict[str, JobRunner] = {}


def register(kind: str, fn: JobRunner) -> None:
    _REGISTERED[kind] = fn


def unregister(kind: str) -> None:
    _REGISTERED.pop(kind, None)


def runner_for(kind: str) -> JobRunner:
    """The function that runs jobs of `kind`; NoRunner (exit 1) for a kind mha-ci does not know."""
    fn = _REGISTERED.get(kind) or KIND_RUNNERS.get(kind)
    if fn is None:
        raise NoRunner(f"no runner for job kind '{kind}' (known: {', '.join(sorted(set(KIND_RUNNERS) | set(_REGISTERED)))})")
    return fn


class NoRunner(MhaCiError):
    exit_code = ExitCode.GATE_FAILED


@dataclass(frozen=True)
class NotRun:
    """A planned (or requested) job this machine cannot run, listed in every report with why."""

    id: str
    reason: str
    requested: bool = False        # named with --job: then the run exits 3


DEVICE_WORDS = {"amd-gpu": "AMD GPU (/dev/kfd)", "nvidia-gpu": "NVIDIA GPU (/dev/nvidia0 or nvidia-smi)"}


def split_by_device(pipeline: Pipeline, jobs: list[PlannedJob], devices: frozenset[str], *,
                    requested: bool) -> tuple[list[PlannedJob], list[NotRun]]:
    """(the jobs whose arch's device this machine has, the others as NotRun with why)."""
    runnable, not_run = [], []
    for planned in jobs:
        arch = pipeline.archs[planned.job.arch]
        if arch.device in devices:
            runnable.append(planned)
        else:
            what = DEVICE_WORDS.get(arch.device, arch.device)
            not_run.append(NotRun(planned.job.id, f"needs a {arch.name} device (no {what} on this machine)",
                                  requested=requested))
    return runnable, not_run


@dataclass
class RunReport:
    out_dir: Path
    executor: str
    provenance: dict
    results: list[JobResult] = field(default_factory=list)
    not_run: list[NotRun] = field(default_factory=list)
    skipped: list[SkippedJob] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    interrupted: tuple[str, int] | None = None     # (signal name, exit status)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return self.interrupted[1]
        if not self.results and not self.pending:
            return int(ExitCode.GATE_FAILED)     # no job ran on this machine: nothing vouches for the change
        return overall_exit_code(self.results, self.not_run)

    @property
    def status(self) -> str:
        return "interrupted" if self.interrupted else ("running" if self.pending else "finished")

    def to_json(self) -> dict:
        status = self.status
        return {
            "schema": RESULTS_SCHEMA,
            "status": status,
            "exit_code": None if status == "running" else self.exit_code,
            "provenance": self.provenance,
            "jobs": [r.to_json() for r in self.results],
            "pending": list(self.pending),
            "not_run": [{"id": n.id, "reason": n.reason, "requested": n.requested} for n in self.not_run],
            "skipped": [{"id": s.id, "reason": s.reason} for s in self.skipped],
            **({"interrupted_by": self.interrupted[0]} if self.interrupted else {}),
        }


def overall_exit_code(results: list[JobResult], not_run: Sequence[NotRun] = ()) -> int:
    """Worst first: an environment problem (3) means some verdicts could not be reached at all,
    so it outranks a configuration error (2), which outranks a failed gate (1)."""
    codes = {int(r.exit_code) for r in results}
    if any(n.requested for n in not_run):
        codes.add(int(ExitCode.ENVIRONMENT_ERROR))
    for code in (ExitCode.ENVIRONMENT_ERROR, ExitCode.CONFIG_ERROR, ExitCode.GATE_FAILED):
        if int(code) in codes:
            return int(code)
    return int(ExitCode.OK)


def run_job(planned: PlannedJob, ctx: JobContext) -> JobResult:
    """One job, never raising: every failure becomes a JobResult the reports can show."""
    job = planned.job
    started = time.monotonic()
    try:
        result = runner_for(job.kind)(job, ctx)
    except MhaCiError as exc:
        result = JobResult(job_id=job.id, kind=job.kind, verdict="error", exit_code=int(exc.exit_code), message=str(exc))
    except Exception as exc:  # a bug in a job kind must not lose the other jobs' results
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        result = JobResult(job_id=job.id, kind=job.kind, verdict="error", exit_code=ExitCode.GATE_FAILED,
                           message=f"the {job.kind} job crashed: {last}",
                           details={"traceback": traceback.format_exc()})
        if storage_failure(exc):          # a full disk is the machine's problem, not the code's
            result.exit_code, result.message = ExitCode.ENVIRONMENT_ERROR, f"cannot write: {last}"
    result.reason = result.reason or planned.reason
    result.timings.setdefault("total", round(time.monotonic() - started, 3))
    return result


def run_jobs(jobs: list[PlannedJob], ctx: JobContext, *, not_run: Sequence[NotRun] = (),
             skipped: Sequence[SkippedJob] = (), provenance: dict | None = None,
             stream: TextIO | None = None) -> RunReport:
    stream = stream or sys.stderr
    out_dir, executor = ctx.out_dir, ctx.executor
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "junit").mkdir(exist_ok=True)
    report = RunReport(out_dir=out_dir, executor=executor.name, not_run=list(not_run), skipped=list(skipped),
                       provenance=provenance or run_provenance(ctx.pipeline, executor.name, executor.pin_mode),
                       pending=[p.job.id for p in jobs])
    write_reports(report)
    try:
        _run_in_turn(jobs, ctx, report, stream)
    except KeyboardInterrupt as exc:
        report.interrupted = interruption(exc)
        write_reports(report)
        stream.write(f"mha-ci: interrupted by {report.interrupted[0]}; {len(report.pending)} job(s) without a "
                     "verdict\n")
        raise
    return report


def _run_in_turn(jobs: list[PlannedJob], ctx: JobContext, report: RunReport, stream: TextIO) -> None:
    out_dir = report.out_dir
    for position, planned in enumerate(jobs, start=1):
        stream.write(f"mha-ci: [{position}/{len(jobs)}] {planned.job.id} ({planned.reason})\n")
        stream.flush()
        result = run_job(planned, ctx)
        report.results.append(result)
        report.pending.remove(planned.job.id)
        job_dir = out_dir / "jobs" / result.job_id
        job_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(job_dir / "result.json", json.dumps(result.to_json(), indent=2) + "\n")
        write_reports(report)
        stream.write(f"mha-ci: {result.job_id}: {result.verdict.upper()} in {result.timings.get('total', 0):.1f} s"
                     f"{' - ' + result.message if result.message else ''}\n")
        stream.flush()


def write_reports(report: RunReport) -> None:
    write_atomic(report.out_dir / "results.json", json.dumps(report.to_json(), indent=2) + "\n")
    write_atomic(report.out_dir / "summary.md", summary.render(report.to_json()))


def run_provenance(pipeline: Pipeline, executor: str, pin_mode: str = "enforce") -> dict:
    root = Path(pipeline.root)
    return {
        "executor": executor,
        "pin_mode": pin_mode,
        "mha_ci": mha_ci.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": platform.node(),
        "commit": commit_or_none(root),
        "dirty": bool((output_or_none(root, "status", "--porcelain", "--untracked-files=no") or "").strip()),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "toolchains": {name: {"lock": _relative(tc.lock, root), "pins": {k: tc.pins[k] for k in ("torch", "triton", "numpy") if k in tc.pins}}
                       for name, tc in pipeline.toolchains.items()},
    }


def _relative(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
