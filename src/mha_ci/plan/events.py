"""The event a plan is made for, from GitHub's event payload and/or the command line.

`--github-event FILE` is the JSON GitHub writes to $GITHUB_EVENT_PATH. Its kind is taken from
`--event` when given (workflows pass `--event ${{ github.event_name }}`), otherwise read off the
payload's shape. The environment ($GITHUB_EVENT_NAME) is deliberately not read: the same command
must plan the same jobs on a laptop and in CI.

Changed paths are not in GitHub's pull_request payload; the workflow writes them to a file
(`git diff --name-only BASE...HEAD`) for `--changed-files`. Without one, changed paths are
unknown, which the policy treats as "every path changed". (A command line with neither a payload
nor --changed-files takes them from git instead: mha_ci.plan.local_changes.)
"""
from __future__ import annotations

import difflib
import json
import posixpath
import unicodedata
from pathlib import Path
from typing import Any

from mha_ci.errors import ConfigError
from mha_ci.model.pipeline import Triggers
from mha_ci.model.types import EVENT_KINDS, Event
from mha_ci.model.yaml_source import closest, read_text_file

# GitHub's event payloads are tens of KiB (a push of many commits a few MiB); a changed-files list
# of 10000 paths is under 1 MiB. Anything larger is not one of them.
MAX_INPUT_BYTES = 16 << 20

# GitHub event names -> our event kinds.
_ALIASES = {"workflow_dispatch": "manual", "pull_request_target": "pull_request"}


def event_kind(name: str) -> str:
    kind = _ALIASES.get(name, name)
    if kind not in EVENT_KINDS:
        choices = [*EVENT_KINDS, *_ALIASES]
        raise ConfigError(f"unknown event kind '{name}'; known: {', '.join(choices)}",
                          key="--event", suggestion=closest(name, choices))
    return kind


def parse_labels(text: str | None) -> frozenset[str]:
    return frozenset(part.strip() for part in (text or "").split(",") if part.strip())


def read_changed_files(path: Path) -> tuple[str, ...]:
    """Repository-relative paths, one a line or NUL-separated (`git diff --name-only -z`, which does
    not quote non-ASCII names); blank entries ignored, order kept, duplicates dropped. Each path is
    normalised (`docs/../src/mha/x` is `src/mha/x`, so it cannot pass for documentation); one that
    leaves the repository is a usage error."""
    text = read_text_file(path, "changed-files list", MAX_INPUT_BYTES)
    entries = text.split("\0") if "\0" in text else text.splitlines()
    paths = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        normal = posixpath.normpath(entry)
        if normal.startswith(("/", "../")) or normal in ("..", "."):
            raise ConfigError(f"changed path {entry!r} is not inside the repository", file=str(path))
        paths.append(normal)
    return tuple(dict.fromkeys(paths))


def _infer_kind(data: dict[str, Any], path: Path) -> str:
    if "pull_request" in data:
        return "pull_request"
    if "schedule" in data:
        return "schedule"
    if "inputs" in data and "workflow" in data:
        return "manual"
    if "ref" in data and ("commits" in data or "head_commit" in data or "before" in data):
        return "push"
    raise ConfigError("cannot tell the event kind from this payload; pass --event KIND", file=str(path))


def _branch(ref: str | None) -> str | None:
    # Tags keep their full ref so that they never match a branch name like `main`.
    if not ref:
        return None
    return ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else ref


def _label_names(labels: Any, path: Path) -> frozenset[str]:
    if isinstance(labels, str):                       # workflow_dispatch input: "ci:sm90,ci:perf"
        return parse_labels(labels)
    if isinstance(labels, list):
        return frozenset(_label_name(item, i, path) for i, item in enumerate(labels))
    if labels is None:
        return frozenset()
    raise ConfigError(f"labels: expected a list or a comma-separated string, got {type(labels).__name__}", file=str(path))


def _label_name(item: Any, index: int, path: Path) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, dict) and isinstance(item.get("name"), str):
        return item["name"]
    raise ConfigError(f"labels[{index}]: a label is a string or an object with a string 'name', got {item!r:.80}",
                      file=str(path), key="name")


def _draft(value: Any, path: Path) -> bool:
    # GitHub writes a JSON boolean; the string "false" would read as true (a draft: nothing runs).
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigError(f"pull_request.draft: expected true or false, got {value!r:.80}", file=str(path),
                          key="draft")
    return value


def _base_branch(base: Any, path: Path) -> str | None:
    if base is None:
        return None
    ref = base.get("ref") if isinstance(base, dict) else base
    if not isinstance(base, dict) or not isinstance(ref, (str, type(None))):
        raise ConfigError(f"pull_request.base: expected an object with a string 'ref', got {base!r:.80}",
                          file=str(path), key="base")
    return ref


def label_warnings(triggers: Triggers, labels: frozenset[str]) -> list[str]:
    """Warnings for labels that are not ours but look like one of triggers.yaml's (a full-width
    colon, a dropped or changed character): the policy ignores them, so the run does less than was
    asked. Labels with our prefix are checked strictly by the policy; this catches the near misses.
    A near miss made of non-ASCII or invisible characters is refused (ConfigError), not warned of:
    it is no typo."""
    known, prefix = [rule.label for rule in triggers.labels], triggers.label_prefix
    warnings = []
    folded_known = {unicodedata.normalize("NFKC", k).casefold(): k for k in known}
    for label in sorted(labels):
        if label in known or (_plain(label) and label.casefold().startswith(prefix.casefold())):
            continue
        folded = unicodedata.normalize("NFKC", label).casefold()
        match = folded_known.get(folded) or _closest_label(folded, folded_known)
        if match and not _plain(label):         # a look-alike (Cyrillic letter, zero-width space) is a disguise
            raise ConfigError(f"label {label!r} only looks like a CI label: it holds non-ASCII or invisible "
                              "characters", key="labels", suggestion=match)
        if match:
            warnings.append(f"label '{label}' is not a CI label and runs nothing; did you mean '{match}'?")
    return warnings


def _plain(label: str) -> bool:
    return label.isascii() and label.isprintable()


def _closest_label(folded: str, folded_known: dict[str, str]) -> str | None:
    # A high cutoff: 'bug' or 'docs' must not be read as a CI label.
    found = difflib.get_close_matches(folded, list(folded_known), n=1, cutoff=0.8)
    return folded_known[found[0]] if found else None


def read_github_event(path: Path, kind: str | None = None) -> Event:
    text = read_text_file(path, "GitHub event", MAX_INPUT_BYTES)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"invalid JSON: {exc.msg}", file=str(path), line=exc.lineno) from None
    except RecursionError:
        raise ConfigError("invalid GitHub event: JSON nested too deep", file=str(path)) from None
    except ValueError as exc:          # an integer of thousands of digits
        raise ConfigError(f"invalid GitHub event: {exc}", file=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError("a GitHub event payload is a JSON object", file=str(path))
    kind = event_kind(kind) if kind else _infer_kind(data, path)

    if kind == "pull_request":
        pr = data.get("pull_request")
        if not isinstance(pr, dict):
            raise ConfigError("pull_request event without a 'pull_request' object", file=str(path))
        return Event(kind=kind, labels=_label_names(pr.get("labels"), path),
                     branch=_base_branch(pr.get("base"), path), draft=_draft(pr.get("draft"), path))
    if kind == "manual":
        inputs = data.get("inputs") or {}
        return Event(kind=kind, labels=_label_names(inputs.get("labels"), path), branch=_branch(data.get("ref")))
    if kind == "push":
        return Event(kind=kind, branch=_branch(data.get("ref")))
    return Event(kind=kind)                            # schedule: nothing else in the payload


def build_event(kind: str | None = None, github_event: Path | None = None,
                changed_files: Path | None = None, labels: str | None = None) -> Event:
    """The event of `mha-ci plan`: the payload (if any), its kind overridden by --event, the
    --labels added to the payload's labels, the --changed-files list as the changed paths."""
    if github_event is not None:
        event = read_github_event(github_event, kind)
    else:
        event = Event(kind=event_kind(kind) if kind else "pull_request")
    return Event(kind=event.kind, labels=event.labels | parse_labels(labels),
                 changed_files=read_changed_files(changed_files) if changed_files else event.changed_files,
                 branch=event.branch, draft=event.draft)
