"""The two stages of a bisect, over injected code-object and measuring functions (the command
passes the real ones, tests fakes): usage checks, the CPU stage (collapse), the GPU stage
(search), the report. Exit: 0 found; 1 no commit named (bad does not regress against good here,
no code object of the shapes changed in the range, or a step could not be judged); 2 usage;
3 environment (raised)."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mha_ci.bisect import commits as git_commits
from mha_ci.bisect import report
from mha_ci.bisect.code import CodeObjectsFn, CodeObjectsUnknown, fingerprint
from mha_ci.bisect.commits import Commit
from mha_ci.bisect.gpu import Measurer, StepUnjudged
from mha_ci.bisect.search import Outcome, Step, most_steps, search
from mha_ci.bisect.state import State, open_state
from mha_ci.errors import EnvironmentProblem, ExitCode
from mha_ci.perf import base_checkout


@dataclass(frozen=True)
class Request:
    repo: Path
    good: str                  # as given (a ref)
    bad: str
    arch: str
    toolchain: str
    pass_: str | None
    keys: tuple[str, ...]      # the matched shape keys
    out: Path
    cpu_only: bool = False


@dataclass
class Plan:
    """What the CPU stage found: good, bad, the commits and their builds (runs of commits with one
    set of code objects, in history order; build 0 holds good)."""
    good: str
    bad: str
    commits: list[Commit]
    builds: list[list[Commit]]


def log(message: str) -> None:
    print(f"mha-ci perf bisect: {message}", file=sys.stderr, flush=True)


def run(request: Request, code_objects: Callable[[], CodeObjectsFn], measurer: Callable[[str], Measurer]) -> int:
    """The whole bisect. `code_objects()` and `measurer(good commit)` make the stage functions
    once the usage checks passed, and only when the out folder lacks what they would compute."""
    good = base_checkout.resolve(request.repo, request.good, "--good")
    bad = base_checkout.resolve(request.repo, request.bad, "--bad")
    history = git_commits.commit_range(request.repo, good, bad)
    state = open_state(request.out, {"good": good, "bad": bad, "arch": request.arch,
                                     "toolchain": request.toolchain, "pass": request.pass_,
                                     "shapes": sorted(request.keys)})
    plan = cpu_stage(state, history, code_objects)
    log(f"{len(plan.commits)} commits, {len(plan.builds)} distinct builds for {len(request.keys)} shape(s): "
        f"{len(plan.commits) - len(plan.builds)} commit(s) need no GPU time")
    if request.cpu_only:
        return _finish(request, plan, state, None, status="planned")
    if len(plan.builds) < 2:
        return _finish(request, plan, state, None, status="no kernel change")
    try:
        outcome = gpu_stage(state, plan, lambda: measurer(good))
    except StepUnjudged as exc:
        return _finish(request, plan, state, None, status="no verdict", reason=str(exc))
    return _finish(request, plan, state, outcome, status="found" if outcome.reproducible else "not reproducible")


def cpu_stage(state: State, history: list[Commit], make_code_objects: Callable[[], CodeObjectsFn]) -> Plan:
    """Code objects per distinct src/mha tree (stored one by one), then the collapse."""
    if state.cpu is None:
        code_objects: CodeObjectsFn | None = None
        todo = [c for i, c in enumerate(history) if c.tree not in state.trees
                and all(c.tree != o.tree for o in history[:i])]
        for n, commit in enumerate(todo, 1):
            code_objects = code_objects or make_code_objects()
            started = time.monotonic()
            try:
                result = {"fingerprint": fingerprint(code_objects(commit)), "commit": commit.sha}
            except CodeObjectsUnknown as exc:
                result = {"unknown": str(exc), "commit": commit.sha}
            log(f"CPU [{n}/{len(todo)}] {commit.sha[:12]} {commit.subject[:60]!r}: "
                + (f"code objects {result['fingerprint'][:12]}" if "fingerprint" in result
                   else f"unknown ({result['unknown'][:200]})") + f", {time.monotonic() - started:.0f} s")
            state.set_tree(commit.tree, result)
        known = [t for t in (state.trees[c.tree] for c in history) if "fingerprint" in t]
        if not known:
            first = state.trees[history[0].tree].get("unknown", "")
            state.data["trees"] = {}      # an environment fixed later must compile them again
            state.save()
            raise EnvironmentProblem(f"no commit's code objects could be computed; the first: {first}")
        builds = collapse(history, state.trees)
        state.set_cpu({"commits": [c.to_dict() for c in history],
                       "builds": [[c.sha for c in build] for build in builds]})
    cpu = state.cpu or {}
    by_sha = {c["sha"]: Commit.from_dict(c) for c in cpu["commits"]}
    listed = [by_sha[c["sha"]] for c in cpu["commits"]]
    return Plan(listed[0].sha, listed[-1].sha, listed, [[by_sha[s] for s in build] for build in cpu["builds"]])


def collapse(history: list[Commit], trees: dict) -> list[list[Commit]]:
    """Runs of neighbouring commits with equal code objects (or, when unknown, the same src/mha
    tree) as builds; a commit whose code objects are unknown never joins another tree's run."""
    builds: list[list[Commit]] = []
    previous = None
    for commit in history:
        found = trees[commit.tree]
        identity = found.get("fingerprint") or f"tree {commit.tree}"
        if builds and identity == previous:
            builds[-1].append(commit)
        else:
            builds.append([commit])
        previous = identity
    return builds


def gpu_stage(state: State, plan: Plan, make_measurer: Callable[[], Measurer]) -> Outcome:
    stored = state.steps()
    measure: Measurer | None = None
    count = len(plan.builds)
    done = [0]

    def measure_build(index: int) -> Step:
        nonlocal measure
        first = plan.builds[index][0]
        done[0] += 1
        where = f"step {done[0]} (at most {most_steps(count)}): build {index + 1}/{count} {first.sha[:12]}"
        if first.sha in stored:
            step = stored[first.sha]
            log(f"{where}: stored, {_verdict(step)}")
            return step
        measure = measure or make_measurer()
        log(f"{where} {first.subject[:60]!r} against good, on the GPU")
        step = measure(first.sha)
        state.add_step(step)
        log(f"{where}: {_verdict(step)}, {step.seconds:.0f} s")
        return step
    return search(count, measure_build)


def _verdict(step: Step) -> str:
    figures = ", ".join(f"{key} {s['delta_pct']:+.1f} % ({s['status']})" if s.get("delta_pct") is not None
                        else f"{key} {s['status']}" for key, s in step.shapes.items())
    return ("REGRESSED" if step.regressed else "not regressed") + (f": {figures}" if figures else "")


def _finish(request: Request, plan: Plan, state: State, outcome: Outcome | None, status: str,
            reason: str = "") -> int:
    summary = report.summary(request, plan, state.steps(), outcome, status, reason)
    paths = report.write(summary, request.out)
    print(report.text(summary), end="")
    log(f"{status}; report {paths['md']}")
    return ExitCode.OK if status in ("found", "planned") else ExitCode.GATE_FAILED
