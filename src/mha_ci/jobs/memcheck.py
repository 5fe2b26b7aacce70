"""Job kind memcheck (memcheck-<arch>-<toolchain>-<i>of<N>): every compiled kernel variant of the
arch launched under compute-sanitizer, forward and backward, on problems that end in partial
tiles (mha_ci.payloads.memcheck does the work inside the toolchain).

Tools (TOOLS): memcheck and initcheck, each shown able to fail in the same run by its planted
fault (mha_ci.payloads.memcheck_plant). Not run:
- racecheck: shared-memory hazards between threads of a block. Triton gives no per-thread
  control flow, so no plant can show it able to fail, and it serialises every block: a check
  that cannot be shown to fail is not a gate.
- synccheck: the same, for barriers reached by part of a block: no Triton kernel can plant one
  without risking a hang of the GPU.

Verdict: pass only when every self-test reported its plant, every problem of the shard ran clean
under every tool and every variant of the shard launched. The report names, per failure, the
problem, the kernel the sanitizer saw and its first lines. Known findings are those of
pipelines/known_failures.yaml (with `--gate-from`, the base checkout's, and the verdict names what
the checkout lists otherwise: jobs.context.with_known_failures). Files (relative to the run's out
folder): jobs/<id>/{report.json, logs/<tool>.log, logs/problems.json}, junit/<id>.xml.
"""
from __future__ import annotations

import json
import time

from mha_ci.errors import ConfigError, ExitCode
from mha_ci.files import write_atomic
from mha_ci.executors.base import PayloadRun
from mha_ci.jobs import JobResult
from mha_ci.jobs.context import JobContext, with_known_failures
from mha_ci.model.pipeline import Pipeline
from mha_ci.model.types import Job

TOOLS = ("memcheck", "initcheck")
FAILURES_SHOWN = 10


def run_job(job: Job, ctx: JobContext) -> JobResult:
    return with_known_failures(_run, job, ctx)


def _run(job: Job, ctx: JobContext, pipeline: Pipeline) -> JobResult:
    """The shard with `pipeline`'s known findings (the base's with --gate-from)."""
    started = time.monotonic()
    out_dir = ctx.out_dir
    arch = pipeline.archs[job.arch]
    if arch.compile_target is None:
        raise ConfigError(f"memcheck needs a GPU arch with a compile target; {arch.name} has none")
    toolchain = pipeline.toolchains[job.toolchain].on(arch.platform)
    index, count = job.shard or 1, job.shards or 1
    rel = f"jobs/{job.id}"
    (out_dir / rel).mkdir(parents=True, exist_ok=True)
    backend, target_arch, warp = arch.compile_target
    report_rel, junit_rel, known_rel = f"{rel}/report.json", f"junit/{job.id}.xml", f"{rel}/known_failures.json"
    known = [{"test": k.test, "reason": k.reason} for k in pipeline.known_failures_for(arch.name, toolchain.name)]
    write_atomic(out_dir / known_rel, json.dumps(known, indent=2) + "\n")
    for stale in (out_dir / report_rel, out_dir / junit_rel):
        stale.unlink(missing_ok=True)
    args = ("run", "--target", f"{arch.name}={backend}:{target_arch}:{warp}", "--shard", str(index),
            "--shards", str(count), "--tools", ",".join(TOOLS), "--report", report_rel, "--junit", junit_rel,
            "--logs", f"{rel}/logs", "--known-failures", known_rel, "--timeout", str(ctx.options.job_timeout_s))
    ran = ctx.executor.run(PayloadRun(module="memcheck", args=args, toolchain=toolchain, arch=arch, out_dir=out_dir,
                                      timeout_s=ctx.options.job_timeout_s, log_prefix=job.id))
    result = JobResult(job_id=job.id, kind=job.kind, verdict="fail", exit_code=ExitCode.GATE_FAILED,
                       details={"executor": ran.provenance})
    report_path = out_dir / report_rel
    artifacts = [p for p in (report_rel, junit_rel, f"{rel}/logs") if (out_dir / p).exists()]
    result.artifacts = artifacts
    result.timings["payload"] = round(time.monotonic() - started, 3)
    if ran.timed_out:
        result.message = f"the memcheck payload timed out after {ctx.options.job_timeout_s:.0f} s: no verdict"
        return result
    if not report_path.is_file():
        result.message = (f"the memcheck payload wrote no report (exit {ran.exit_code}"
                          f"{': ' + ran.error if ran.error else ''}): nothing was judged")
        return result
    report = json.loads(report_path.read_text())
    judge(result, report, ran.exit_code)
    return result


def judge(result: JobResult, report: dict, exit_code: int) -> None:
    """Verdict, message and details from the shard's report; green needs everything seen and clean."""
    failures = failures_of(report)
    missed = [t for t in report["self_tests"] if t["status"] != "seen"]
    result.details.update(
        tools=report["tools"], sanitizer=report["sanitizer"], versions=report.get("versions", {}),
        variants_listed=report["variants_listed"], variants_in_shard=report["variants_in_shard"],
        variants_covered=report["variants_covered"], problems=report["problems"],
        self_tests={t["tool"]: t["status"] for t in report["self_tests"]},
        seconds_per_tool=_seconds_per_tool(report), failures=failures[:FAILURES_SHOWN],
        failed_tests=[f["test"] for f in failures[:FAILURES_SHOWN]])
    if report.get("pin_mismatches"):
        result.details["pin_mismatches"] = report["pin_mismatches"]
    covered = f"{report['variants_covered']} of {report['variants_in_shard']} variants " \
              f"({report['variants_listed']} listed for {report['arch']})"
    if missed:
        result.message = "; ".join(t["why"] for t in missed)
    elif failures:
        first = failures[0]
        result.message = f"{len(failures)} finding(s); first: {first['text']}"
    elif report["uncovered"]:
        result.message = f"{len(report['uncovered'])} variants never launched (first: {report['uncovered'][0]})"
    elif report["problems"] == 0:
        result.message = "the shard had no problems: nothing was judged"
    elif exit_code != 0:
        result.message = f"the memcheck payload exited {exit_code} with a clean report: no verdict"
    else:
        result.verdict, result.exit_code = "pass", ExitCode.OK
        known = sum(1 for r in report["results"] if r["status"] == "known")
        result.message = (f"{report['problems']} problems clean under {', '.join(report['tools'])}"
                          f"{f' but for {known} known finding(s)' if known else ''}; {covered}; "
                          "every self-test reported its plant")
        result.details["known_findings"] = known
        return
    result.message += f" [{covered}]"


def failures_of(report: dict) -> list[dict]:
    out = []
    for r in report["results"]:
        if r["status"] in ("clean", "known"):
            continue
        first = r["reports"][0] if r.get("reports") else None
        where = f" in {first['kernel']}" if first and first.get("kernel") else ""
        what = first["headline"] if first else (r.get("why") or r["status"])
        out.append({"test": f"{r['tool']}::{r['label']}", "status": r["status"], "kernel": first and first.get("kernel"),
                    "lines": first["lines"] if first else r.get("tail", []),
                    "text": f"{r['tool']} {r['status']}{where} while {r['label']} ran: {what}"})
    return out


def _seconds_per_tool(report: dict) -> dict[str, float]:
    totals: dict[str, float] = {}
    for r in report["results"]:
        totals[r["tool"]] = round(totals.get(r["tool"], 0.0) + float(r.get("seconds") or 0.0), 2)
    return totals
