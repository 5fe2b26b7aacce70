"""`mha-ci tune propose --from DIR` (CPU): the out folder of a tune run -> a branch, like the
nightly refresh's: the config change, the code-object records recomputed for it (every
toolchain: the config file is shared). The before/after compare report, proposal.json and a
README stay under OUT/proposal: the branch carries no report, and a record under docs/records/ is
made by hand when someone wants one (docs/records/README.md).

The before/after documents come from the verify phase (current and proposed timed in turns in
one process, every full-set shape of the changed buckets); the report is the perf gate's
(mha_ci.perf.compare / report). A proposal is refused when the verify phase is incomplete or
shows a regression; one whose correctness check did not run or failed says so in its
description and proposal.json, and is refused when the check failed.
"""
from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from pathlib import Path

from mha_ci.cache import cache_root
from mha_ci.checksums import verify as checksums_job
from mha_ci.errors import ConfigError, ExitCode, MhaCiError
from mha_ci.executors import make_executor
from mha_ci.files import write_atomic
from mha_ci.git import LONG_TIMEOUT_S, commit_on_new_branch, head_commit, remove_worktree
from mha_ci.git import run as run_git
from mha_ci.model.loader import load_pipeline
from mha_ci.model.pipeline import Pipeline
from mha_ci.perf import report
from mha_ci.perf.compare import compare
from mha_ci.perf.config import gate_policy
from mha_ci.tune import outdir, session

class ProposalRefused(MhaCiError):
    exit_code = ExitCode.GATE_FAILED


def perf_documents(out: Path, plan: dict) -> tuple[dict, dict]:
    """(before, after) mha-ci.perf/1 documents from OUT/verify."""
    rows = outdir.latest_rows(out / "verify" / "results.jsonl")
    meta = outdir.read_json(out / "verify" / "results.provenance.json") or {}
    method = outdir.read_json(out / "timing" / "method.json") or {}
    shapes = {s["key"]: s for s in (outdir.read_json(out / "verify" / "plan.json") or {}).get("shapes", [])}
    device = meta.get("device", {})
    versions = (meta.get("pins") or {}).get("versions", {})
    docs = []
    for side, label in (("current", "current config"), ("proposed", "proposed config")):
        results = []
        for key, row in sorted(rows.items()):
            entry = row["configs"].get(side) or {}
            shape = shapes.get(key, {})
            results.append({"key": key, "shape": shape.get("shape"), "bucket": row["bucket"],
                            "tags": shape.get("tags", []), "stats": entry.get("stats"),
                            "error": entry.get("error") if not entry.get("stats") else None})
        provenance = {"gpu": device.get("gpu"), "arch": device.get("arch"), "toolchain": plan["toolchain"],
                      "versions": versions, "kernel": "mha", "executor": "tune", "config": label,
                      "pins_checked": (meta.get("pins") or {}).get("pins_checked", False),
                      "pin_mismatches": (meta.get("pins") or {}).get("pin_mismatches", [])}
        docs.append({"schema": "mha-ci.perf/1", "provenance": provenance, "method": method,
                     "selection": {"subset": "custom", "count": len(results)}, "results": results})
    return docs[0], docs[1]


def recovered(plan: dict, rows: dict) -> list[dict]:
    """The report's regressed shapes that the proposal brings back within the report's threshold:
    its top-of-tree time scaled by this run's proposed/current ratio, against its baseline."""
    found = []
    for bucket in plan["buckets"]:
        for key, report_row in bucket.get("report_rows", {}).items():
            row = rows.get(key)
            cur = ((row or {}).get("configs", {}).get("current") or {}).get("stats")
            new = ((row or {}).get("configs", {}).get("proposed") or {}).get("stats")
            if not cur or not new:
                continue
            estimate = report_row["candidate_us"] * new["trimmed_mean_us"] / cur["trimmed_mean_us"]
            delta = 100 * (estimate / report_row["baseline_us"] - 1)
            found.append({"key": key, "report_delta_pct": report_row["delta_pct"], "estimated_delta_pct": round(delta, 2),
                          "recovered": delta <= report_row["threshold_pct"]})
    return found


def records_for(root: Path, plan: dict, changed: dict, scratch: Path, executor_name: str) -> dict[str, bytes]:
    """perf_baselines/code_objects/<toolchain>.json of every toolchain, with the changed buckets'
    records recomputed from a detached worktree holding the new config."""
    run_git(root, "worktree", "add", "--quiet", "--detach", str(scratch), "HEAD", check=True, timeout=LONG_TIMEOUT_S)
    config = scratch / "src" / "mha" / "configs" / f"{plan['arch']}-MHA-DEFAULT.json"
    write_atomic(config, session.proposed_config_text(config.read_text(), plan["pass"], changed))
    pipeline = load_pipeline(scratch)
    arch = pipeline.archs[plan["arch"]]
    cpu_arch = next((a for a in pipeline.archs.values() if a.device == "none"), None)
    executor = make_executor(executor_name, scratch, cache=cache_root(root))
    files = {str(config.relative_to(scratch)): config.read_bytes()}
    for toolchain in pipeline.toolchains.values():
        for bucket in changed:
            only = f"{plan['arch']}/{plan['pass']}/{bucket}/"
            computed = checksums_job.compute(scratch, toolchain, [arch], executor, scratch / "out" / "tune-records",
                                             job_arch=cpu_arch, only=only)
            path, _ = checksums_job.update(scratch, computed, [arch], only)
        files[str(path.relative_to(scratch))] = path.read_bytes()
    return files


def propose(pipeline: Pipeline, out: Path, branch: str | None, executor_name: str) -> int:
    root = pipeline.root

    plan, choices = outdir.read_json(out / "plan.json"), outdir.read_json(out / "choices.json")
    if not plan or choices is None:
        raise ConfigError(f"{out} has no plan.json and choices.json: run `mha-ci tune` with --out {out} first",
                          key="--from")
    changed = {b: c["config"] for b, c in choices.items() if c["choice"]}
    if not changed:
        print("mha-ci tune: no bucket has a better candidate; nothing to propose")
        return ExitCode.OK
    verify_plan = outdir.read_json(out / "verify" / "plan.json") or {"shapes": []}
    rows = outdir.latest_rows(out / "verify" / "results.jsonl")
    if len(rows) < len(verify_plan["shapes"]) or not rows:
        raise ProposalRefused(f"verify measured {len(rows)} of {len(verify_plan['shapes'])} shapes: run the GPU "
                              f"phase again with --out {out}")
    before, after = perf_documents(out, plan)
    comparison = compare(before, after, gate_policy(pipeline.perf))
    check = outdir.read_json(out / "check" / "verdict.json")
    if comparison.gate_failed:
        raise ProposalRefused("the proposed config regresses shapes of the full set:\n" + report.text(comparison))
    if check and check["exit_code"] != 0:
        raise ProposalRefused(f"the correctness check failed (exit {check['exit_code']}): see {out / 'check'}")
    date = dt.date.today().isoformat()
    branch = branch or f"tune/{plan['arch']}-{plan['toolchain']}-{date}"
    staged = out / "proposal"
    report.write_all(comparison, staged)
    gains = recovered(plan, rows)
    summary = {"schema": outdir.PROPOSAL_SCHEMA, "arch": plan["arch"], "toolchain": plan["toolchain"],
               "pass": plan["pass"], "changed": changed, "choices": choices,
               "check": check or "not run", "recovered": gains,
               "verify": {"shapes": len(rows), "summary": comparison_summary(comparison)}}
    outdir.write_json(staged / "proposal.json", summary)
    scratch = Path(tempfile.mkdtemp(prefix="mha-ci-tune-")) / "tree"
    try:
        files = records_for(root, plan, changed, scratch, executor_name)
    finally:
        remove_worktree(root, scratch)
        shutil.rmtree(scratch.parent, ignore_errors=True)
    (staged / "README.md").write_text(f"# mha-ci tune: {plan['arch']}, {plan['toolchain']} ({date})\n\n"
                                      f"Made by `mha-ci tune` and `mha-ci tune propose --from {out}` (branch "
                                      f"`{branch}`); compare.md: the current config against the proposed one. "
                                      f"To keep it as a record, copy this folder by hand to docs/records/ as "
                                      f"{date}-tune-{plan['arch']}-{plan['toolchain']}/ (docs/records/README.md).\n")
    message = description(plan, changed, comparison, gains, check)
    commit = commit_on_new_branch(root, branch, head_commit(root), files, message)
    print(message)
    print(f"mha-ci tune: branch {branch} at {commit[:12]} ({len(files)} files); report in {staged} (not committed)")
    return ExitCode.OK


def comparison_summary(comparison) -> dict:
    counts: dict[str, int] = {}
    for v in comparison.shapes:
        counts[v.status] = counts.get(v.status, 0) + 1
    return counts


def description(plan: dict, changed: dict, comparison, gains: list[dict], check: dict | None) -> str:
    names = ", ".join(f"{plan['pass']}.{b}" for b in changed)
    lines = [f"tune {plan['arch']} {plan['toolchain']}: {names}", ""]
    for bucket, cfg in changed.items():
        lines.append(f"- {plan['pass']}.{bucket}: {cfg}")
    lines += ["", f"Full-set shapes of the changed buckets, current vs proposed in one process: "
                  f"{comparison_summary(comparison)} (no regression)."]
    back = [g for g in gains if g["recovered"]]
    if gains:
        lines.append(f"Recovered against the report's baseline: {len(back)} of {len(gains)} regressed shapes:")
        lines += [f"  {g['key']}: {g['report_delta_pct']:+.1f} % -> {g['estimated_delta_pct']:+.1f} %" for g in gains]
    lines.append("Correctness: " + (f"exit {check['exit_code']} on {', '.join(check['select'])}" if check
                                    else "NOT RUN (the GPU phase ran with --no-check or stopped before it)"))
    lines.append("Code-object records recomputed for the changed buckets on every toolchain.")
    return "\n".join(lines) + "\n"
