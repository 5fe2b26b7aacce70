"""Job kind refresh (refresh-<arch>-<toolchain>, nightly): re-measure the full set and propose
it as the new baseline (mha_ci.refresh), on a branch for a pull request.
"""
from __future__ import annotations

from pathlib import Path

from mha_ci.errors import ExitCode
from mha_ci.jobs import JobResult
from mha_ci.jobs.context import JobContext
from mha_ci.model.types import Job
from mha_ci.perf.measure import refresh_measurers
from mha_ci.refresh.core import refresh


def run_job(job: Job, ctx: JobContext) -> JobResult:
    """refresh-<arch>-<toolchain>: measure the full set and hand it to mha_ci.refresh, which
    checks it (noise, stalls, provenance against the pins), measures again the shapes it caught
    disturbed, and commits the new baseline on a branch for a pull request, or refuses with every
    reason (it never overwrites silently). Under `--pins record` the baseline is marked unpinned."""
    pipeline, executor, out_dir = ctx.pipeline, ctx.executor, ctx.out_dir
    rel = f"jobs/{job.id}"
    measure_fn, remeasure_fn = refresh_measurers(executor, pipeline, out_dir, rel)
    result = refresh(pipeline, job.arch, measure_fn, remeasure_fn=remeasure_fn,
                     out_dir=Path(out_dir) / rel / "refresh", toolchains=[job.toolchain],
                     allow_unpinned=executor.pin_mode == "record")
    return JobResult(job_id=job.id, kind=job.kind, verdict="pass", exit_code=ExitCode.OK,
                     artifacts=[f"{rel}/{job.toolchain}/perf.json"],
                     message=f"{result.status}" + (f" on {result.branch}" if result.branch else ""),
                     details=result.to_json())
