"""mha-ci plan: the jobs an event would run, each with the rule that chose it, and every other
job of the matrix with why not (see mha_ci.plan.policy for the rules)."""
from __future__ import annotations

import sys
from pathlib import Path

from mha_ci.commands.options import add_changed_options, event_from_args
from mha_ci.model.loader import load_pipeline
from mha_ci.plan.events import label_warnings
from mha_ci.plan.policy import plan
from mha_ci.plan.render import plan_to_json_text, plan_to_text


def register(sub) -> None:
    p = sub.add_parser("plan", help="show the jobs an event would run, and why; skipped ones with why not")
    p.add_argument("--labels", default=None, metavar="A,B", help="pull-request labels, comma-separated (added to the event's)")
    add_changed_options(p)
    p.add_argument("--github-event", type=Path, default=None, metavar="FILE", help="GitHub event payload ($GITHUB_EVENT_PATH)")
    p.add_argument("--event", default=None, metavar="KIND",
                   help="pull_request | push | schedule | manual (workflow_dispatch); default: from the payload, else pull_request")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default): for reading; json: the plan document CI's matrix and gate read")
    p.set_defaults(handler=_handler)


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
