"""OUT/bisect.json: what a bisect has learnt so far, rewritten (atomically) as soon as a result
is known, so that an interruption loses at most the step in progress.

    schema      mha-ci.bisect/1
    arguments   what the results depend on: good, bad (resolved commits), arch, toolchain, pass and
                the matched shape keys; a rerun with other arguments is refused (exit 2)
    trees       src/mha tree -> {"fingerprint"} or {"unknown": why}: the CPU stage, per kernel tree
    cpu         once the CPU stage is complete: the commits and the distinct builds
    steps       commit -> the step measuring its build against good (mha_ci.bisect.search.Step)

The executor and the pin mode are not arguments: the CPU stage may run here and the GPU stage on
the GPU host (each step measures both of its sides there, so each is self-contained).
"""
from __future__ import annotations

import json
from pathlib import Path

from mha_ci.bisect.search import Step
from mha_ci.errors import ConfigError
from mha_ci.files import read_capped, write_atomic

SCHEMA = "mha-ci.bisect/1"
NAME = "bisect.json"
MAX_BYTES = 64 << 20


class State:
    def __init__(self, path: Path, data: dict) -> None:
        self.path, self.data = Path(path), data

    @property
    def trees(self) -> dict:
        return self.data["trees"]

    @property
    def cpu(self) -> dict | None:
        return self.data.get("cpu")

    def steps(self) -> dict[str, Step]:
        return {sha: Step.from_dict(step) for sha, step in self.data["steps"].items()}

    def set_tree(self, tree: str, result: dict) -> None:
        self.data["trees"][tree] = result
        self.save()

    def set_cpu(self, cpu: dict) -> None:
        self.data["cpu"] = cpu
        self.save()

    def add_step(self, step: Step) -> None:
        self.data["steps"][step.commit] = step.to_dict()
        self.save()

    def save(self) -> None:
        write_atomic(self.path, json.dumps(self.data, indent=1, sort_keys=True) + "\n")


def open_state(out: Path, arguments: dict) -> State:
    """The out folder's state for these arguments: a new one, or the stored one when it was made
    with the same arguments; a ConfigError (exit 2) naming what differs otherwise."""
    path = Path(out) / NAME
    if not path.exists():
        state = State(path, {"schema": SCHEMA, "arguments": arguments, "trees": {}, "cpu": None, "steps": {}})
        state.save()
        return state
    try:
        data = json.loads(read_capped(path, "the bisect state", MAX_BYTES))
    except ValueError as exc:
        raise ConfigError(f"not a bisect state file ({exc}); pass another --out", file=str(path)) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("arguments"), dict):
        raise ConfigError(f"not a {SCHEMA} file; pass another --out", file=str(path))
    stored = data["arguments"]
    differ = sorted(k for k in set(stored) | set(arguments) if stored.get(k) != arguments.get(k))
    if differ:
        detail = "; ".join(f"{k}: stored {_brief(stored.get(k))}, now {_brief(arguments.get(k))}" for k in differ)
        raise ConfigError(f"this --out holds a bisect with other arguments ({detail}); rerun with the same "
                          "arguments to resume it, or pass another --out", file=str(path), key=differ[0])
    data.setdefault("trees", {})
    data.setdefault("steps", {})
    problem = _problem(data)
    if problem:
        key, why = problem
        raise ConfigError(f"{key} {why}: the bisect state was edited or damaged; pass another --out",
                          file=str(path), key=key)
    return State(path, data)


def _problem(data: dict) -> tuple[str, str] | None:
    """(key, what is wrong) of a stored state that the stages could not read, or None. The file is
    read back after an interruption, possibly from another machine: it is an input like any other."""
    trees = data["trees"]
    if not isinstance(trees, dict) or not all(isinstance(t, dict) for t in trees.values()):
        return "trees", "is not an object of objects"
    cpu = data.get("cpu")
    known: set[str] | None = None
    if cpu is not None:
        if not isinstance(cpu, dict):
            return "cpu", "is neither null nor an object"
        commits = cpu.get("commits")
        if not isinstance(commits, list) or not commits or not all(
                isinstance(c, dict) and all(isinstance(c.get(k), str) for k in ("sha", "subject", "tree"))
                for c in commits):
            return "cpu.commits", "is not a list of commits ({sha, subject, tree})"
        order = [c["sha"] for c in commits]
        builds = cpu.get("builds")
        if not isinstance(builds, list) or not all(isinstance(b, list) and b for b in builds):
            return "cpu.builds", "is not a list of lists of commits"
        # The builds split the commits into runs, in history order: anything else is not a plan.
        if [sha for build in builds for sha in build] != order:
            return "cpu.builds", "does not split cpu.commits into runs in order (unknown or missing shas)"
        known = set(order)
    steps = data["steps"]
    if not isinstance(steps, dict):
        return "steps", "is not an object (commit -> step)"
    for sha, step in steps.items():
        if not (isinstance(step, dict) and step.get("commit") == sha and isinstance(step.get("regressed"), bool)
                and isinstance(step.get("shapes") or {}, dict)
                and isinstance(step.get("seconds") or 0, (int, float))):
            return "steps", f"holds a malformed step for {sha[:12]!r}"
        if known is not None and sha not in known:
            return "steps", f"holds a step for {sha[:12]!r}, which is not among cpu.commits"
    return None


def _brief(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
