"""mha-ci run: validate, plan, pick the jobs, run them through an executor, report.

    mha-ci run [--job ID ...] [--executor venv|docker|host] [--out DIR] [--gate-from DIR] [--perf-against REF|DIR]
               [--labels a,b] [--changed-files FILE | --all] [--github-event FILE] [--event KIND]

Without --job, the event's plan runs (the same event options as `mha-ci plan`; without
--changed-files, --all or --github-event the changed paths come from git, mha_ci.plan.local_changes). With --job,
exactly the named jobs run, planned for this event or not (any job of the full matrix); an id
that does not exist is a usage error (exit 2) naming the closest one.

A job whose arch needs a device this machine does not have is never dropped silently: it is
listed as "not run: needs a <arch> device" in the output and in summary.md/results.json. It
fails the run (exit 3) only when it was asked for by name with --job.

`--gate-from DIR` judges perf jobs by the gate settings, shapes and baselines of DIR, a checkout of
the base branch, and correctness and memcheck jobs by DIR's known failures (mha_ci.perf.gate_source):
pr-gpu.yml passes it, so a pull request never sets the gate or the allowances it is judged by.
A DIR that cannot be read is exit 2 before any job runs.

`--perf-against REF|DIR` turns each perf job into a same-GPU A/B: the base's kernel (a git ref
of the checkout, or a folder holding a checkout of the base, such as the --gate-from one) and
the checkout's take turns shape by shape (`perf measure --against`'s method and thresholds,
numerics included); the stored baseline is compared with the base side only, as a note of how
far the base has moved from it. A base that cannot be built or measured makes the job red.

The run's options (jobs.context.RunOptions) come from the flags and from MHA_CI_PERF_SUBSET,
MHA_CI_PERF_REPEAT and MHA_CI_JOB_TIMEOUT (commands.options.run_options); jobs read only them.
"""
from __future__ import annotations

import sys
from pathlib import Path

from mha_ci.commands.options import (EXECUTORS, add_changed_options, add_pins_option, check_pins_option,
                                     event_from_args, local_devices, run_options)
from mha_ci.errors import ConfigError
from mha_ci.executors import make_executor
from mha_ci.files import exclusive_folder, refuse_special_outputs
from mha_ci.jobs.context import JobContext
from mha_ci.jobs.runner import run_jobs, split_by_device
from mha_ci.model.loader import load_pipeline
from mha_ci.model.pipeline import Pipeline
from mha_ci.model.types import PlannedJob
from mha_ci.model.yaml_source import closest
from mha_ci.plan.events import label_warnings
from mha_ci.plan.matrix import runnable_jobs
from mha_ci.plan.policy import plan
REPORT_FILES = ("results.json", "summary.md")         # jobs.runner.write_reports


def register(sub) -> None:
    p = sub.add_parser("run", help="run the planned jobs (or the ones named with --job)",
                       description="Run the jobs the event plans (or exactly those named with --job) and write "
                                   "summary.md, results.json and junit/ to the output folder.")
    p.add_argument("--job", dest="jobs", action="append", metavar="ID", help="run this job (repeatable)")
    p.add_argument("--executor", choices=EXECUTORS, default="venv", help="where payloads run (default: venv)")
    add_pins_option(p)
    p.add_argument("--select", action="append", metavar="GLOB",
                   help="correctness jobs run only the collected tests whose node id matches GLOB (fnmatch, "
                        "repeatable): a narrowed local check; every verdict names the selection")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: <root>/out)")
    p.add_argument("--gate-from", type=Path, default=None, metavar="DIR",
                   help="judge perf jobs by DIR's pipelines/perf.yaml, pipelines/workloads.yaml and perf_baselines/, "
                        "and correctness and memcheck jobs by DIR's pipelines/known_failures.yaml (a checkout of "
                        "the base branch: a pull request's GPU run) instead of this checkout's; the verdict names "
                        "what this checkout changes there")
    p.add_argument("--perf-against", default=None, metavar="REF|DIR",
                   help="perf jobs: measure the kernel of this base (a git ref of the checkout, or a folder "
                        "holding a checkout of it) and the checkout's on one GPU, taking turns per shape, and gate "
                        "the checkout against it; the stored baseline is only compared with the base, as a note")
    p.add_argument("--labels", help="comma-separated pull-request labels")
    add_changed_options(p)
    p.add_argument("--github-event", type=Path, help="GitHub event payload JSON ($GITHUB_EVENT_PATH)")
    p.add_argument("--event", help="event kind: pull_request (default) | push | schedule | manual; perf jobs measure "
                                   "the pull-request subset for pull_request (or with --perf-against), else every "
                                   "shape ($MHA_CI_PERF_SUBSET=pr|full overrides)")
    p.set_defaults(handler=handle)


def handle(args) -> int:
    check_pins_option(args)
    # Refused before any work: a FIFO there would hang the first write of the reports.
    refuse_special_outputs((args.out if args.out is not None else args.root / "out"), REPORT_FILES)
    event, note = event_from_args(args)
    pipeline = load_pipeline(args.root)
    options = run_options(args, event_kind=event.kind, checkout=pipeline)
    if note:
        print(f"mha-ci: {note}", file=sys.stderr)
    for warning in label_warnings(pipeline.triggers, event.labels):
        print(f"mha-ci: warning: {warning}", file=sys.stderr)
    the_plan = plan(pipeline, event)
    jobs = select_jobs(pipeline, the_plan, args.jobs)
    runnable, not_run = split_by_device(pipeline, jobs, local_devices(), requested=bool(args.jobs))
    out_dir = (args.out if args.out is not None else args.root / "out").resolve()
    for entry in not_run:
        print(f"mha-ci: {entry.id}: not run: {entry.reason}", file=sys.stderr)
    executor = make_executor(args.executor, args.root, pin_mode=options.pins)
    skipped = [] if args.jobs else list(the_plan.skipped)
    out_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_folder(out_dir, "--out"):
        report = run_jobs(runnable, JobContext(pipeline, executor, out_dir, options), not_run=not_run,
                          skipped=skipped)
    if not report.results:
        print("mha-ci: no job ran on this machine: nothing vouches for the change, so the run is not a pass",
              file=sys.stderr)
    print(f"mha-ci: {len(report.results)} job(s) ran, {len(not_run)} not run; "
          f"summary: {out_dir / 'summary.md'}; exit {report.exit_code}", file=sys.stderr)
    return report.exit_code


def select_jobs(pipeline: Pipeline, the_plan, requested: list[str] | None) -> list[PlannedJob]:
    if not requested:
        return list(the_plan.jobs)
    planned = {p.job.id: p for p in the_plan.jobs}
    why_not = {s.id: s.reason for s in the_plan.skipped}
    every = {job.id: job for job in runnable_jobs(pipeline)}
    chosen: dict[str, PlannedJob] = {}
    for job_id in requested:
        if job_id in planned:
            chosen[job_id] = PlannedJob(planned[job_id].job, f"requested with --job; planned: {planned[job_id].reason}")
        elif job_id in every:
            note = f" (the plan skips it: {why_not[job_id]})" if job_id in why_not else ""
            chosen[job_id] = PlannedJob(every[job_id], f"requested with --job{note}")
        else:
            unavailable = why_not.get(job_id)
            if unavailable:
                raise ConfigError(f"job '{job_id}' never runs: {unavailable}", key="--job")
            raise ConfigError(f"unknown job '{job_id}' (`mha-ci plan` lists the planned ones)", key="--job",
                              suggestion=closest(job_id, [*planned, *every]))
    return list(chosen.values())
