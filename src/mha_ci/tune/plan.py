"""The CPU phase: candidates per bucket, pruned by guards, then by the ahead-of-time compile and
the resource gate; the result is OUT/plan.json (what `--dry-run` prints and the GPU phase reads)."""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

from mha_ci.checksums.candidates import compile_candidates
from mha_ci.errors import ConfigError
from mha.config import NESTED_KEYS
from mha_ci.tune import outdir, prune, rules, space, targets


def triton_pin(toolchain) -> str | None:
    return toolchain.pins.get("triton") or None


def build(root: Path, pipeline, arch_name: str, toolchain_name: str, pass_: str, chosen: list,
          executor, out: Path, jobs: int | None = None, report_path: str | None = None) -> dict:
    """Enumerate, prune and write OUT/plan.json; returns the plan."""
    if arch_name not in pipeline.archs or pipeline.archs[arch_name].compile_target is None:
        known = [n for n, a in pipeline.archs.items() if a.compile_target is not None]
        raise ConfigError(f"arch {arch_name!r} has no compile target; known: {', '.join(known)}", key="--arch")
    if toolchain_name not in pipeline.toolchains:
        raise ConfigError(f"unknown toolchain {toolchain_name!r}; known: {', '.join(pipeline.toolchains)}",
                          key="--toolchain")
    arch = pipeline.archs[arch_name]
    toolchain = pipeline.toolchains[toolchain_name]
    started = time.monotonic()
    config = rules.load_config(root, arch_name)
    module = rules.guards_module(root)
    guards = config.get("guards", [])
    version = triton_pin(toolchain)
    buckets, items = [], []
    chosen = [targets.own_config_shapes(t, config[pass_][t.bucket], arch_name, version) for t in chosen]
    for target in chosen:
        current = own_config(config[pass_][target.bucket])
        cands = space.candidates(arch.vendor, pass_, current)
        decisions = prune.by_guards(cands, module, guards, pass_, target.bucket, version)
        problem = targets.compile_problem(target, pass_)
        for d in decisions:
            if d.survives or d.candidate.id == space.CURRENT:
                items.append({"key": f"{target.bucket}/{d.candidate.id}", "arch": arch_name, "pass": pass_,
                              "problem": problem, "config": d.candidate.cfg})
        buckets.append((target, decisions, problem))
    compiled = compile_candidates(root, toolchain, arch, pipeline, items, executor, out, jobs)
    plan_buckets = []
    for target, decisions, problem in buckets:
        mine = {k.split("/", 1)[1]: v for k, v in compiled.get("results", {}).items()
                if k.split("/", 1)[0] == target.bucket}
        prune.by_resources(decisions, mine, arch.limits)
        plan_buckets.append({"bucket": target.bucket, "pass": pass_, "compile_problem": problem,
                             "current": own_config(config[pass_][target.bucket]),
                             # with its `unmasked` and `gluon` configs: verify leaves out their shapes too
                             "bucket_config": config[pass_][target.bucket],
                             "summary": prune.summary(decisions),
                             "shapes": target.shapes, "regressed": target.regressed,
                             "report_rows": target.report_rows,
                             "candidates": [d.to_json() for d in decisions]})
    plan = {"schema": outdir.PLAN_SCHEMA, "arch": arch_name, "toolchain": toolchain_name, "pass": pass_,
            "triton": compiled.get("triton") or version, "from_report": report_path,
            "limits": {"shared_bytes": arch.limits.shared_bytes, "registers": arch.limits.registers}
            if arch.limits else None,
            "config_sha256": hashlib.sha256(rules.config_file(root, arch_name).read_bytes()).hexdigest(),
            "seconds": round(time.monotonic() - started, 1), "buckets": plan_buckets}
    outdir.write_json(Path(out) / "plan.json", plan)
    return plan


def own_config(bucket_cfg: dict) -> dict:
    """The bucket's own config: without its `unmasked`, `gluon` and `ws` ones (targets.own_config_shapes)."""
    return {k: v for k, v in bucket_cfg.items() if k not in NESTED_KEYS}


def render(plan: dict) -> str:
    """The dry-run's text: per bucket the counts, then every candidate with resources and verdict."""
    lines = [f"tune plan: {plan['arch']} {plan['toolchain']} (triton {plan['triton']}), {plan['pass']} pass, "
             f"limits {plan['limits']}; {plan['seconds']} s"]
    for b in plan["buckets"]:
        s = b["summary"]
        pruned = ", ".join(f"{rule} {n}" for rule, n in s["pruned"].items() if n) or "none"
        lines.append(f"\n{b['bucket']}: {s['candidates']} candidates, pruned: {pruned}; {s['remaining']} remain; "
                     f"{len(b['shapes'])} shapes ({len(b['regressed'])} regressed in the report); "
                     f"compiled for {b['compile_problem']}")
        # a replacement guard acts on many candidates alike: said once per bucket
        shared = sorted({n for c in b["candidates"] for n in c["notes"] if " replaces " in n})
        lines += [f"  note (candidates marked *): {n}" for n in _guard_names(shared)]
        width = max((len(c["id"]) for c in b["candidates"]), default=0) + 1
        for c in b["candidates"]:
            res = "; ".join(f"{k} smem {v['shared_bytes']} regs {v['registers']} spills {v['spills']}"
                            for k, v in c["resources"].items()) or "not compiled"
            verdict = f"PRUNED {c['pruned']}: {c['why']}" if c["pruned"] else "keep"
            star = "*" if any(n in shared for n in c["notes"]) else " "
            lines.append(f"  {c['id']:<{width}}{star} {str(c['config']):<64} {res:<44} {verdict}")
            lines += [f"  {'':<{width + 1}} note: {n}" for n in c["notes"] if n not in shared]
    return "\n".join(lines) + "\n"


def _guard_names(notes: list[str]) -> list[str]:
    """One line per replacement guard (the notes differ only in the values replaced)."""
    seen, out = set(), []
    for note in notes:
        name = note.split(" replaces ", 1)[0]
        if name not in seen:
            seen.add(name)
            out.append(f"{name} replaces forbidden values by its fallback where it applies "
                       f"{note.rsplit('where it applies ', 1)[-1]}")
    return out
