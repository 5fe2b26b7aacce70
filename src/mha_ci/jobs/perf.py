"""Job kind perf (perf-<arch>-<toolchain>): measure the workload shapes in the job's toolchain
and gate them against the stored baseline, or, with `--perf-against` (RunOptions.perf_against),
against a base kernel measured on the same GPU in the same run.

Measuring is mha_ci.perf.measure (shared with `mha-ci perf measure`); the gate is
mha_ci.perf.compare; the reports (compare.{json,md,txt,png,html}) go next to the measurement.
With `--gate-from` (RunOptions.gate_from) the gate settings, the shapes and the baseline are the
base checkout's, and the verdict names what this checkout changes there (mha_ci.perf.gate_source).
"""
from __future__ import annotations

import time
from pathlib import Path

from mha_ci.baselines import accuracy_baseline, perf_baseline
from mha_ci.errors import ExitCode
from mha_ci.git import commit_or_none
from mha_ci.jobs import JobResult
from mha_ci.jobs.context import JobContext
from mha_ci.model.types import Job
from mha_ci.perf import accuracy, report
from mha_ci.perf.compare import compare
from mha_ci.perf.document import load_perf
from mha_ci.perf.gate_source import changes
from mha_ci.cache import cache_root
from mha_ci.errors import EnvironmentProblem, MhaCiError
from mha_ci.executors import make_executor
from mha_ci.perf.base_checkout import resolve_base, unchanged_host
from mha_ci.perf.measure import PayloadInputs, measure_against, measure_repeated, write_inputs
from mha_ci.perf.request import PerfRequest, perf_request


def run_job(job: Job, ctx: JobContext) -> JobResult:
    """perf-<arch>-<toolchain>: measure (the run options' subset, each measurement repeated
    `perf_repeat` times) and gate against perf_baselines/<arch>/<toolchain>.json."""
    started = time.monotonic()
    subset, repeat, source = ctx.options.perf_subset, ctx.options.perf_repeat, ctx.options.gate_from
    pipeline = source.applied_to(ctx.pipeline) if source else ctx.pipeline
    request = perf_request(pipeline, arch=job.arch, toolchains=(job.toolchain,), subset=subset, repeat=repeat,
                           out_dir=ctx.out_dir, executor=ctx.executor)
    rel = f"jobs/{job.id}"
    inputs = write_inputs(request, rel)
    count = inputs.count
    if ctx.options.perf_against is not None:
        return _against(job, ctx, request, inputs, started)
    candidate = measure_repeated(request, inputs, log_prefix=job.id)
    measured = time.monotonic() - started
    result = JobResult(job_id=job.id, kind=job.kind, verdict="fail", exit_code=ExitCode.GATE_FAILED,
                       artifacts=[f"{rel}/perf.json"], timings={"measure": round(measured, 3)},
                       details={"subset": subset, "shapes": count, "repeat": repeat})
    judged_by = _judged_by(job, ctx, result)
    relative = perf_baseline(job.arch, job.toolchain)
    base_file = (source.root if source else Path(pipeline.root)) / relative
    if not base_file.is_file():
        where = f" in the base checkout {source.root}" if source else ""
        result.message = (f"no baseline {relative}{where}: nothing to gate against "
                          f"(the nightly refresh, or `mha-ci perf refresh`, stores one)") + judged_by
        return result
    # The numbers are judged against the stored accuracy baseline, folded into the perf baseline
    # (mha_ci.perf.accuracy); without one, a candidate with numerics reads as unmeasured: red.
    accuracy_file = (source.root if source else Path(pipeline.root)) / accuracy_baseline(job.arch, job.toolchain)
    stored = load_perf(accuracy_file) if accuracy_file.is_file() else None
    if stored is None and any(isinstance(r.get("numerics"), dict) for r in candidate["results"]):
        result.details["accuracy_baseline"] = f"no {accuracy_baseline(job.arch, job.toolchain)}"
    comparison = compare(accuracy.with_accuracy(load_perf(base_file), stored), candidate, request.gate)
    return _judged(result, comparison, candidate, job, ctx, rel, judged_by)


def _judged(result: JobResult, comparison, candidate: dict, job: Job, ctx: JobContext, rel: str,
            judged_by: str) -> JobResult:
    """The job's verdict from a comparison: its reports, details and one-line message."""
    out_dir = ctx.out_dir
    job_dir = Path(out_dir) / rel
    paths = report.write_all(comparison, job_dir)
    result.artifacts += [str(p.relative_to(out_dir)) for p in paths.values()]
    prov = candidate["provenance"]
    result.details.update(summary=comparison.summary, refused=comparison.refused, notes=list(comparison.notes),
                          stalls=len(comparison.stalled), pins_checked=bool(prov.get("pins_checked")),
                          pin_mismatches=list(prov.get("pin_mismatches") or []),
                          regressions=[v.key for v in comparison.shapes if v.status == "regression"][:50],
                          broken=[{"key": v.key, "reason": v.reason} for v in comparison.broken],
                          verdict=report.verdict_details(comparison, job.arch, job.toolchain,
                                                         str(paths["json"].relative_to(out_dir))))
    # An unpinned side still gates (its numbers are real), but the verdict says so in its first words.
    unpinned = "UNPINNED: " if any(n.startswith("UNPINNED") for n in comparison.notes) else ""
    if comparison.gate_failed:
        causes = comparison.failures
        result.message = unpinned + (comparison.refused or (
            f"perf gate failed: {report.tally_line(comparison)}; " + "; ".join(causes[:3])
            + _worst(comparison)
            + (f"; {len(causes) - 3} more" if len(causes) > 3 else ""))) + judged_by
        return result
    result.verdict, result.exit_code = "pass", ExitCode.OK
    result.message = unpinned + report.tally_line(comparison) + judged_by
    return result


def _against(job: Job, ctx: JobContext, request: PerfRequest, inputs: PayloadInputs, started: float) -> JobResult:
    """The same-GPU A/B: the base kernel (RunOptions.perf_against) and the checkout's take turns
    per shape, judged with the --against thresholds, numerics required. The stored baseline is
    compared with the base side only: a note of how far the base has moved from it (another
    machine, another day), never the verdict. A base that cannot be written out, built or measured
    is a red job that says why; it never falls back to the stored baseline."""
    rel = inputs.rel
    job_dir = Path(ctx.out_dir) / rel
    result = JobResult(job_id=job.id, kind=job.kind, verdict="fail", exit_code=ExitCode.GATE_FAILED,
                       artifacts=[f"{rel}/perf-head.json", f"{rel}/perf-base.json"],
                       details={"subset": ctx.options.perf_subset, "shapes": inputs.count, "repeat": 1,
                                "against": ctx.options.perf_against})
    root = Path(ctx.pipeline.root)
    try:
        base_commit = resolve_base(root, str(ctx.options.perf_against), job_dir / "base-checkout")
        base_executor = make_executor(ctx.executor.name, job_dir / "base-checkout", cache=cache_root(root),
                                      pin_mode=ctx.executor.pin_mode)
        docs = measure_against(request, inputs, (base_executor, ctx.executor), (base_commit, commit_or_none(root)))
    except (EnvironmentProblem, MhaCiError) as exc:
        result.exit_code = ExitCode.ENVIRONMENT_ERROR if isinstance(exc, EnvironmentProblem) else ExitCode.GATE_FAILED
        result.message = f"no same-GPU comparison: the base {ctx.options.perf_against} could not be measured: {exc}"
        return result
    result.timings["measure"] = round(time.monotonic() - started, 3)
    result.details["base_commit"] = base_commit
    comparison = compare(docs["base"], docs["head"], request.against_gate,
                         unchanged_host=unchanged_host(job_dir / "base-checkout", root))
    note = _base_against_stored(job, ctx, request, docs["base"])
    result.details["base_vs_stored"] = note
    return _judged(result, comparison, docs["head"], job, ctx, rel,
                   f"; against base {base_commit[:12]} on this GPU; {note['line']}" + _judged_by(job, ctx, result))


def _judged_by(job: Job, ctx: JobContext, result: JobResult) -> str:
    """What a --gate-from run's checkout changes in the settings it is judged by: recorded in the
    result's details, and the text the verdict ends with."""
    source = ctx.options.gate_from
    if not source:
        return ""
    changed = changes(ctx.pipeline, source, job.arch, job.toolchain)
    result.details["gate_from"] = {"root": str(source.root), "changed": changed}
    return f"; this pull request changes {', '.join(changed)}: judged by the base's ({source.root})" if changed else ""


def _base_against_stored(job: Job, ctx: JobContext, request: PerfRequest, base_doc: dict) -> dict:
    """How the base side compares with the stored baseline (a note for the nightly trend and for
    a reader wondering whether the base itself moved); never part of the verdict."""
    source = ctx.options.gate_from
    stored = (source.root if source else Path(request.pipeline.root)) / perf_baseline(job.arch, job.toolchain)
    if not stored.is_file():
        return {"line": f"no stored baseline {perf_baseline(job.arch, job.toolchain)} to compare the base with"}
    try:
        moved = compare(load_perf(stored), accuracy.without_numerics(base_doc), request.gate)
    except MhaCiError as exc:
        return {"line": f"the stored baseline could not be read: {exc}"}
    summary = moved.summary
    line = (f"the base against the stored baseline: {summary['regression']} slower, {summary['improvement']} faster"
            f" of {len(moved.shapes)}" + (f" (refused: {moved.refused})" if moved.refused else ""))
    return {"line": line, "summary": summary, "refused": moved.refused}


def _worst(comparison) -> str:
    """The worst regressed shapes with their deltas, so the one-line message names them."""
    worst = [v for v in report.ordered(comparison.shapes) if v.status == "regression"]
    if not worst:
        return ""
    named = ", ".join(f"{v.key} {v.delta_pct:+.1f} %" for v in worst[:3])
    return f"; worst: {named}" + (f" and {len(worst) - 3} more" if len(worst) > 3 else "")
