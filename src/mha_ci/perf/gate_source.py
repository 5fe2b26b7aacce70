"""Where a perf verdict takes its settings and baseline from: `mha-ci run --gate-from DIR`.

A perf job judges a measurement by pipelines/perf.yaml (the gate, the method, the subset),
pipelines/workloads.yaml (the shapes) and perf_baselines/<arch>/<toolchain>.json. In a pull
request all of them are the pull request's own files, so one token in perf.yaml, or a baseline
stored slower, would loosen the verdict on that very change. pr-gpu.yml therefore checks out the
base branch beside the approved commit and runs `mha-ci run --gate-from <base checkout>`: the
pull request's kernel is measured, and judged by the base's settings and baseline. What the pull
request changes there is named in the job's verdict (`changes`), so a reviewer sees it, and it
takes effect once merged.

A base that cannot be read is a usage error (exit 2) before any job runs: never a fallback to the
checkout's own settings.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from mha_ci.baselines import perf_baseline
from mha_ci.errors import ConfigError
from mha_ci.files import read_capped
from mha_ci.model.loader import load_perf_settings
from mha_ci.model.perf_schema import PERF_FILE, WORKLOADS_FILE, PerfFile, WorkloadsFile
from mha_ci.model.pipeline import Pipeline
from mha_ci.perf.document import MAX_PERF_BYTES

OPTION = "--gate-from"


@dataclass(frozen=True)
class GateSource:
    root: Path                  # a checkout of the base branch
    perf: PerfFile
    workloads: WorkloadsFile

    def baseline(self, arch: str, toolchain: str) -> Path:
        return self.root / perf_baseline(arch, toolchain)

    def applied_to(self, pipeline: Pipeline) -> Pipeline:
        """`pipeline` (the checkout's toolchains and archs) with the base's perf settings and shapes."""
        return replace(pipeline, perf=self.perf, workloads=self.workloads)


def load_gate_source(root: Path) -> GateSource:
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"{OPTION} {root}: no such folder (a checkout of the base branch)", key=OPTION)
    if not (root / "pipelines").is_dir():
        raise ConfigError(f"{OPTION} {root}: no pipelines/ folder: not a checkout of this repository", key=OPTION)
    try:
        perf, workloads = load_perf_settings(root)
    except ConfigError as exc:
        raise ConfigError(f"{OPTION} {root}: the base's perf settings cannot be used: {exc}", key=OPTION) from None
    return GateSource(root=root.resolve(), perf=perf, workloads=workloads)


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


def _content(path: Path) -> bytes | str | None:
    """The file's bytes, None when there is none, or why it cannot be read (a link to a device,
    a file too large): that counts as a change."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return read_capped(path, "baseline", MAX_PERF_BYTES)
    except ConfigError as exc:
        return str(exc)
