"""What a job runs with: `JobContext` (the pipeline, the executor, the run's output folder and
the run's options), handed to every job kind as `run_job(job, ctx)`.

`RunOptions` is the one place a run's settings travel. Only the command line (mha_ci.commands)
fills it, from its flags and the `MHA_CI_*` variables it documents; job kinds read the options
and never the environment, so what a job does is decided where the run starts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mha_ci.executors.base import Executor
from mha_ci.jobs import JobResult
from mha_ci.model.pipeline import Pipeline
from mha_ci.model.types import Job
from mha_ci.perf.document import SUBSETS
from mha_ci.perf.gate_source import GateSource, known_failures_verdict

DEFAULT_JOB_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class RunOptions:
    # `mha-ci run --select GLOB`: correctness jobs run only the collected tests whose node id
    # matches one of these fnmatch patterns; a narrowed local check, so the verdict names them.
    select: tuple[str, ...] = ()
    perf_subset: str = "full"                   # the perf job's shapes: "pr" or "full"
    perf_repeat: int = 1                        # perf job: payload processes per measurement
    job_timeout_s: float = DEFAULT_JOB_TIMEOUT_S    # a correctness payload step
    pins: str = "enforce"                       # "enforce" | "record" (host executor only)
    # `mha-ci run --gate-from DIR`: perf jobs are judged by DIR's perf settings and baselines,
    # correctness and memcheck jobs by DIR's known failures.
    gate_from: GateSource | None = None
    # `mha-ci run --perf-against REF|DIR`: perf jobs measure this base kernel (a git ref of the
    # checkout, or a folder holding a checkout) and the checkout's taking turns on one GPU, and
    # gate the checkout against it (mha_ci.perf.base_checkout); the stored baseline becomes a note.
    perf_against: str | None = None

    def __post_init__(self) -> None:
        if self.perf_subset not in SUBSETS:
            raise ValueError(f"perf_subset must be one of {SUBSETS}, not {self.perf_subset!r}")
        if self.perf_repeat < 1:
            raise ValueError("perf_repeat must be at least 1")


@dataclass(frozen=True)
class JobContext:
    pipeline: Pipeline
    executor: Executor
    out_dir: Path                               # the run's output folder (`mha-ci run --out`)
    options: RunOptions = field(default_factory=RunOptions)


def with_known_failures(run: Callable[[Job, JobContext, Pipeline], JobResult], job: Job, ctx: JobContext) -> JobResult:
    """`run(job, ctx, pipeline)` of a job kind that applies known failures, `pipeline` holding the
    ones it is judged by: the checkout's, or with --gate-from the base's, and then the verdict
    names what the checkout lists otherwise for the job's arch and toolchain (its own take effect
    once merged)."""
    source = ctx.options.gate_from
    if source is None:
        return run(job, ctx, ctx.pipeline)
    result = run(job, ctx, source.applied_to(ctx.pipeline))
    result.details["gate_from"], note = known_failures_verdict(ctx.pipeline, source, job.arch, job.toolchain)
    result.message += note
    return result
