"""Tune payload: compile candidate configs ahead of time (CPU), or time them against the current
config on a GPU.

    python -m mha_ci.payloads.tune compile --request compile/request.json --out compile/results.json
        [--cache-dir DIR] [--jobs N] [--lock-sha256 HEX]
    python -m mha_ci.payloads.tune time --plan timing/B/plan.json --method timing/B/method.json
        --results timing/B/results.jsonl [--deadline EPOCH_S] [--device cuda|cpu]

File arguments are relative to $MHA_CI_OUT (mha_ci.payloads). Runs inside a toolchain
environment (stdlib + torch/triton + the kernel package).

compile: each request item is (key, arch, compile target, pass, problem, config override) and
optionally the kernels to compile: spec names that must cover what the config launches, or
EVERY_KERNEL_OF_THE_PASS (mha_ci.checksums.compile). The kernels are compiled as the runtime would
launch them with `config=` (the same spec-to-task path as the checksums job,
mha_ci.checksums.variants.task_for_spec) and their resources read from the code objects. Results go through the checksums compile cache, so a
second `--dry-run` compiles nothing.

time: per shape of the plan, in one process, the current config (config=None: the shipped file,
exactly as users get it) and every candidate of the shape's bucket (config= overrides of the
shape's config section only) are compiled, warmed up, and timed in turns. The timed call is the
perf payload's for the shape's pass (mha_ci.payloads.perf): the forward call for a `fwd` shape,
the whole backward step after one untimed forward for a `bwd` one (`backward_of`). Each rep
times every config once, in an order that reverses every other rep (ABBA), so drift between
reps lands on all sides alike and the candidate/current ratio is taken within one run. Dispatches per rep are sized on the current
config and used for all. Each finished shape is appended as one JSON line to --results at once
(a killed run keeps every finished shape); shapes already in the file with the same configs are
skipped (resume). With --deadline, no shape is started after that time.
Each candidate's output is also compared with the current config's on the same inputs
(`max_abs_diff`; for a backward step, whose gradients have no fixed scale, also `max_rel_diff`:
per gradient, the largest difference over the current config's largest magnitude): a candidate
that computes something else is seen before any correctness job.

Exit: 0 results written, 3 no GPU or a pin mismatch, 4 nothing could be produced.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")   # as the checksums payload: line info leaks paths

from mha_ci.checksums.cache import CompileCache, cache_key, file_digest
from mha_ci.files import tree_digest
from mha_ci.checksums.compile import (EVERY_KERNEL_OF_THE_PASS, CompileResult, CompileTarget,
                                      ToolchainEnvironmentError, compile_all,
                                      prepare_environment)
from mha_ci.checksums.variants import task_for_spec
from mha_ci.files import write_atomic
from mha_ci.payloads import EXIT_ENVIRONMENT, EXIT_OK, out_path, pincheck, run_guarded
from mha_ci.payloads.perf import CudaTimer, WallTimer, backward_of, make_inputs, pass_of, pin_report
from mha_ci.perf import provenance as prov
from mha_ci.perf.shapes import CONFIG_PASS
from mha_ci.perf.stats import Method, dispatches_per_rep, shape_stats

CURRENT = "current"


def _log(message: str) -> None:
    print(f"tune: {message}", file=sys.stderr, flush=True)


# compile ----------------------------------------------------------------------------------------

def _problem(launch, problem: dict):
    return launch.Problem(dtype=problem["dtype"], dqk=problem["dqk"], dv=problem["dv"],
                          causal=problem.get("causal", False), window=tuple(problem.get("window", (-1, -1))),
                          has_sink=problem.get("has_sink", False), dropout=problem.get("dropout", False),
                          varlen=problem.get("varlen", False))


def compile_mode(args) -> int:
    pincheck.enforce()
    request = json.loads(out_path(args.request).read_text())
    targets = {arch: CompileTarget.parse(text) for arch, text in request["targets"].items()}
    try:
        chosen = prepare_environment(list(targets.values()))
    except ToolchainEnvironmentError as exc:
        print(f"tune: environment error: {exc}", file=sys.stderr, flush=True)
        return EXIT_ENVIRONMENT
    import triton  # toolchain only: after the pin check

    launch = importlib.import_module("mha.launch")
    config_mod = importlib.import_module("mha.config")
    package_dir = Path(str(importlib.import_module("mha").__file__)).parent
    sources = tree_digest(package_dir)
    spec_env = json.loads(os.environ.get("MHA_CI_PINS", '{"toolchain": "unnamed"}'))
    key_toolchain = {"name": spec_env.get("toolchain", "unnamed"), "lock": args.lock_sha256 or None,
                     "triton": triton.__version__, "env": chosen}
    cache = CompileCache(Path(args.cache_dir) if args.cache_dir else None)
    results: dict[str, dict] = {}
    tasks, keys, owner = [], {}, {}
    for item in request["items"]:
        arch = item["arch"]
        try:
            # nested under its pass: a backward candidate's num_warps must not reach the forward
            # kernel (nor its guards), and the other way round
            specs = launch.kernel_specs(_problem(launch, item["problem"]), arch, {item["pass"]: item["config"]})
        except config_mod.ConfigFileError as exc:        # a guard refused it
            results[item["key"]] = {"error": f"refused by the kernel: {exc}", "kernels": {}}
            continue
        named = item.get("kernels")
        if named == EVERY_KERNEL_OF_THE_PASS:
            # perf bisect: every kernel the pass may launch for the problem, whichever the inputs
            # pick (a fallback, a grid's form), so no code that can run goes unjudged
            named = [name for name, spec in specs.items() if spec.pass_ == item["pass"]]
        else:
            # what the config launches, but the preprocess kernel (delta only, no tile of its own)
            launched = [n for n in launch.launched_kernels(specs, item["pass"]) if n != "bwd_preprocess"]
            unnamed = sorted(set(launched) - set(named or launched))
            if unnamed:   # a kernel the call runs, whose code would go unjudged
                results[item["key"]] = {"error": f"the config launches {unnamed}, which the request does not name",
                                        "kernels": {}}
                continue
        results[item["key"]] = {"error": None, "kernels": {}}
        for name in named or launched:
            task = task_for_spec(launch, specs[name], f"{item['key']}/{name}", targets[arch],
                                 shared_limit=request.get("shared_limits", {}).get(arch))
            keys[task.key] = cache_key(sources=sources, config=file_digest(Path(config_mod.config_path(arch))),
                                       identity=task.identity(), toolchain=key_toolchain)
            owner[task.key] = (item["key"], name)
            hit = cache.get(keys[task.key])
            if hit is not None:
                results[item["key"]]["kernels"][name] = {**hit, "cached": True}
            else:
                tasks.append(task)
    _log(f"triton {triton.__version__}: {len(request['items'])} candidates x problems, "
         f"{len(tasks)} kernels to compile, {cache.hits} from cache, on {args.jobs} processes")
    done, started = [0], time.monotonic()

    def progress(result: CompileResult) -> None:
        entry = {"sha256": result.sha256, "shared_bytes": result.shared_bytes, "registers": result.registers,
                 "spills": result.spills, "extra": result.extra, "seconds": result.seconds, "error": result.error,
                 "refused": result.refused}
        cache.put(keys[result.key], entry)
        item_key, name = owner[result.key]
        results[item_key]["kernels"][name] = entry
        done[0] += 1
        if done[0] % 8 == 0 or done[0] == len(tasks):
            _log(f"compiled {done[0]}/{len(tasks)} ({time.monotonic() - started:.0f} s)")

    compile_all(tasks, args.jobs, progress)
    out = out_path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps({"triton": triton.__version__, "results": results}, indent=1, sort_keys=True) + "\n")
    return EXIT_OK


# time -------------------------------------------------------------------------------------------

def _forward(config: dict | None):
    """The forward factory (torch, shape, inputs) -> call, like the perf payload's mha_forward,
    with a config override."""
    def make(torch, shape: dict, inputs: dict):
        import mha  # toolchain only: after the pin check

        kw = dict(dropout_p=shape.get("dropout_p", 0.0), causal=shape["causal"],
                  window_size=tuple(shape.get("window", (-1, -1))), sink=inputs["sink"], config=config)
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        if shape["layout"] == "varlen":
            args = (q, k, v, inputs["cu_seqlens_q"], inputs["cu_seqlens_k"], inputs["max_seqlen_q"],
                    inputs["max_seqlen_k"])
            return lambda: mha.flash_attn_varlen_func(*args, **kw)
        return lambda: mha.flash_attn_func(q, k, v, **kw)
    return make


def timed_call(torch, shape: dict, inputs: dict, config: dict | None):
    """The call the perf gate times for the shape's pass, with `config` (a bucket config of that
    pass, or None: the shipped file) overriding the kernels of that pass only."""
    forward = _forward({CONFIG_PASS[pass_of(shape)]: config} if config else None)
    make = backward_of(forward) if pass_of(shape) == "bwd" else forward
    return make(torch, shape, inputs)


def _tensors(result) -> list:
    """The forward's output, or the backward step's gradients (dq, dk, dv[, dsink])."""
    return list(result) if isinstance(result, (tuple, list)) else [result]


def output_diff(mine: list, ref: list, relative: bool) -> dict:
    """max_abs_diff over every output; with `relative`, max_rel_diff: per output its largest
    difference over the reference's largest magnitude, the largest of those."""
    diffs = [float((a.float() - b.float()).abs().max()) if b.numel() else 0.0 for a, b in zip(mine, ref)]
    found = {"max_abs_diff": max(diffs, default=0.0)}
    if relative:
        scales = [float(b.float().abs().max()) if b.numel() else 0.0 for b in ref]
        found["max_rel_diff"] = max((d / s if s else d for d, s in zip(diffs, scales)), default=0.0)
    return found


def done_shapes(path: Path) -> dict[str, set]:
    """key -> config ids already measured together (a torn last line, from a kill, is ignored)."""
    found: dict[str, set] = {}
    if not path.is_file():
        return found
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        found[row["key"]] = set(row["configs"])
    return found


def rep_order(ids: list[str], rep: int) -> list[str]:
    """ABBA over reps: forward on even reps, reversed on odd ones."""
    return list(ids) if rep % 2 == 0 else list(reversed(ids))


def time_shape(torch, timer, shape: dict, configs: dict, method, seed: int, device: str) -> dict:
    """Every config of `configs` (id -> override or None) timed in turns on one shape's inputs."""
    inputs = make_inputs(torch, shape, device, seed)
    backward = pass_of(shape) == "bwd"
    row: dict[str, dict] = {}
    calls, ref = {}, None
    # the current config first: every candidate's output is compared with its output at once,
    # so at most two outputs (two sets of gradients) are held
    for cid in sorted(configs, key=lambda c: c != CURRENT):
        try:
            call = timed_call(torch, shape, inputs, configs[cid])
            t0 = time.perf_counter()
            output = _tensors(call())
            if device == "cuda":
                torch.cuda.synchronize()
            row[cid] = {"first_call_s": round(time.perf_counter() - t0, 3), "error": None}
            calls[cid] = call
        except Exception as exc:  # noqa: BLE001 - one failing candidate must not lose the others
            row[cid] = {"error": f"{type(exc).__name__}: {exc}"[:400], "stats": None}
            continue
        if cid == CURRENT:
            ref = output
        if ref is not None:
            row[cid].update(output_diff(output, ref, relative=backward))
        del output
    if CURRENT not in calls:
        return row
    estimates = {}
    for cid, call in calls.items():
        warm = sorted(timer.one(call) for _ in range(method.warmup))
        estimates[cid] = warm[len(warm) // 2]
    t0 = time.perf_counter()
    for _ in range(3):
        calls[CURRENT]()
    enqueue_us = (time.perf_counter() - t0) / 3 * 1e6
    n = dispatches_per_rep(estimates[CURRENT], method)
    hold_us = n * enqueue_us * 1.5 + 100.0
    reps: dict[str, list] = {cid: [] for cid in calls}
    for rep in range(method.reps):
        for cid in rep_order(list(calls), rep):
            reps[cid].append([round(t, 3) for t in timer.rep(calls[cid], n, hold_us, 0.0)])
    for cid in calls:
        row[cid]["stats"] = shape_stats(reps[cid], method).to_dict()
        row[cid]["warmup_median_us"] = round(estimates[cid], 3)
    return row


def time_mode(args) -> int:
    pins = pin_report()
    plan = json.loads(out_path(args.plan).read_text())
    method = Method.from_dict(json.loads(out_path(args.method).read_text()))
    results = out_path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    import torch  # toolchain only: after the pin check

    if args.device == "cuda" and not torch.cuda.is_available():
        _log("no CUDA/HIP device visible (use --device cpu for a harness check)")
        return EXIT_ENVIRONMENT
    facts = prov.device_facts(torch, args.device) if args.device == "cuda" else {"gpu": "cpu", "arch": "cpu"}
    if args.device == "cuda" and plan.get("arch") and facts["arch"] != plan["arch"]:
        _log(f"the plan is for {plan['arch']}, but the GPU ({facts['gpu']}) is {facts['arch']}")
        return EXIT_ENVIRONMENT
    meta = out_path(args.results).with_suffix(".provenance.json")
    write_atomic(meta, json.dumps({"device": facts, "pins": pins, "started": time.time()}, indent=1, default=str) + "\n")
    timer = CudaTimer(torch, method.l2_flush) if args.device == "cuda" else WallTimer()
    done = done_shapes(results)
    todo = []
    for n, entry in enumerate(plan["shapes"]):
        configs = {CURRENT: None, **plan["configs"].get(entry["bucket"], {})}
        if set(configs) <= done.get(entry["key"], set()):
            continue
        todo.append((n, entry, configs))
    _log(f"{len(plan['shapes']) - len(todo)} shapes already measured, {len(todo)} to go")
    started, measured = time.monotonic(), 0
    with torch.no_grad():
        for i, (n, entry, configs) in enumerate(todo, 1):
            if args.deadline and time.time() >= args.deadline:
                _log(f"budget reached: stopping before shape {i}/{len(todo)}; run again with the same --out to go on")
                break
            row = time_shape(torch, timer, entry["shape"], configs, method, method.seed + n, args.device)
            with open(results, "a") as handle:          # one line per shape: a kill loses at most one
                handle.write(json.dumps({"key": entry["key"], "bucket": entry["bucket"], "configs": row}) + "\n")
            measured += 1
            cur = (row.get(CURRENT) or {}).get("stats") or {}
            best = min(((r["stats"]["trimmed_mean_us"], cid) for cid, r in row.items()
                        if cid != CURRENT and r.get("stats")), default=None)
            note = (f"current {cur.get('trimmed_mean_us', float('nan')):.1f} us" +
                    (f", best {best[1]} {best[0] / cur['trimmed_mean_us']:.3f}x" if best and cur else ""))
            elapsed = time.monotonic() - started
            _log(f"[{i}/{len(todo)}] {elapsed:5.0f}s eta {elapsed / i * (len(todo) - i):5.0f}s "
                 f"{entry['key']} ({len(configs)} configs): {note}")
            if args.device == "cuda":
                torch.cuda.empty_cache()
    _log(f"{measured} shapes measured this run -> {results}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_ci.payloads.tune")
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("compile")
    p.add_argument("--request", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--lock-sha256", default="")
    p = sub.add_parser("time")
    p.add_argument("--plan", required=True)
    p.add_argument("--method", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--deadline", type=float, default=None, help="epoch seconds: start no shape after it")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args(argv)
    return run_guarded("tune", lambda: compile_mode(args) if args.mode == "compile" else time_mode(args))


if __name__ == "__main__":
    raise SystemExit(main())
