"""mha-ci tune: search a config bucket's knobs (docs/tune.md).

    mha-ci tune --arch A --toolchain T [--bucket B ...] [--from-report compare.json] [--pass forward|backward]
                --out DIR [--dry-run] [--executor venv|docker|host] [--pins enforce|record] [--jobs N]
                [--budget-s S] [--max-candidates N] [--seconds-per-shape S] [--no-check]
    mha-ci tune propose --from DIR [--branch NAME] [--executor venv|host]

Phases, each writing under --out as it goes (mha_ci.tune.outdir): plan (CPU: candidates, guards,
ahead-of-time compile, resource gate; `--dry-run` stops here and prints it), time (GPU: every
surviving candidate against the current config, per shape in one process), verify (GPU: the
chosen configs against the current ones on every shape of the changed buckets), check (GPU: the
correctness job on the proposed config). A later call with the same --out resumes: the plan is
reused when arch, toolchain, buckets and config file are unchanged, measured shapes are skipped.
`propose` (CPU) turns the out folder into a branch: the config change and the recomputed
code-object records; the before/after report stays in DIR/proposal (a record is made by hand).

Exit codes: 0 done (a proposal, or nothing better than the current config), 1 the proposal failed
its verify or correctness gate, 2 bad options or files, 3 no device, a pin mismatch, git problems.
"""
from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from mha_ci.commands.options import (add_executor_option, add_pins_option, check_pins_option, check_target,
                                     local_devices, run_options)
from mha_ci.errors import ConfigError, ExitCode, MhaCiError
from mha_ci.executors import make_executor
from mha_ci.files import exclusive_folder
from mha_ci.jobs.context import JobContext
from mha_ci.jobs.runner import run_jobs, split_by_device
from mha_ci.model.loader import load_pipeline
from mha_ci.model.types import PlannedJob
from mha_ci.perf.request import perf_request, selected_workloads
from mha_ci.plan.matrix import runnable_jobs
from mha_ci.tune import outdir, plan as plan_mod, proposal, rules, session, targets


def register(sub) -> None:
    tune = sub.add_parser("tune", help="search a config bucket's knobs: pruned on the CPU, timed on a GPU, "
                                       "proposed on a branch",
                          description="Tune config buckets (docs/tune.md). Candidates are timed and verified "
                                      "on shapes of the full workload set.")
    tune.add_argument("action", nargs="?", choices=("run", "propose"), default="run",
                      help="run (default): plan, then time/verify/check on a GPU; propose: make the branch "
                           "from an out folder (CPU)")
    tune.add_argument("--arch", help="the arch whose config (src/mha/configs/<arch>-*.json) is tuned; run: required")
    tune.add_argument("--toolchain", help="the toolchain the candidates are compiled and timed in; run: required")
    tune.add_argument("--bucket", action="append", help="a bucket to tune (repeatable; default: from the report, "
                                                         "or every bucket with workload shapes)")
    tune.add_argument("--from-report", type=Path, help="a mha-ci.perf-compare/1 file: tune the buckets with "
                                                       "regressions, on the regressed shapes")
    tune.add_argument("--pass", dest="pass_", choices=("forward", "backward"), default="forward",
                      help="the config section to tune: forward buckets on the forward (fwd) workload "
                           "shapes, backward buckets on the backward step (bwd) shapes")
    tune.add_argument("--out", type=Path, help="the tune folder (default: <root>/out/tune-<arch>-<toolchain>)")
    tune.add_argument("--from", dest="from_dir", type=Path, help="propose: the tune folder to read")
    tune.add_argument("--dry-run", action="store_true", help="plan and prune on the CPU, print, stop")
    add_executor_option(tune, default=None)
    tune.add_argument("--jobs", type=int, default=None, help="compile processes (default: every core)")
    tune.add_argument("--budget-s", type=float, default=480.0,
                      help="wall-clock budget of the GPU phases of this call; no shape starts after it")
    tune.add_argument("--max-candidates", type=int, default=6,
                      help="surviving candidates timed per bucket, nearest to the current config first")
    tune.add_argument("--seconds-per-shape", type=float, default=0.3,
                      help="timed work per config and shape (the perf method's max_seconds_per_shape)")
    tune.add_argument("--no-check", action="store_true", help="skip the correctness job of the proposal")
    tune.add_argument("--branch", help="propose: the branch name (default: tune/<arch>-<toolchain>-<date>)")
    add_pins_option(tune)
    tune.set_defaults(handler=handle)


def handle(args) -> int:
    if args.action == "propose":
        return _propose(args)

    if not args.arch or not args.toolchain:
        raise ConfigError("tune needs --arch and --toolchain", key="--arch" if not args.arch else "--toolchain")
    args.executor = args.executor or "venv"
    check_pins_option(args)
    pipeline = load_pipeline(args.root)
    check_target(pipeline, args.arch, [args.toolchain])
    out = (args.out or args.root / "out" / f"tune-{args.arch}-{args.toolchain}").resolve()
    executor = make_executor(args.executor, args.root, pin_mode=args.pins)
    # Timing and verifying cover shapes of the full workload set.
    request = perf_request(pipeline, arch=args.arch, toolchains=(args.toolchain,), subset="full", out_dir=out,
                           executor=executor)
    started = time.monotonic()
    plan = _plan(args, pipeline, executor, out)
    print(plan_mod.render(plan), end="")
    print(f"mha-ci tune: plan in {out / 'plan.json'} ({time.monotonic() - started:.1f} s)", file=sys.stderr)
    if args.dry_run:
        return ExitCode.OK

    return session.gpu_phases(args, request, plan, deadline=time.time() + args.budget_s,
                              correctness=_correctness(args))


def _correctness(args) -> session.CorrectnessRun:
    """The tune check's correctness run: the named jobs of the copied checkout through the job
    runner, in this process, with this call's executor and pins, as `mha-ci run --job ...
    --select ...` runs them (options from the same flags and variables; a job whose device this
    machine lacks is exit 3)."""
    def run(tree: Path, out: Path, job_ids: list[str], select: tuple[str, ...]) -> int:
        try:
            return _run_correctness(args, tree, out, job_ids, select)
        except MhaCiError as exc:
            # The check's verdict is its exit status, recorded with the proposal like a gate's.
            print(f"mha-ci tune: check: {exc}", file=sys.stderr)
            return int(exc.exit_code)
    return run


def _run_correctness(args, tree: Path, out: Path, job_ids: list[str], select: tuple[str, ...]) -> int:
    """The named jobs of the checkout at `tree`, run into `out`; the run's exit code."""
    pipeline = load_pipeline(tree)
    every = {job.id: job for job in runnable_jobs(pipeline)}
    unknown = [job_id for job_id in job_ids if job_id not in every]
    if unknown:
        raise ConfigError(f"the tune check's jobs are not in the pipeline: {', '.join(unknown)}", key="--job")
    planned = [PlannedJob(every[job_id], "the tune proposal's correctness check") for job_id in job_ids]
    runnable, not_run = split_by_device(pipeline, planned, local_devices(), requested=True)
    options = run_options(SimpleNamespace(select=list(select), pins=args.pins))
    out.mkdir(parents=True, exist_ok=True)
    with exclusive_folder(out, "--out"):
        report = run_jobs(runnable, JobContext(pipeline, make_executor(args.executor, tree, pin_mode=args.pins),
                                               out, options), not_run=not_run)
    return report.exit_code


def _plan(args, pipeline, executor, out: Path) -> dict:
    """Reuse OUT/plan.json when it was made for the same question and config file; else build it."""
    report = targets.read_report(args.from_report) if args.from_report else None
    workloads = selected_workloads(pipeline, "full")
    chosen = targets.choose([w.to_dict() for w in workloads], args.bucket, report, args.pass_)
    if not chosen:
        raise ConfigError(f"nothing to tune: no bucket selected (the report has no {args.pass_} regression?)",
                          key="--bucket")
    old = outdir.read_json(out / "plan.json")
    digest = hashlib.sha256(rules.config_file(args.root, args.arch).read_bytes()).hexdigest()
    if (old and old.get("arch") == args.arch and old.get("toolchain") == args.toolchain
            and old.get("pass") == args.pass_ and old.get("config_sha256") == digest
            and [b["bucket"] for b in old["buckets"]] == [t.bucket for t in chosen]
            and all(b["shapes"] == t.shapes for b, t in zip(old["buckets"], chosen))):
        print(f"mha-ci tune: reusing the plan in {out / 'plan.json'}", file=sys.stderr)
        return old
    return plan_mod.build(args.root, pipeline, args.arch, args.toolchain, args.pass_, chosen, executor, out,
                          jobs=args.jobs, report_path=str(args.from_report) if args.from_report else None)


def _propose(args) -> int:
    if args.from_dir is None:
        raise ConfigError("tune propose needs --from DIR (the --out of a tune run)", key="--from")
    return proposal.propose(load_pipeline(args.root), args.from_dir.resolve(), branch=args.branch,
                            executor_name=args.executor or "venv")
