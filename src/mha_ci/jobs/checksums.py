"""Job kind checksums (checksums-<arch>-<toolchain>-<k>of<n>): compile every kernel variant ahead
of time for every arch with a compile target and verify the code objects against the stored
checksums (mha_ci.checksums.verify, shared with `mha-ci checksums verify`).

Sharded (jobs.yaml `shards`): shard k of n compiles and compares slice k of n of the variants
(mha_ci.checksums.slices), so a cold compile spreads over n runners; the slices split every key
exactly, and the merge gate needs every shard's pass. The determinism sample is split too: each
shard compiles its share of DETERMINISM_SAMPLE again (at least one), about as many in all as one
unsharded job.
"""
from __future__ import annotations

import math
from pathlib import Path

from mha_ci.checksums.slices import Slice
from mha_ci.checksums.verify import DETERMINISM_SAMPLE, compile_archs, compute, judge, write_verdict
from mha_ci.errors import EnvironmentProblem, ExitCode
from mha_ci.jobs import JobResult
from mha_ci.jobs.context import JobContext
from mha_ci.model.types import Job


def run_job(job: Job, ctx: JobContext) -> JobResult:
    """Runner entry for kind "checksums": verify one toolchain on every arch with a compile target."""
    pipeline, executor, out_dir = ctx.pipeline, ctx.executor, ctx.out_dir
    toolchain = pipeline.toolchains.get(job.toolchain)
    if toolchain is None:
        raise EnvironmentProblem(f"toolchain {job.toolchain} is not in the pipeline")
    archs = compile_archs(pipeline.archs.values())
    slice_ = Slice(job.shard, job.shards) if job.shard is not None and job.shards is not None else None
    sample = max(1, math.ceil(DETERMINISM_SAMPLE / slice_.count)) if slice_ else DETERMINISM_SAMPLE
    computed = compute(pipeline.root, toolchain, archs, executor, Path(out_dir), job_arch=pipeline.archs.get(job.arch),
                       determinism_sample=sample, slice_=slice_)
    verdict = judge(pipeline.root, computed, archs, slice_=slice_)
    artifacts = [computed.path, *write_verdict(out_dir, verdict, slice_)]
    print(verdict.table, end="")
    failures = [d for d in verdict.differences if d.is_failure]
    if verdict.failed:
        parts = []
        if verdict.missing_stored:
            parts.append("no stored checksums")
        if failures:
            parts.append(f"{len(failures)} variants differ")
        if verdict.over_limits:
            first = verdict.over_limits[0]
            parts.append(f"{len(verdict.over_limits)} code objects over their arch's limits "
                         f"(first: {first.key} {first.figure} {first.value} > {first.limit})")
        if verdict.spills_grown:
            parts.append(f"{len(verdict.spills_grown)} variants spill more than recorded")
        if verdict.compile_errors:
            parts.append(f"{len(verdict.compile_errors)} compile errors")
        if verdict.nondeterministic:
            parts.append("nondeterministic compile")
        if verdict.cache_mismatches:
            parts.append(f"{len(verdict.cache_mismatches)} compile cache entries disagree with fresh compiles "
                         "(forged or corrupt cache)")
        message, result_verdict, code = "; ".join(parts), "fail", ExitCode.GATE_FAILED
    else:
        of_slice = f" (slice {slice_} of the variants)" if slice_ else ""
        message, result_verdict, code = (f"{len(computed.codeobjs.records)} code objects match{of_slice}", "pass",
                                         ExitCode.OK)
    return JobResult(job_id=job.id, kind=job.kind, verdict=result_verdict, exit_code=code, message=message,
                     artifacts=[str(Path(p).relative_to(out_dir)) for p in artifacts],
                     timings={"payload": computed.wall_s},
                     details={"variants": len(computed.codeobjs.records), "slice": str(slice_) if slice_ else None,
                              "stats": computed.codeobjs.stats,
                              "verdict": verdict.to_json()})
