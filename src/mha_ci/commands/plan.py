"""mha-ci plan: the jobs an event would run, each with the rule that chose it, and every other
job of the matrix with why not (see mha_ci.plan.policy for the rules)."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from mha_ci.model.loader import load_pipeline
from mha_ci.model.types import Event
from mha_ci.plan.events import build_event, label_warnings
from mha_ci.plan.local_changes import local_changes
from mha_ci.plan.policy import plan
from mha_ci.plan.render import plan_to_json_text, plan_to_text


def register(sub) -> None:
    p = sub.add_parser("plan", help="show the jobs an event would run, and why; skipped ones with why not")
    p.add_argument("--labels", default=None, metavar="A,B", help="pull-request labels, comma-separated (added to the event's)")
    add_changed_options(p)
    p.add_argument("--github-event", type=Path, default=None, metavar="FILE", help="GitHub event payload ($GITHUB_EVENT_PATH)")
    p.add_argument("--event", default=None, metavar="KIND",
                   help="pull_request | push | schedule | manual (workflow_dispatch); default: from the payload, else pull_request")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(handler=_handler)


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


def _handler(args) -> int:
    pipeline = load_pipeline(args.root)
    event, note = event_from_args(args)
    for warning in label_warnings(pipeline.triggers, event.labels):
        print(f"mha-ci: warning: {warning}", file=sys.stderr)
    result = plan(pipeline, event)
    if args.format == "json":
        if note:
            print(f"mha-ci: {note}", file=sys.stderr)   # stdout is the JSON and nothing else
        print(plan_to_json_text(result), end="")
    else:
        print((note + "\n" if note else "") + plan_to_text(result), end="")
    return 0
