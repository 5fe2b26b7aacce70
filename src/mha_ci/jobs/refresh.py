"""Job kind refresh (refresh-<arch>-<toolchain>, nightly): re-measure the full set and propose
it as the new baseline (mha_ci.refresh), on a branch for a pull request.
"""
from __future__ import annotations

from pathlib import Path

from mha_ci.errors import ExitCode
from mha_ci.jobs import JobResult
from mha_ci.jobs.context import JobContext
from mha_ci.model.types import Job
from mha_ci.perf.request import perf_request
from mha_ci.refresh.core import refresh
from mha_ci.refresh.measurers import measured_here


def run_job(job: Job, ctx: JobContext) -> JobResult:
    """refresh-<arch>-<toolchain>: measure the full set and hand it to mha_ci.refresh, which
    checks it (noise, stalls, provenance against the pins), measures again the shapes it caught
    disturbed, and commits the new baseline on a branch for a pull request, or refuses with every
    reason (it never overwrites silently). A working tree that is not HEAD's is refused before
    anything is measured (exit 2). Under `--pins record` the baseline is marked unpinned."""
    executor, out_dir = ctx.executor, ctx.out_dir
    rel = f"jobs/{job.id}"
    request = perf_request(ctx.pipeline, arch=job.arch, toolchains=(job.toolchain,), subset="full",
                           out_dir=out_dir, executor=executor)
    measure_fn, remeasure_fn = measured_here(request, rel)
    result = refresh(request, measure_fn, remeasure_fn=remeasure_fn, out_dir=Path(out_dir) / rel / "refresh",
                     allow_unpinned=executor.pin_mode == "record")
    return JobResult(job_id=job.id, kind=job.kind, verdict="pass", exit_code=ExitCode.OK,
                     artifacts=[f"{rel}/{job.toolchain}/perf.json"],
                     message=f"{result.status}" + (f" on {result.branch}" if result.branch else ""),
                     details=result.to_json())
