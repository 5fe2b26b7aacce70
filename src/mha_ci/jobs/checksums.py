"""Job kind checksums (checksums-<toolchain>): compile every kernel variant ahead of time for
every arch with a compile target and verify the code objects against the stored checksums
(mha_ci.checksums.verify, shared with `mha-ci checksums verify`).
"""
from __future__ import annotations

from pathlib import Path

from mha_ci.checksums.verify import compile_archs, compute, judge, write_verdict
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
    computed = compute(pipeline.root, toolchain, archs, executor, Path(out_dir), job_arch=pipeline.archs.get(job.arch))
    verdict = judge(pipeline.root, computed, archs)
    artifacts = [computed.path, *write_verdict(out_dir, verdict)]
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
        message, result_verdict, code = f"{len(computed.codeobjs.records)} code objects match", "pass", ExitCode.OK
    return JobResult(job_id=job.id, kind=job.kind, verdict=result_verdict, exit_code=code, message=message,
                     artifacts=[str(Path(p).relative_to(out_dir)) for p in artifacts],
                     timings={"payload": computed.wall_s},
                     details={"variants": len(computed.codeobjs.records), "stats": computed.codeobjs.stats,
                              "verdict": verdict.to_json()})
