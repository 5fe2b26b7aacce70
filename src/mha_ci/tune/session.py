"""The GPU phases of `mha-ci tune`: time, verify, check. Each reads and writes the out folder
(mha_ci.tune.outdir) and stops starting work at the deadline; a later call resumes.

time    per bucket, one payload process times the current config and up to --max-candidates
        survivors on every shape of the bucket, in turns (mha_ci.payloads.tune): the forward
        call for forward buckets, the whole backward step for backward ones;
verify  the chosen config of each changed bucket against the current one, again in one process,
        on every shape of the full workload set of the tuned pass in that bucket (shapes of
        unchanged buckets, and of the other pass, run the same code objects before and after:
        `propose` shows their records unchanged);
check   the correctness job of the arch and toolchain, narrowed to the attention tests, on a
        copy of the checkout whose config file holds the proposal: run by the job layer, through
        the `CorrectnessRun` the command passes in (the domain does not import jobs/).

What is measured and how (arch, toolchain, out folder, executor, gate, method) is one PerfRequest
(mha_ci.perf.request), built by the command.
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

from mha_ci import baselines
from mha_ci.errors import EnvironmentProblem, ExitCode
from mha_ci.executors.base import PayloadRun
from mha_ci.perf.buckets import bucket_of
from mha_ci.perf.compare import GatePolicy
from mha_ci.perf.request import PerfRequest
from mha_ci.tune import outdir, select, targets

# The tests that exercise every bucket's forward and backward kernels on a GPU (the rest of the
# suite checks validation, determinism and very large inputs, which a tile change cannot break
# differently from what these catch).
CHECK_SELECT = ("tests/mha/test_attention.py::*", "tests/mha/test_head_dim_classes.py::*")
CHECK_TREE = ("src", "tests", "pipelines", "containers", baselines.TEST_DURATIONS_DIR, "pyproject.toml")

# (checkout folder, out folder, job ids, --select patterns) -> the run's exit code: the named
# correctness jobs run on that checkout as `mha-ci run --job ... --select ...` runs them.
CorrectnessRun = Callable[[Path, Path, list[str], tuple[str, ...]], int]


def log(message: str) -> None:
    print(f"mha-ci tune: {message}", file=sys.stderr, flush=True)


def _method(request: PerfRequest, seconds_per_shape: float) -> dict:
    data = request.method.to_dict()
    data["max_seconds_per_shape"] = seconds_per_shape
    return data


def _run_time_payload(executor, pipeline, plan: dict, rel: str, out: Path, deadline: float) -> None:
    arch = pipeline.archs[plan["arch"]]
    toolchain = pipeline.toolchains[plan["toolchain"]].on(arch.platform)
    args = ["time", "--plan", f"{rel}/plan.json", "--method", "timing/method.json",
            "--results", f"{rel}/results.jsonl", "--deadline", f"{deadline:.0f}"]
    env = {}
    if arch.compile_target is None:     # the interpreter arch: a CPU run of the same path
        args += ["--device", "cpu"]
        env["TRITON_INTERPRET"] = "1"
    result = executor.run(PayloadRun(module="tune", args=tuple(args), toolchain=toolchain, arch=arch,
                                     out_dir=out, env=env, timeout_s=max(60.0, deadline - time.time() + 600),
                                     log_prefix=f"tune {rel}"))
    if result.exit_code == ExitCode.ENVIRONMENT_ERROR:
        raise EnvironmentProblem(f"tune timing ({rel}): environment problem (no GPU of arch {plan['arch']}, "
                                 "or a pin mismatch); see its log")
    if result.exit_code != 0:
        log(f"{rel}: the timing payload exited {result.exit_code}; its finished shapes are kept")


def timed_candidates(bucket: dict, max_candidates: int) -> dict:
    """The survivors timed (plan order: nearest to the current config first)."""
    chosen = [c for c in bucket["candidates"] if c["id"] != select.CURRENT and not c["pruned"]][:max_candidates]
    return {c["id"]: c["config"] for c in chosen}


def time_buckets(args, request: PerfRequest, plan: dict, deadline: float) -> None:
    out = request.out_dir
    outdir.write_json(out / "timing" / "method.json", _method(request, args.seconds_per_shape))
    for bucket in plan["buckets"]:
        if time.time() >= deadline:
            log(f"budget reached before timing {bucket['bucket']}")
            return
        configs = timed_candidates(bucket, args.max_candidates)
        if not configs or not bucket["shapes"]:
            log(f"{bucket['bucket']}: nothing to time ({len(configs)} candidates, {len(bucket['shapes'])} shapes)")
            continue
        rel = f"timing/{bucket['bucket']}"
        outdir.write_json(out / rel / "plan.json", {"arch": plan["arch"], "shapes": bucket["shapes"],
                                                    "configs": {bucket["bucket"]: configs}})
        log(f"{bucket['bucket']}: timing {len(configs)} candidates + current on {len(bucket['shapes'])} shapes")
        _run_time_payload(request.executor, request.pipeline, plan, rel, out, deadline)


def choose(gate: GatePolicy, out: Path, plan: dict, max_candidates: int) -> dict:
    """Per bucket: the ranked scores and the choice; written to OUT/choices.json."""
    floor = gate.floor_pct
    result = {}
    for bucket in plan["buckets"]:
        rows = list(outdir.latest_rows(out / "timing" / bucket["bucket"] / "results.jsonl").values())
        ids = list(timed_candidates(bucket, max_candidates))
        measured = len(rows)
        ranked = select.scores(rows, ids, floor, frozenset(bucket.get("regressed") or [])) if rows else []
        pick = select.best(ranked) if measured == len(bucket["shapes"]) else None
        why = ("" if pick else "no candidate beat the current config on every shape" if measured == len(bucket["shapes"])
               else f"only {measured} of {len(bucket['shapes'])} shapes measured: run again with the same --out")
        result[bucket["bucket"]] = {
            "measured": measured, "shapes": len(bucket["shapes"]), "ranking": [s.to_json() for s in ranked],
            "choice": pick.id if pick else None, "why": why,
            "config": next((c["config"] for c in bucket["candidates"] if pick and c["id"] == pick.id), None)}
    outdir.write_json(out / "choices.json", result)
    return result


def verify(request: PerfRequest, plan: dict, choices: dict, deadline: float) -> bool:
    """Time current vs chosen on the full set's shapes of the changed buckets that run the
    bucket's own config (targets.own_config_shapes: a proposal does not change the shapes its
    `unmasked`, `gluon` or `ws` config takes); True when done."""
    changed = {b: c["config"] for b, c in choices.items() if c["choice"]}
    if not changed:
        return True
    out = request.out_dir
    workloads = request.workloads()
    shapes = [{**w.to_dict(), "bucket": bucket_of(w.shape)} for w in workloads if w.shape.config_pass == plan["pass"]]
    shapes = [s for s in shapes if s["bucket"] in changed]
    for bucket in plan["buckets"]:
        name = bucket["bucket"]
        if name in changed and bucket.get("bucket_config"):      # a plan.json older than bucket_config: all
            target = targets.BucketTarget(name, [s for s in shapes if s["bucket"] == name])
            mine = targets.own_config_shapes(target, bucket["bucket_config"], plan["arch"], plan.get("triton"))
            kept = {s["key"] for s in mine.shapes}
            shapes = [s for s in shapes if s["bucket"] != name or s["key"] in kept]
    outdir.write_json(out / "verify" / "plan.json", {"arch": plan["arch"], "shapes": shapes,
                                                     "configs": {b: {"proposed": cfg} for b, cfg in changed.items()}})
    log(f"verify: {len(shapes)} shapes of {', '.join(changed)} (the full set), current vs proposed")
    _run_time_payload(request.executor, request.pipeline, plan, "verify", out, deadline)
    return len(outdir.latest_rows(out / "verify" / "results.jsonl")) == len(shapes)


def check(correctness: CorrectnessRun, root: Path, out: Path, plan: dict, choices: dict) -> int | None:
    """The correctness job on a copy of the checkout holding the proposed config; its exit code."""
    changed = {b: c["config"] for b, c in choices.items() if c["choice"]}
    if not changed:
        return None
    tree = out / "check" / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    for rel in CHECK_TREE:
        src = Path(root) / rel
        if src.is_dir():
            shutil.copytree(src, tree / rel, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif src.is_file():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / rel)
    config_path = tree / "src" / "mha" / "configs" / f"{plan['arch']}-MHA-DEFAULT.json"
    config_path.write_text(proposed_config_text(config_path.read_text(), plan["pass"], changed))
    shards = [f"correctness-{plan['arch']}-{plan['toolchain']}-{i}of4" for i in range(1, 5)]
    log(f"check: {', '.join(shards)} on {tree}, --select {' '.join(CHECK_SELECT)}")
    code = correctness(tree, out / "check" / "run", shards, CHECK_SELECT)
    outdir.write_json(out / "check" / "verdict.json", {"exit_code": code, "select": list(CHECK_SELECT),
                                                       "jobs": shards, "configs": changed})
    return code


def proposed_config_text(text: str, pass_: str, changed: dict) -> str:
    """The config file with the changed buckets' values replaced, everything else (order, notes,
    guards, formatting of the other buckets) as it was."""
    data = json.loads(text)
    for bucket, cfg in changed.items():
        data[pass_][bucket] = {**data[pass_][bucket], **cfg}
    return json.dumps(data, indent=2) + "\n"


def gpu_phases(args, request: PerfRequest, plan: dict, deadline: float,
               correctness: CorrectnessRun | None = None) -> int:
    """Time, choose, verify and check (the module docstring); `correctness` runs the check
    (None: only with --no-check)."""
    out = request.out_dir
    time_buckets(args, request, plan, deadline)
    choices = choose(request.gate, out, plan, args.max_candidates)
    for bucket, c in choices.items():
        log(f"{bucket}: {c['measured']}/{c['shapes']} shapes measured; choice: "
            f"{c['choice'] or 'keep the current config'} {c['why']}")
    if not any(c["choice"] for c in choices.values()):
        return ExitCode.OK
    if not verify(request, plan, choices, deadline):
        log("verify incomplete (budget): run the same command again with the same --out")
        return ExitCode.OK
    if args.no_check:
        log("correctness check skipped (--no-check); `propose` will say so")
        return ExitCode.OK
    if correctness is None:
        raise ValueError("the correctness check needs a CorrectnessRun")
    code = check(correctness, Path(args.root), out, plan, choices)
    log(f"check: exit {code}; next: mha-ci tune propose --from {out}")
    return ExitCode.OK if code in (None, 0) else ExitCode.GATE_FAILED
