"""pipelines/*.yaml -> one validated, frozen Pipeline; and `validate_all` for `mha-ci validate`.

Each file is checked against its schema first (model.schema, through yaml_source so errors name
file:line, key path and the closest valid key), then against the other files: every arch,
toolchain and job kind one file names must exist where it is defined, and every toolchain's lock
file must exist and pin torch and triton, and every shape key perf.yaml names must be one of
workloads.yaml's. All problems are ConfigErrors (exit 2). A pipelines/*.yaml that is not one of
PIPELINE_FILES is an error: a file the runner ignores would be configuration that does nothing.
"""
from __future__ import annotations

import stat
from pathlib import Path
from typing import Any, Generic, Iterable, Sequence

from mha_ci.errors import ConfigError
from mha_ci.model import schema
from mha_ci.model.lockfile import normalise, read_hashes, read_pins
from mha_ci.model.perf_schema import PERF_FILE, WORKLOADS_FILE, PerfFile, WorkloadsFile
from mha_ci.model.pipeline import (ARCH_PLACEHOLDER, EventRules, KindMatrix, LabelRule, PathRule,
                                   Pipeline, Selection, Triggers)
from mha_ci.model.types import (EVENT_KINDS, JOB_KINDS, Arch, KnownFailure, PlatformEnvironment, ResourceLimits,
                                Toolchain)
from mha_ci.model.yaml_source import M, closest, line_of, load_yaml, validate
from mha_ci.perf.workloads import generate

PIPELINE_FILES = ("toolchains.yaml", "archs.yaml", "jobs.yaml", "triggers.yaml", "known_failures.yaml",
                  PERF_FILE, WORKLOADS_FILE)
REQUIRED_PINS = ("torch", "triton")          # what every payload imports; pincheck compares them


# -- loading ---------------------------------------------------------------------------------

class _Source(Generic[M]):
    """One parsed file: its raw data (which remembers lines), its spec and where it came from."""

    def __init__(self, root: Path, filename: str, model: type[M]) -> None:
        self.path = root / "pipelines" / filename
        if not self.path.is_file():
            raise ConfigError(f"missing pipeline file pipelines/{filename}", file=str(self.path))
        self.raw = load_yaml(self.path)
        self.spec = validate(model, self.raw, self.path)

    def error(self, loc: tuple, message: str, suggestion: str | None = None) -> ConfigError:
        key_path = " / ".join(str(part) for part in loc)
        return ConfigError(f"{key_path}: {message}", file=str(self.path), line=line_of(self.raw, loc),
                           key=str(loc[-1]), suggestion=suggestion)

    def check_name(self, loc: tuple, what: str, name: str, known: Iterable[str]) -> str:
        known = list(known)
        if name not in known:
            raise self.error(loc, f"unknown {what} '{name}'; known: {', '.join(known)}", closest(name, known))
        return name


def load_pipeline(root: Path) -> Pipeline:
    root = Path(root)
    if not (root / "pipelines").is_dir():
        raise ConfigError(f"no pipelines/ folder in {root}")
    toolchains = _load_toolchains(_Source(root, "toolchains.yaml", schema.ToolchainsFile), root)
    archs_source = _Source(root, "archs.yaml", schema.ArchsFile)
    archs = _load_archs(archs_source)
    kinds, events = _load_jobs(_Source(root, "jobs.yaml", schema.JobsFile), tuple(archs))
    triggers = _load_triggers(_Source(root, "triggers.yaml", schema.TriggersFile), kinds, tuple(archs))
    known = _load_known_failures(_Source(root, "known_failures.yaml", schema.KnownFailuresFile),
                                 tuple(archs), tuple(toolchains))
    shards = {name: spec.correctness_shards for name, spec in archs_source.spec.archs.items()}
    perf, workloads = _load_perf(_Source(root, PERF_FILE, PerfFile), _Source(root, WORKLOADS_FILE, WorkloadsFile))
    return Pipeline(root=root, toolchains=toolchains, archs=archs, known_failures=known, kinds=kinds,
                    events=events, triggers=triggers, correctness_shards=shards, perf=perf, workloads=workloads)


def load_perf_settings(root: Path) -> tuple[PerfFile, WorkloadsFile]:
    """pipelines/perf.yaml and pipelines/workloads.yaml of `root` alone, checked as load_pipeline
    checks them: what a perf verdict is judged by (mha_ci.perf.gate_source)."""
    return _load_perf(_Source(Path(root), PERF_FILE, PerfFile), _Source(Path(root), WORKLOADS_FILE, WorkloadsFile))


def load_known_failures(root: Path, arch_names: Sequence[str],
                        toolchain_names: Sequence[str]) -> tuple[KnownFailure, ...]:
    """pipelines/known_failures.yaml of `root` alone, checked as load_pipeline checks it but for
    the arch and toolchain names, which are another checkout's: the known failures a pull request
    is judged by (mha_ci.perf.gate_source). An entry naming an arch or toolchain not among them is
    left out rather than an error: it applies to no job of that checkout, and refusing it would
    leave a pull request that renames a toolchain no GPU run until it is merged."""
    return _load_known_failures(_Source(Path(root), "known_failures.yaml", schema.KnownFailuresFile),
                                tuple(arch_names), tuple(toolchain_names), drop_unknown=True)


def _load_toolchains(source: _Source[schema.ToolchainsFile], root: Path) -> dict[str, Toolchain]:
    toolchains = {}
    for name, spec in source.spec.toolchains.items():
        cpu = _platform_environment(source, root, ("toolchains", name, "lock"), spec.lock, ())
        platforms = {"cpu": cpu}
        for platform, platform_spec in spec.platforms.items():
            loc = ("toolchains", name, "platforms", platform)
            platforms[platform] = _platform_environment(source, root, (*loc, "lock"), platform_spec.lock,
                                                        tuple(platform_spec.only))
        toolchains[name] = Toolchain(name=name, role=spec.role, lock=cpu.lock, container_dir=cpu.lock.parent,
                                     pins=dict(cpu.pins), platform="cpu", platforms=platforms)
    return toolchains


def _not_a_file(path: Path) -> str:
    """What stands at `path` instead of a regular file, as words for an error."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "not found"
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO, not a file"
    return "is not a regular file (a socket or a device)"


def _platform_environment(source: _Source[Any], root: Path, loc: tuple, relative: str,
                          only: tuple[str, ...]) -> PlatformEnvironment:
    lock = root / relative
    if not lock.resolve().is_relative_to(Path(root).resolve()):   # nor read, nor quoted in the error
        raise source.error(loc, f"lock file {relative} is outside the checkout; locks live under containers/")
    if not lock.is_file():
        raise source.error(loc, f"lock file {relative} {_not_a_file(lock)} (looked for {lock})")
    try:
        pins = read_pins(lock)
    except ValueError as exc:
        raise source.error(loc, f"bad lock file: {exc}") from None
    # Every executor installs with --require-hashes, which refuses a lock with one pin unhashed:
    # say so here, before any job, rather than in the middle of an environment build.
    unhashed = [name for name, hashes in read_hashes(lock).items() if not hashes]
    if unhashed:
        raise source.error(loc, f"lock file {relative} pins {', '.join(unhashed)} without --hash=sha256:...")
    missing = [pin for pin in REQUIRED_PINS if pin not in pins]
    if missing:
        raise source.error(loc, f"lock file {relative} pins no {', '.join(missing)}")
    unknown = [n for n in only if normalise(n) not in pins]
    if unknown:
        raise source.error((*loc[:-1], "only"), f"only names {', '.join(unknown)}, which {relative} does not pin")
    chosen = tuple(normalise(n) for n in only)
    return PlatformEnvironment(lock=lock.resolve(), pins={k: v for k, v in pins.items() if not chosen or k in chosen},
                               only=chosen)


def _load_archs(source: _Source[schema.ArchsFile]) -> dict[str, Arch]:
    archs = {}
    for name, spec in source.spec.archs.items():
        target = spec.compile_target
        archs[name] = Arch(
            name=name, vendor=spec.vendor, description=spec.description, device=spec.device,
            runner_labels=tuple(spec.runner_labels), visible_devices_env=spec.visible_devices_env,
            compile_target=(target.backend, target.arch, target.warp_size) if target else None,
            workers=spec.workers,
            limits=ResourceLimits(spec.limits.shared_bytes, spec.limits.registers) if spec.limits else None)
    return archs


def _arch_list(source: _Source[Any], loc: tuple, names: Sequence[str], arch_names: tuple[str, ...]) -> tuple[str, ...]:
    """Checked arch names, in archs.yaml order (so plans come out in one order)."""
    seen = set()
    for index, name in enumerate(names):
        source.check_name((*loc, index), "arch", name, arch_names)
        if name in seen:
            raise source.error((*loc, index), f"arch '{name}' listed twice")
        seen.add(name)
    return tuple(a for a in arch_names if a in seen)


def _kind_list(source: _Source[Any], loc: tuple, names: Sequence[str]) -> tuple[str, ...]:
    for index, name in enumerate(names):
        source.check_name((*loc, index), "job kind", name, JOB_KINDS)
    return tuple(k for k in JOB_KINDS if k in names)


def _selection(source: _Source[Any], loc: tuple, kinds: Sequence[str], archs: Any,
               arch_names: tuple[str, ...]) -> Selection:
    kind_names = _kind_list(source, (*loc, "kinds"), kinds)
    if archs == "all":
        return Selection(kinds=kind_names, archs=arch_names, every_arch=True)
    if archs == "selected":
        return Selection(kinds=kind_names, archs=arch_names, selected_only=True)
    return Selection(kinds=kind_names, archs=_arch_list(source, (*loc, "archs"), archs, arch_names))


def _load_jobs(source: _Source[schema.JobsFile], arch_names: tuple[str, ...]) -> tuple[dict[str, KindMatrix], dict[str, EventRules]]:
    kinds = {}
    for kind in JOB_KINDS:
        kind_spec: schema.KindSpec | None = getattr(source.spec.kinds, kind)
        if kind_spec is None:
            kinds[kind] = KindMatrix(kind=kind, archs=(), sharded=False, unavailable=())
            continue
        loc = ("kinds", kind)
        archs = _arch_list(source, (*loc, "archs"), kind_spec.archs, arch_names)
        for arch in kind_spec.unavailable:
            source.check_name((*loc, "unavailable", arch), "arch", arch, arch_names)
            if arch in archs:
                raise source.error((*loc, "unavailable", arch), f"arch '{arch}' is both in archs and unavailable")
        unavailable = tuple((a, kind_spec.unavailable[a]) for a in arch_names if a in kind_spec.unavailable)
        if kind_spec.shards is not None and not kind_spec.sharded:
            raise source.error((*loc, "shards"), "shards is set but the kind is not sharded (sharded: true)")
        kinds[kind] = KindMatrix(kind=kind, archs=archs, sharded=kind_spec.sharded, unavailable=unavailable,
                                 shards=kind_spec.shards, per_toolchain=kind_spec.per_toolchain)

    events = {}
    for event in EVENT_KINDS:
        event_spec: schema.EventSpec = getattr(source.spec.events, event)
        loc = ("events", event)
        runs = tuple(_selection(source, (*loc, "runs", i), run.kinds, run.archs, arch_names)
                     for i, run in enumerate(event_spec.runs))
        docs_kinds = None
        if event_spec.documentation_only_kinds is not None:
            docs_kinds = _kind_list(source, (*loc, "documentation_only_kinds"), event_spec.documentation_only_kinds)
        events[event] = EventRules(
            event=event, runs=runs, branches=tuple(event_spec.branches) if event_spec.branches is not None else None,
            labels=event_spec.labels, paths=event_spec.paths, skip_draft=event_spec.skip_draft,
            documentation_only_kinds=docs_kinds)
    return kinds, events


def _load_triggers(source: _Source[schema.TriggersFile], kinds: dict[str, KindMatrix], arch_names: tuple[str, ...]) -> Triggers:
    spec: schema.TriggersFile = source.spec
    labels = []
    for label, label_rule in spec.labels.items():
        label_loc = ("labels", label)
        if not label.startswith(spec.label_prefix):
            raise source.error(label_loc, f"label '{label}' does not start with label_prefix '{spec.label_prefix}'")
        selection = _selection(source, label_loc, label_rule.kinds, label_rule.archs, arch_names)
        labels.append(LabelRule(label=label, selection=selection, description=label_rule.description))
    paths = []
    for index, path_rule in enumerate(spec.paths):
        path_loc = ("paths", index)
        for p_index, pattern in enumerate(path_rule.patterns):
            stripped = pattern.replace(ARCH_PLACEHOLDER, "")
            if "{" in stripped or "}" in stripped:
                raise source.error((*path_loc, "patterns", p_index),
                                   f"pattern '{pattern}': the only placeholder is {ARCH_PLACEHOLDER}")
        paths.append(PathRule(patterns=tuple(path_rule.patterns),
                              selection=_selection(source, path_loc, path_rule.kinds, path_rule.archs, arch_names),
                              description=path_rule.description))
    return Triggers(label_prefix=spec.label_prefix, labels=tuple(labels),
                    documentation=tuple(spec.documentation), paths=tuple(paths))


def _load_known_failures(source: _Source[schema.KnownFailuresFile], arch_names: tuple[str, ...],
                         toolchain_names: tuple[str, ...], drop_unknown: bool = False) -> tuple[KnownFailure, ...]:
    failures, seen = [], set()
    for index, entry in enumerate(source.spec.known_failures):
        loc = ("known_failures", index)
        if drop_unknown and (entry.arch not in arch_names or entry.toolchain not in toolchain_names):
            continue                    # load_known_failures says why
        source.check_name((*loc, "arch"), "arch", entry.arch, arch_names)
        source.check_name((*loc, "toolchain"), "toolchain", entry.toolchain, toolchain_names)
        identity = (entry.test, entry.arch, entry.toolchain)
        if identity in seen:
            raise source.error((*loc, "test"), f"'{entry.test}' is listed twice for {entry.arch} / {entry.toolchain}")
        seen.add(identity)
        failures.append(KnownFailure(test=entry.test, arch=entry.arch, toolchain=entry.toolchain, reason=entry.reason))
    return tuple(failures)


def _load_perf(perf: _Source[PerfFile], workloads: _Source[WorkloadsFile]) -> tuple[PerfFile, WorkloadsFile]:
    """perf.yaml and workloads.yaml; the shapes perf.yaml's subset always keeps must exist."""
    keys = {w.key for w in generate(workloads.spec)}
    for index, key in enumerate(perf.spec.subset.always):
        if key not in keys:
            loc = ("subset", "always", index)
            raise ConfigError(f"subset / always / {index}: '{key}' is not a workload shape key", file=str(perf.path),
                              line=line_of(perf.raw, loc), key="always", suggestion=closest(key, keys))
    return perf.spec, workloads.spec


# -- mha-ci validate -------------------------------------------------------------------------

def validate_all(root: Path, files: Sequence[Path] | None = None) -> list[Path]:
    """Validate the given pipeline files (default: every pipelines/*.yaml under root); returns
    the files checked. A file's checkout root is the parent of its folder, so the files it refers
    to (archs.yaml, the lock files) are looked up next to it. The files load_pipeline reads are
    always validated together: each refers to the others."""
    known = PIPELINE_FILES
    if files is None:
        folder = Path(root) / "pipelines"
        if not folder.is_dir():
            raise ConfigError(f"no pipelines/ folder in {root}")
        files = sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])
        missing = [name for name in PIPELINE_FILES if not (folder / name).is_file()]
        if missing:
            raise ConfigError(f"missing pipeline file pipelines/{missing[0]}", file=str(folder / missing[0]))
    files = [Path(f).resolve() for f in files]
    for path in files:
        if not path.is_file():
            raise ConfigError("no such file", file=str(path))
        if path.name not in known:
            raise ConfigError(f"unknown pipeline file '{path.name}'; known: {', '.join(known)}",
                              file=str(path), suggestion=closest(path.name, known))
    loaded_roots: set[Path] = set()
    for path in files:
        file_root = path.parent.parent
        if file_root not in loaded_roots:
            load_pipeline(file_root)
            loaded_roots.add(file_root)
    return files
