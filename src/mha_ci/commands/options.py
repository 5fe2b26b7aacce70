"""Command-line options that several `mha-ci` commands share, and the one place that turns
flags and `MHA_CI_*` variables into a run's options (jobs.context.RunOptions).

Commands import this module, never each other: `plan` and `run` share the event options, `run`,
`perf`, `tune` and `checksums` the executor and pin options.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from mha_ci.errors import ConfigError
from mha_ci.executors.devices import ASSUME_ENV, available_devices
from mha_ci.jobs.context import DEFAULT_JOB_TIMEOUT_S, RunOptions
from mha_ci.perf.document import check_subset
from mha_ci.model.pipeline import Pipeline
from mha_ci.model.types import Event
from mha_ci.model.yaml_source import closest
from mha_ci.perf.gate_source import load_gate_source
from mha_ci.plan.events import build_event
from mha_ci.plan.local_changes import local_changes

EXECUTORS = ("venv", "docker", "host")
# Variables CI sets for `mha-ci run`; the command line reads them here and nowhere else.
PERF_SUBSET_ENV = "MHA_CI_PERF_SUBSET"      # the perf job's shapes: pr | full (default: perf_subset)
PERF_REPEAT_ENV = "MHA_CI_PERF_REPEAT"      # payload processes per perf measurement (default 1)
JOB_TIMEOUT_ENV = "MHA_CI_JOB_TIMEOUT"      # seconds per correctness payload step (default 3600)


def check_target(pipeline, arch: str | None = None, toolchains=()) -> None:
    """Refuse an --arch or --toolchain the pipeline does not define (exit 2, naming the known ones
    and the closest), before a command looks for a device or says what it is about to do."""
    if arch is not None and arch not in pipeline.archs:
        raise ConfigError(f"unknown arch '{arch}'; known: {', '.join(pipeline.archs)}", key="--arch",
                          suggestion=closest(arch, pipeline.archs))
    for name in [toolchains] if isinstance(toolchains, str) else toolchains or ():
        if name not in pipeline.toolchains:
            raise ConfigError(f"unknown toolchain '{name}'; known: {', '.join(pipeline.toolchains)}",
                              key="--toolchain", suggestion=closest(name, pipeline.toolchains))


def add_executor_option(parser, default: str | None = "venv") -> None:
    parser.add_argument("--executor", choices=EXECUTORS, default=default,
                        help="where the payload runs: venv (the toolchain's locked venv, built on first use), "
                             "docker (its image), host (this Python, as installed); default venv")


def add_pins_option(parser) -> None:
    parser.add_argument("--pins", choices=("enforce", "record"), default="enforce",
                        help="enforce (default): a payload whose versions differ from the lock stops with exit 3; "
                             "record (host executor only): run what is installed, record every mismatch and "
                             "mark every result unpinned (a GPU host that cannot install the locks)")


def check_pins_option(args) -> None:
    if args.pins == "record" and args.executor != "host":
        raise ConfigError(f"--pins record needs --executor host: the {args.executor} executor installs the "
                          "lock itself, so its pins always hold", key="--pins")


def add_changed_options(parser) -> None:
    """--changed-files and --all, shared by `plan` and `run`."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--changed-files", type=Path, default=None, metavar="FILE",
                       help="changed paths, one a line (default without --github-event: from git, against the "
                            "default branch; every path when there is nothing to compare against)")
    group.add_argument("--all", dest="all_paths", action="store_true",
                       help="every path counts as changed (the full pipeline of the event)")


def event_from_args(args) -> tuple[Event, str | None]:
    """The event of `plan` / `run` and, when its changed paths were decided here rather than
    given (--all, or git), a one-line note saying how. Event payloads without --changed-files keep
    their paths unknown (every path changed), as CI's push and manual runs expect."""
    event = build_event(kind=args.event, github_event=args.github_event,
                        changed_files=args.changed_files, labels=args.labels)
    if args.all_paths:
        return replace(event, changed_files=None), "changed files: every path counts as changed (--all)"
    if args.changed_files is not None or args.github_event is not None:
        return event, None
    changes = local_changes(args.root)
    return replace(event, changed_files=changes.paths), changes.note


def local_devices(environ: Mapping[str, str] = os.environ) -> frozenset[str]:
    """The device kinds of this machine; $MHA_CI_ASSUME_DEVICES, when set, instead of detection."""
    return available_devices(environ.get(ASSUME_ENV))


def perf_subset(event_kind: str | None, against: object, environ: Mapping[str, str] = os.environ) -> str:
    """The perf job's shapes: the pull-request subset for a pull request's run (its event, or a
    same-GPU A/B against its base), the full set for every other event; MHA_CI_PERF_SUBSET wins."""
    if PERF_SUBSET_ENV in environ:
        return environ[PERF_SUBSET_ENV]
    return "pr" if event_kind == "pull_request" or against is not None else "full"


def run_options(args, environ: Mapping[str, str] = os.environ, event_kind: str | None = None,
                checkout: Pipeline | None = None) -> RunOptions:
    """`mha-ci run`'s options: --select, --pins and --gate-from (read here, before any job runs), and
    the variables CI sets (a bad value is a usage error naming the variable). `event_kind` is the
    run's event (plan.events), which decides the perf subset (perf_subset); `checkout` is the
    pipeline under test, whose arch and toolchain names the --gate-from base's known failures are
    checked against (needed only with --gate-from)."""
    subset = perf_subset(event_kind, getattr(args, "perf_against", None), environ)
    check_subset(subset, PERF_SUBSET_ENV)
    repeat = _number(environ, PERF_REPEAT_ENV, int, 1)
    if repeat < 1:
        raise ConfigError(f"{PERF_REPEAT_ENV}={repeat} must be at least 1", key=PERF_REPEAT_ENV)
    timeout = _number(environ, JOB_TIMEOUT_ENV, float, DEFAULT_JOB_TIMEOUT_S)
    if not timeout > 0:
        raise ConfigError(f"{JOB_TIMEOUT_ENV}={timeout:g} must be above 0", key=JOB_TIMEOUT_ENV)
    gate_from = getattr(args, "gate_from", None)
    against = getattr(args, "perf_against", None)
    if against is not None and repeat != 1:
        raise ConfigError(f"--perf-against measures both sides once, taking turns; {PERF_REPEAT_ENV}={repeat} "
                          "asks for repeated runs of one side", key=PERF_REPEAT_ENV)
    if against is not None and not str(against).strip():
        raise ConfigError("--perf-against needs a git ref or a folder", key="--perf-against")
    source = None
    if gate_from is not None:
        if checkout is None:
            raise ValueError("--gate-from is read against the checkout's pipeline: pass checkout")
        source = load_gate_source(gate_from, checkout)
    return RunOptions(select=tuple(p.strip() for p in args.select or () if p.strip()), perf_subset=subset,
                      perf_repeat=repeat, job_timeout_s=timeout, pins=args.pins, gate_from=source,
                      perf_against=against)


def _number(environ: Mapping[str, str], name: str, kind: type, default):
    text = environ.get(name)
    if text is None:
        return default
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise ConfigError(f"{name}={text!r} is not {what}", key=name) from None
