"""The validated pipeline as one frozen object: what `load_pipeline(root)` returns.

Toolchain, Arch and KnownFailure come from model.types (the shared contract); the job matrix,
the per-event rules and the triggers are defined here because only the plan reads them.
Arch-name selections (`all` in the YAML) are already resolved to tuples of names, in archs.yaml
order, so the plan never sees the YAML's shorthand.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mha_ci.model.perf_schema import PerfFile, WorkloadsFile
from mha_ci.model.types import Arch, KnownFailure, Toolchain

ARCH_PLACEHOLDER = "{arch}"     # in triggers.yaml path patterns: each arch of the rule in turn


@dataclass(frozen=True)
class KindMatrix:
    """Where one job kind exists (jobs.yaml `kinds`)."""

    kind: str
    archs: tuple[str, ...]
    sharded: bool
    unavailable: tuple[tuple[str, str], ...]     # (arch, why it never runs there)
    shards: int | None = None                    # sharded: own count; None: the arch's correctness_shards
    per_toolchain: bool = True                   # False: one job per arch, no toolchain (docs)


@dataclass(frozen=True)
class Selection:
    """What a rule adds: `kinds` on `archs` (only where the kind exists)."""

    kinds: tuple[str, ...]
    archs: tuple[str, ...]
    every_arch: bool = False        # written `all` (reasons then say "every arch")
    selected_only: bool = False     # written `selected`: only archs other rules already chose


@dataclass(frozen=True)
class EventRules:
    """jobs.yaml `events.<kind>`: what one kind of event runs."""

    event: str
    runs: tuple[Selection, ...]
    branches: tuple[str, ...] | None
    labels: str                     # "add" | "replace" | "ignore"
    paths: str                      # "apply" | "ignore"
    skip_draft: bool
    documentation_only_kinds: tuple[str, ...] | None


@dataclass(frozen=True)
class LabelRule:
    label: str
    selection: Selection
    description: str = ""


@dataclass(frozen=True)
class PathRule:
    patterns: tuple[str, ...]       # may hold `{arch}`, expanded over selection.archs
    selection: Selection
    description: str = ""


@dataclass(frozen=True)
class Triggers:
    label_prefix: str
    labels: tuple[LabelRule, ...]
    documentation: tuple[str, ...]
    paths: tuple[PathRule, ...]

    def label(self, name: str) -> LabelRule | None:
        return next((rule for rule in self.labels if rule.label == name), None)


@dataclass(frozen=True)
class Pipeline:
    root: Path
    toolchains: dict[str, Toolchain]            # toolchains.yaml order
    archs: dict[str, Arch]                      # archs.yaml order
    known_failures: tuple[KnownFailure, ...]
    kinds: dict[str, KindMatrix]                # model.types.JOB_KINDS order
    events: dict[str, EventRules]
    triggers: Triggers
    correctness_shards: dict[str, int]          # arch -> shards (Arch has no field for it yet)
    perf: PerfFile                              # perf.yaml: method, gate, subset (mha_ci.perf.config)
    workloads: WorkloadsFile                    # workloads.yaml: the sources of the perf shapes

    def shards(self, arch: str) -> int:
        return self.correctness_shards[arch]

    def known_failures_for(self, arch: str, toolchain: str) -> tuple[KnownFailure, ...]:
        return tuple(f for f in self.known_failures if f.arch == arch and f.toolchain == toolchain)

    def toolchain_with_role(self, role: str) -> str | None:
        """The one toolchain of `role` ("golden", "top-of-tree"); None when none or several have it."""
        names = [name for name, t in self.toolchains.items() if t.role == role]
        return names[0] if len(names) == 1 else None
