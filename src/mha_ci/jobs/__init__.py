"""Job kinds (correctness, perf, checksums, ...) and the result every kind hands back.

A job kind is a function `run_job(job, ctx) -> JobResult`, ctx a jobs.context.JobContext (see
mha_ci.jobs.runner for how kinds are found). This module holds only the result type, so that
job modules of every kind can import it without importing each other.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mha_ci.errors import ExitCode

VERDICTS = ("pass", "fail", "error", "skipped")


@dataclass
class JobResult:
    """What one job concluded, in the words summary.md and results.json use.

    verdict:   "pass" | "fail" (a gate failed) | "error" (the job could not reach a verdict:
               environment problem, crash of the job code) | "skipped" (did not run, with why).
    exit_code: the mha-ci exit code this job alone implies (errors.ExitCode); the run's exit code
               is the worst of its jobs' (see runner.overall_exit_code).
    artifacts: paths relative to the run's out folder (e.g. "junit/<id>.xml").
    timings:   seconds, e.g. {"total": 41.2, "collect": 5.0, "tests": 35.1}.
    details:   kind-specific, JSON-serialisable (shard balance, versions, counts, ...).
    """

    job_id: str
    kind: str
    verdict: str
    exit_code: int = ExitCode.OK
    message: str = ""
    reason: str = ""                      # why the plan put it there
    artifacts: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {self.verdict!r}")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["exit_code"] = int(self.exit_code)
        return data
