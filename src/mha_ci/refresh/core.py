"""refresh(): from fresh measurements to a baseline branch, or a refusal that says why.

A measurement becomes a baseline only when it is one a gate can trust. Refusals, with exit codes
(mha_ci.errors):

  exit 1 (a gate failed: the measurement is not fit to be a baseline)
    - the document is not a valid mha-ci.perf/1 document, or covers a subset instead of every shape
    - a shape failed to run (stats null) or stalled (a dispatch far above the median, see
      mha_ci.perf.stats), or its noise is above pipelines/perf.yaml `refresh.max_noise_pct`, in
      the first run and in every re-measurement of it (mha_ci.refresh.remeasure: a stall means
      the machine was disturbed while that shape ran, so the shape is measured again first)
  exit 3 (environment: the runner is not the machine the baseline is for)
    - provenance does not match: another arch, another toolchain name, torch/triton versions
      other than the toolchain's lock pins, or another GPU than the stored baseline's (a GPU change
      is a deliberate, reviewed baseline reset, never a nightly one)
    - git problems: the branch already exists, git fails
  exit 2: the arch has no refresh job (pipelines/jobs.yaml `kinds.refresh`); an unknown arch or
    toolchain is refused before, by the request (mha_ci.perf.request); a working tree that is not
    HEAD's is refused before anything is measured (mha_ci.refresh.clean_tree)

All toolchains' problems are collected before refusing, so one night's log shows all of them.
Nothing is written to the repository before every check passed; then everything goes into one
commit on `baseline-refresh/<date>-<arch>` (mha_ci.git.commit_on_new_branch; `-<toolchain>`
appended when only some toolchains are refreshed). When no shape moved beyond
its threshold, no shape came or went and the other refreshed files are unchanged, no branch is
made (status "unchanged") unless `always` is set: a nightly pull request of pure noise would teach
people to merge them unread.

History: a stored baseline keeps the last `refresh.history_runs` runs per shape, and its value is
their median. A shape starts its history again exactly when the code it runs changed: every
result records the sha256 of each code object its call launched (`code_objects`), and a shape
whose new code objects differ from its stored ones restarts, since its old runs time other code
and the median would let the change reach the baseline only after most of the window had been
re-measured. A shape whose code objects are unchanged keeps its runs, and with them the
between-run spread that keeps machine-to-machine differences from failing pull requests, however
much of src/mha changed around it. A stored shape measured before results recorded code objects
falls back to the commit rule: when src/mha differs between a kept run's commit and the measured
one, it restarts if it moved beyond its threshold.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping, NoReturn

from mha_ci import git
from mha_ci.baselines import accuracy_baseline, code_objects, perf_baseline, test_durations
from mha_ci.checksums.records import SCHEMA as CODEOBJ_SCHEMA
from mha_ci.errors import ConfigError, ExitCode, MhaCiError
from mha_ci.files import write_atomic
from mha_ci.model.perf_schema import PerfFile
from mha_ci.model.pipeline import Pipeline
from mha_ci.model.types import Arch, Toolchain
from mha_ci.perf import accuracy, comparable
from mha_ci.perf.combine import roll
from mha_ci.perf.compare import Comparison, GatePolicy, compare
from mha_ci.perf.document import SCHEMA as PERF_SCHEMA
from mha_ci.perf.document import check_perf, load_perf
from mha_ci.perf.request import PerfRequest, selected_workloads
from mha_ci.refresh import report
from mha_ci.refresh.remeasure import disturbances, splice


MeasureFn = Callable[[Arch, Toolchain], dict]            # -> mha-ci.perf/1 document
# (arch, toolchain, shape keys, round from 1) -> a document holding at least those shapes, or
# None when no further run can be had (documents measured elsewhere have run out)
RemeasureFn = Callable[[Arch, Toolchain, list[str], int], dict | None]
ChecksumsFn = Callable[[Toolchain], dict | None]         # -> mha-ci.codeobj/1 document, or None: keep
DurationsFn = Callable[[Arch], Mapping[str, dict]]       # -> {path under perf_baselines/test_durations/: doc}


# What decides the code that runs: a kept run of a commit that differs here is another build.
KERNEL_PATHS = ("src/mha",)


class RefreshRefused(MhaCiError):
    """The measurement must not become a baseline; `reasons` lists every problem found."""

    def __init__(self, reasons: list[str], exit_code: ExitCode) -> None:
        self.reasons = reasons
        self.exit_code = exit_code
        super().__init__("refresh refused:\n  - " + "\n  - ".join(reasons))


@dataclass(frozen=True)
class RefreshPolicy:
    max_noise_pct: float
    gate: GatePolicy
    # Runs per shape kept in a baseline (mha_ci.perf.combine.roll): its between-run spread is
    # what keeps a shape that moves between machines from failing every other pull request.
    history_runs: int = 5
    # Times a refresh measures again the shapes a run caught disturbed (mha_ci.refresh.remeasure).
    remeasure_rounds: int = 2

    @classmethod
    def from_perf(cls, spec: PerfFile, gate: GatePolicy) -> "RefreshPolicy":
        """pipelines/perf.yaml's `refresh` section (Pipeline.perf) with its gate (PerfRequest.gate)."""
        return cls(max_noise_pct=spec.refresh.max_noise_pct, gate=gate,
                   history_runs=spec.refresh.history_runs, remeasure_rounds=spec.refresh.remeasure_rounds)

    def disturbances(self, doc: dict) -> dict[str, str]:
        return disturbances(doc, self.max_noise_pct, self.gate.stall_factor, self.gate.stall_min_excess_us)


@dataclass
class RefreshResult:
    status: str                                   # "committed" | "unchanged"
    arch: str
    branch: str | None
    commit: str | None
    base_commit: str
    files: list[str] = field(default_factory=list)             # repo-relative, in the commit
    moved: dict[str, list[str]] = field(default_factory=dict)   # toolchain -> shape keys beyond threshold
    history: dict[str, str] = field(default_factory=dict)       # toolchain -> runs kept, or why restarted
    out_files: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"schema": "mha-ci.refresh/1", **asdict(self)}


# -- checks ----------------------------------------------------------------------------------

def _load_json(path: Path) -> dict | None:
    """The stored baseline, checked as any perf document is (exit 2 naming it); None when absent."""
    if not path.exists():
        return None
    return load_perf(path)


def measurement_problems(doc: dict, arch: Arch, toolchain: Toolchain, old: dict | None,
                         policy: RefreshPolicy, allow_unpinned: bool = False) -> tuple[list[str], list[str]]:
    """(problems with the measurement itself -> exit 1, provenance mismatches -> exit 3).
    The measurement is held to the pins of `toolchain` on the arch's platform, and to the stored
    baseline by mha_ci.perf.comparable (the one comparability rule)."""
    where = f"{arch.name}/{toolchain.name}"
    problem = check_perf(doc)
    if problem:
        return [f"{where}: not a {PERF_SCHEMA} document: {problem}"], []
    bad, mismatch = [], []
    prov = doc["provenance"]
    if prov.get("arch") != arch.name:
        mismatch.append(f"{where}: measured on arch {prov.get('arch')!r}, not {arch.name!r}")
    if prov.get("toolchain") != toolchain.name:
        mismatch.append(f"{where}: measured with toolchain {prov.get('toolchain')!r}, not {toolchain.name!r}")
    versions = prov.get("versions") or {}
    pinned = toolchain.pins.get("triton")
    if comparable.release(versions.get("triton")) != comparable.release(pinned):
        mismatch.append(f"{where}: triton {versions.get('triton')!r} measured, {pinned!r} pinned in {toolchain.lock.name}")
    if not prov.get("pins_checked") and not allow_unpinned:
        why = comparable.unpinned_summary(prov.get("pin_mismatches") or [])
        mismatch.append(f"{where}: an unpinned measurement ({why}) does not refresh a baseline unless the refresh "
                        "is run with --pins record, which marks the baseline unpinned")
    if old is not None:
        refused = comparable.refusal(old.get("provenance") or {}, prov)
        if refused:
            mismatch.append(f"{where}: not comparable with the stored baseline: {refused}")
    subset = (doc.get("selection") or {}).get("subset")
    if subset not in (None, "full"):
        bad.append(f"{where}: measured the '{subset}' subset; a baseline needs every shape (subset 'full')")
    rounds = (doc.get("selection") or {}).get("remeasure_rounds") or 0
    again = f", and again in {rounds} re-measurement(s)" if rounds else ""
    for key, why in policy.disturbances(doc).items():
        bad.append(f"{where}: {key} {why}{again}")
    return bad, mismatch


def remeasured(doc: dict, arch: Arch, toolchain: Toolchain, remeasure_fn: RemeasureFn | None,
               policy: RefreshPolicy) -> dict:
    """`doc` with its disturbed shapes measured again, up to policy.remeasure_rounds times
    (mha_ci.refresh.remeasure); `selection.remeasure_rounds` says how many rounds ran."""
    if remeasure_fn is None or check_perf(doc):
        return doc
    for round_ in range(1, policy.remeasure_rounds + 1):
        disturbed = policy.disturbances(doc)
        if not disturbed:
            break
        again = remeasure_fn(arch, toolchain, sorted(disturbed), round_)
        if again is None:
            break
        problem = check_perf(again)
        if problem:
            raise ConfigError(f"re-measurement {round_} of {arch.name}/{toolchain.name}: not a {PERF_SCHEMA} "
                              f"document: {problem}")
        doc = splice(doc, again, disturbed, policy.disturbances(again), f"re-measurement {round_}")
        doc["selection"]["remeasure_rounds"] = round_
    return doc


def _moved(comparison: Comparison | None) -> list[str]:
    if comparison is None:
        return []
    return [v.key for v in comparison.shapes if v.status in ("regression", "improvement")]


def _shape_set_changed(old: dict | None, new: dict) -> bool:
    if old is None:
        return True
    return {e["key"] for e in old.get("results", ())} != {e["key"] for e in new["results"]}


def _encode(doc: dict) -> bytes:
    # The perf helper's write_json layout (indent 1), so a refreshed baseline diffs line by line.
    return (json.dumps(doc, indent=1, sort_keys=False) + "\n").encode()


# -- refresh ---------------------------------------------------------------------------------

def refresh(request: PerfRequest, measure_fn: MeasureFn, *, out_dir: Path,
            remeasure_fn: RemeasureFn | None = None,
            checksums_fn: ChecksumsFn | None = None, durations_fn: DurationsFn | None = None,
            policy: RefreshPolicy | None = None,
            today: _dt.date | None = None, always: bool = False, allow_unpinned: bool = False) -> RefreshResult:
    """Measure the request's arch with each of its toolchains, check, and commit the new baselines
    on `baseline-refresh/<date>-<arch>`. Writes out_dir/refresh.json, pr-body.md, pr-title.txt."""
    pipeline, arch = request.pipeline, request.arch
    root = Path(pipeline.root)
    out_dir = Path(out_dir)
    if arch not in pipeline.kinds["refresh"].archs:
        raise ConfigError(f"arch '{arch}' has no refresh job (pipelines/jobs.yaml kinds / refresh / archs: "
                          f"{', '.join(pipeline.kinds['refresh'].archs)})")
    arch_spec = pipeline.archs[arch]
    names = list(request.toolchains)
    policy = policy or RefreshPolicy.from_perf(pipeline.perf, request.gate)
    date = (today or _dt.datetime.now(_dt.timezone.utc).date()).isoformat()
    base_commit = git.head_commit(root)

    # 1. measure and check everything before anything is written
    measured = _measure_and_check(pipeline, arch_spec, names, measure_fn, remeasure_fn, policy, out_dir,
                                  allow_unpinned)

    # 2. the files of the commit
    files, comparisons, history, changed = _baseline_files(root, arch, measured, policy, always)
    accuracy_files = _accuracy_files(pipeline, arch, measured, out_dir)
    changed = changed or any(accuracy.changed(_load_json(root / rel), json.loads(data))
                             for rel, data in accuracy_files.items())
    files.update(accuracy_files)
    extra = _other_files(pipeline, arch_spec, names, checksums_fn, durations_fn)
    for rel, data in extra.items():
        current = root / rel
        if not current.is_file() or current.read_bytes() != data:
            changed = True
        files[rel] = data

    moved = {name: _moved(c) for name, c in comparisons.items()}
    branch = f"baseline-refresh/{date}-{arch}"
    if set(names) != set(pipeline.toolchains):
        # A refresh of some toolchains only (a `refresh-<arch>-<toolchain>` job) gets its own
        # branch, so two such jobs of one night do not collide on the arch's branch name.
        branch += "-" + "-".join(names)
    body = report.pr_body(arch=arch, date=date, branch=branch if changed else None, base_commit=base_commit,
                          measured={n: d for n, (_, d) in measured.items()},
                          olds={n: o for n, (o, _) in measured.items()}, comparisons=comparisons,
                          policy=policy, other_files=sorted(extra))
    title = f"Baseline refresh: {arch}, {date}"
    if not changed:
        result = RefreshResult(status="unchanged", arch=arch, branch=None, commit=None, base_commit=base_commit,
                               moved=moved, history=history)
        result.out_files = _publish(out_dir, _out_texts(result, body, title))
        return result

    # 3. commit on the new branch, then publish the out files; an interrupt anywhere undoes both
    message = f"{title}\n\nRe-measured by the nightly refresh from {base_commit}.\n" + "".join(
        f"{name}: {len(keys)} shapes moved beyond their threshold; {history[name]}\n" for name, keys in moved.items())
    commit = git.commit_on_new_branch(root, branch, base_commit, files, message)
    result = RefreshResult(status="committed", arch=arch, branch=branch, commit=commit, base_commit=base_commit,
                           files=sorted(files), moved=moved, history=history)
    try:
        result.out_files = _publish(out_dir, _out_texts(result, body, title))
    except BaseException:
        git.delete_branch(root, branch)
        raise
    return result


def _measure_and_check(pipeline: Pipeline, arch_spec: Arch, names: list[str], measure_fn: MeasureFn,
                       remeasure_fn: RemeasureFn | None, policy: RefreshPolicy, out_dir: Path,
                       allow_unpinned: bool) -> dict[str, tuple[dict | None, dict]]:
    """toolchain -> (stored baseline or None, new measurement); RefreshRefused (with every
    toolchain's problems, recorded in out_dir/refresh.json) when any measurement is unfit."""
    root = Path(pipeline.root)
    bad, mismatch, measured = [], [], {}
    for name in names:
        toolchain = pipeline.toolchains[name].on(arch_spec.platform)
        doc = remeasured(measure_fn(arch_spec, toolchain), arch_spec, toolchain, remeasure_fn, policy)
        old = _load_json(root / perf_baseline(arch_spec.name, name))
        doc_bad, doc_mismatch = measurement_problems(doc, arch_spec, toolchain, old, policy, allow_unpinned)
        bad += doc_bad
        mismatch += doc_mismatch
        measured[name] = (old, doc)
    if bad or mismatch:
        _refuse(out_dir, arch_spec.name, mismatch + bad,
                ExitCode.ENVIRONMENT_ERROR if mismatch else ExitCode.GATE_FAILED)
    return measured


def _refuse(out_dir: Path, arch: str, reasons: list[str], exit_code: ExitCode) -> NoReturn:
    """Record the refusal in out_dir/refresh.json, then raise it."""
    refused = RefreshRefused(reasons, exit_code)
    _publish(out_dir, {"refresh.json": json.dumps({"schema": "mha-ci.refresh/1", "status": "refused",
                                                     "arch": arch, "branch": None,
                                                     "exit_code": int(refused.exit_code),
                                                     "reasons": refused.reasons}, indent=2) + "\n"})
    raise refused


def _baseline_files(root: Path, arch: str, measured: dict[str, tuple[dict | None, dict]], policy: RefreshPolicy,
                    always: bool) -> tuple[dict[str, bytes], dict[str, Comparison | None], dict[str, str], bool]:
    """(the new perf baselines by repo path, each against the stored one, the runs kept per
    toolchain, whether anything moved)."""
    files: dict[str, bytes] = {}
    comparisons: dict[str, Comparison | None] = {}
    changed = always
    history: dict[str, str] = {}
    for name, (old, doc) in measured.items():
        # What moved: the new run against the stored baseline, as a pull request would be judged.
        comparisons[name] = compare(old, doc, policy.gate) if old is not None else None
        restart, why = restarted_shapes(root, old, doc, comparisons[name])
        stored, reset = roll(old, doc, policy.history_runs, restart_keys=restart)
        runs = len(stored["provenance"]["combined_runs"])
        history[name] = (f"{runs} run(s) kept" + (f"; history restarted: {reset}" if reset else "")
                         + (f"; {len(restart)} shape(s) start their history again: {why}" if restart else ""))
        files[perf_baseline(arch, name)] = _encode(stored)
        changed = changed or bool(_moved(comparisons[name])) or bool(restart) or _shape_set_changed(old, doc)
    return files, comparisons, history, changed


def _accuracy_files(pipeline: Pipeline, arch: str, measured: dict[str, tuple[dict | None, dict]],
                    out_dir: Path) -> dict[str, bytes]:
    """The accuracy baseline of each toolchain whose measurement recorded numerics (a GPU arch),
    from the pull-request subset's shapes (mha_ci.perf.accuracy); a refusal (exit 1) naming every
    subset shape whose numerics are missing or failed, since storing the rest would leave those
    shapes unjudged."""
    keys = [w.key for w in selected_workloads(pipeline, "pr")]
    files, bad = {}, []
    for name, (_, doc) in measured.items():
        if not any(isinstance(r.get("numerics"), dict) for r in doc["results"]):
            continue
        missing = accuracy.problems(doc, keys)
        if missing:
            bad += [f"{name} accuracy baseline: {m}" for m in missing]
            continue
        files[accuracy_baseline(arch, name)] = _encode(accuracy.accuracy_document(doc, keys))
    if bad:
        _refuse(out_dir, arch, bad, ExitCode.GATE_FAILED)
    return files


def restarted_shapes(root: Path, old: dict | None, new: dict,
                     comparison: Comparison | None) -> tuple[frozenset[str], str]:
    """The shapes whose history starts again, and why (the module docstring's rule)."""
    if old is None:
        return frozenset(), ""
    stored = {e["key"]: e.get("code_objects") for e in old.get("results") or []}
    measured = {e["key"]: e.get("code_objects") for e in new.get("results") or []}
    changed, unknown = set(), set()
    for key, objects in measured.items():
        if key not in stored:
            continue                                 # new shape: no history to restart
        if stored[key] and objects:
            if stored[key] != objects:
                changed.add(key)
        else:
            unknown.add(key)
    reasons = [f"{len(changed)} ran other code objects"] if changed else []
    rebuilt = _another_build(root, old, new) if unknown else None
    fallback = unknown & set(_moved(comparison)) if rebuilt else set()
    if fallback:
        reasons.append(f"{len(fallback)} without recorded code objects moved after a kernel change ({rebuilt})")
    return frozenset(changed | fallback), "; ".join(reasons)


def _another_build(root: Path, old: dict | None, new: dict) -> str | None:
    """Why the stored runs time another kernel build than `new`, or None: a kept run's commit
    whose kernel package differs from the measured commit's. A commit git does not have here
    (a shallow clone) cannot be checked: its history is kept, as before this rule."""
    if old is None:
        return None
    target = (new.get("provenance") or {}).get("commit")
    runs = (old.get("provenance") or {}).get("combined_runs") or [old.get("provenance") or {}]
    commits = sorted({r.get("commit") for r in runs if r.get("commit") and r.get("commit") != target})
    if not target or not commits:
        return None
    for commit in commits:
        paths = git.changed_paths(root, commit, target, KERNEL_PATHS)
        if paths:
            shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
            return f"the kernel changed since kept run {commit[:12]} ({shown})"
    return None


def _other_files(pipeline: Pipeline, arch_spec: Arch, names: list[str], checksums_fn: ChecksumsFn | None,
                 durations_fn: DurationsFn | None) -> dict[str, bytes]:
    """The code-object checksums and test durations refreshed with the baselines, by repo path."""
    extra: dict[str, bytes] = {}
    if checksums_fn:
        for name in names:
            codeobjs = checksums_fn(pipeline.toolchains[name])
            if codeobjs is None:          # not refreshed for this toolchain
                continue
            if not isinstance(codeobjs, dict) or codeobjs.get("schema") != CODEOBJ_SCHEMA:
                raise RefreshRefused([f"code objects of {name}: not a {CODEOBJ_SCHEMA} document"], ExitCode.GATE_FAILED)
            extra[code_objects(name)] = _encode(codeobjs)
    if durations_fn:
        for rel, doc in sorted(durations_fn(arch_spec).items()):
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise ConfigError(f"test durations path {rel!r} must be relative, inside test_durations/")
            extra[test_durations(rel)] = _encode(doc)
    return extra


def _out_texts(result: RefreshResult, body: str, title: str) -> dict[str, str]:
    return {"pr-body.md": body, "pr-title.txt": title + "\n",
            "refresh.json": json.dumps(result.to_json(), indent=2) + "\n"}


def _publish(out_dir: Path, texts: dict[str, str]) -> list[str]:
    """Write every file into a staging folder first, then move them in: all or none appear."""
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".refresh-", dir=out_dir))
    moved: list[Path] = []
    try:
        for name, text in texts.items():
            write_atomic(staging / name, text)
        for name in texts:
            os.replace(staging / name, out_dir / name)
            moved.append(out_dir / name)
    except BaseException:
        for path in moved:
            path.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sorted(texts)
