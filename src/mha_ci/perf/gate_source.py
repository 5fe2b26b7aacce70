"""Where a verdict takes its settings, baseline and allowances from: `mha-ci run --gate-from DIR`.

A perf job judges a measurement by pipelines/perf.yaml (the gate, the method, the subset),
pipelines/workloads.yaml (the shapes) and perf_baselines/<arch>/<toolchain>.json; correctness and
memcheck jobs apply pipelines/known_failures.yaml as strict xfail. In a pull request all of them
are the pull request's own files, so one token in perf.yaml, a baseline stored slower, or its own
new failure listed as known, would loosen the verdict on that very change. pr-gpu.yml therefore
checks out the base branch beside the approved commit and runs `mha-ci run --gate-from <base
checkout>`: the pull request's kernel is measured and tested, and judged by the base's settings,
baseline and known failures (`GateSource.applied_to`). What the pull request changes there is
named in the job's verdict (`changes` for perf jobs, `known_failures_verdict` for the jobs that
apply known failures), so a reviewer sees it, and it takes effect once merged.

The base's known failures are checked as the loader checks the checkout's, against the
checkout's arch and toolchain names; a base entry for an arch or toolchain the checkout no longer
has is left out (model.loader.load_known_failures): it could match no job of the run, and an
error would deny a pull request that renames a toolchain its GPU run until it is merged. Leaving
an allowance out only makes the verdict stricter.

A base that cannot be read is a usage error (exit 2) before any job runs: never a fallback to the
checkout's own settings.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from mha_ci.baselines import perf_baseline
from mha_ci.errors import ConfigError
from mha_ci.files import read_capped
from mha_ci.model.loader import load_known_failures, load_perf_settings
from mha_ci.model.perf_schema import PERF_FILE, WORKLOADS_FILE, PerfFile, WorkloadsFile
from mha_ci.model.pipeline import Pipeline
from mha_ci.model.types import KnownFailure
from mha_ci.perf.document import MAX_PERF_BYTES

OPTION = "--gate-from"
KNOWN_FAILURES_FILE = "pipelines/known_failures.yaml"


@dataclass(frozen=True)
class GateSource:
    root: Path                  # a checkout of the base branch
    perf: PerfFile
    workloads: WorkloadsFile
    known_failures: tuple[KnownFailure, ...]    # the base's, for the checkout's archs and toolchains

    def baseline(self, arch: str, toolchain: str) -> Path:
        return self.root / perf_baseline(arch, toolchain)

    def applied_to(self, pipeline: Pipeline) -> Pipeline:
        """`pipeline` (the checkout's toolchains and archs) with the base's perf settings, shapes
        and known failures: what every job of a --gate-from run is judged by."""
        return replace(pipeline, perf=self.perf, workloads=self.workloads, known_failures=self.known_failures)


def load_gate_source(root: Path, checkout: Pipeline) -> GateSource:
    """The base checkout at `root`, read for judging `checkout` (whose arch and toolchain names
    the base's known failures are checked against)."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"{OPTION} {root}: no such folder (a checkout of the base branch)", key=OPTION)
    if not (root / "pipelines").is_dir():
        raise ConfigError(f"{OPTION} {root}: no pipelines/ folder: not a checkout of this repository", key=OPTION)
    try:
        perf, workloads = load_perf_settings(root)
    except ConfigError as exc:
        raise ConfigError(f"{OPTION} {root}: the base's perf settings cannot be used: {exc}", key=OPTION) from None
    try:
        known = load_known_failures(root, tuple(checkout.archs), tuple(checkout.toolchains))
    except ConfigError as exc:
        raise ConfigError(f"{OPTION} {root}: the base's known failures cannot be used: {exc}", key=OPTION) from None
    return GateSource(root=root.resolve(), perf=perf, workloads=workloads, known_failures=known)


def changes(pipeline: Pipeline, source: GateSource, arch: str, toolchain: str) -> list[str]:
    """What `pipeline`'s checkout sets otherwise than the base for one perf job: perf.yaml (with
    the sections that differ), workloads.yaml, the job's baseline file."""
    found = []
    sections = [name for name in PerfFile.model_fields if getattr(pipeline.perf, name) != getattr(source.perf, name)]
    if sections:
        found.append(f"pipelines/{PERF_FILE} ({', '.join(sections)})")
    if pipeline.workloads != source.workloads:
        found.append(f"pipelines/{WORKLOADS_FILE}")
    relative = perf_baseline(arch, toolchain)
    if _content(Path(pipeline.root) / relative) != _content(source.root / relative):
        found.append(relative)
    return found


def known_failures_changes(pipeline: Pipeline, source: GateSource, arch: str,
                           toolchain: str) -> dict[str, list[str]]:
    """How `pipeline`'s checkout lists the known failures of one (arch, toolchain) otherwise than
    the base, by test id: `added` (not applied until merged), `removed` (still applied) and
    `reason_changed`, each sorted; all empty when the two agree."""
    mine = {k.test: k.reason for k in pipeline.known_failures_for(arch, toolchain)}
    base = {k.test: k.reason for k in source.applied_to(pipeline).known_failures_for(arch, toolchain)}
    return {"added": sorted(mine.keys() - base.keys()), "removed": sorted(base.keys() - mine.keys()),
            "reason_changed": sorted(t for t in mine.keys() & base.keys() if mine[t] != base[t])}


def known_failures_verdict(pipeline: Pipeline, source: GateSource, arch: str, toolchain: str) -> tuple[dict, str]:
    """For a job that applies known failures in a --gate-from run: its details' `gate_from` entry
    and the text its verdict ends with ("" when the checkout lists what the base lists)."""
    diff = known_failures_changes(pipeline, source, arch, toolchain)
    changed = [KNOWN_FAILURES_FILE] if any(diff.values()) else []
    details = {"root": str(source.root), "changed": changed, "known_failures": diff}
    if not changed:
        return details, ""
    counts = ", ".join(f"{len(tests)} {what.replace('_', ' ')}" for what, tests in diff.items() if tests)
    return details, (f"; this pull request changes {KNOWN_FAILURES_FILE} for {arch} / {toolchain} ({counts}): "
                     f"judged by the base's ({source.root})")


def _content(path: Path) -> bytes | str | None:
    """The file's bytes, None when there is none, or why it cannot be read (a link to a device,
    a file too large): that counts as a change."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return read_capped(path, "baseline", MAX_PERF_BYTES)
    except ConfigError as exc:
        return str(exc)
