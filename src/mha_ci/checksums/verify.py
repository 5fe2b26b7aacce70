"""Checksums on the orchestrating side: run the payload through an executor, compare, gate.

`compute` runs `mha_ci.payloads.checksums compute` in the toolchain (venv, docker or host) and
reads back out/code_objects/<toolchain>.json. `judge` compares it with
perf_baselines/code_objects/<toolchain>.json and fails on any difference, on a compile error,
when the two fresh compiles of the determinism sample disagree (reported separately: that
is a toolchain problem, not a kernel change), when a compile cache entry disagrees with a fresh
compile of its variant (a forged or corrupt cache: the payload checks hits, see
mha_ci.payloads.checksums), on a code object above its arch's resource limits
or on a variant that spills more than its record (mha_ci.checksums.limits). `update` rewrites the stored file atomically.
The stored file is read and checked before anything compiles: a broken one is a configuration
error naming the file (exit 2), not a verdict after an hour of compiles.
The checksums job kind (mha_ci.jobs.checksums) and `mha-ci checksums` both call these.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from mha_ci import baselines
from mha_ci.cache import cache_root
from mha_ci.checksums import limits as limits_mod
from mha_ci.checksums import records as records_mod
from mha_ci.checksums.diff import Difference, compare, render
from mha_ci.checksums.explain import explain
from mha_ci.checksums.slices import Slice
from mha_ci.errors import ConfigError, ExitCode, MhaCiError
from mha_ci.files import write_atomic
from mha_ci.executors.base import Executor, PayloadRun
from mha_ci.model.lockfile import lock_sha256
from mha_ci.model.types import Arch, Toolchain

OUT_SUBDIR = "code_objects"
# Variants compiled again in two fresh processes per toolchain run (the payload's determinism check).
DETERMINISM_SAMPLE = 3


def out_folder(slice_: Slice | None) -> str:
    """Where a run's records and verdict go under the out folder: a shard's in a folder of its
    own, so the shards of one local run (`make ci` runs them in turn) keep each other's files."""
    return OUT_SUBDIR if slice_ is None else f"{OUT_SUBDIR}/slice-{slice_.index}of{slice_.count}"
PAYLOAD_TIMEOUT_S = 4 * 3600


class ChecksumsNoResult(MhaCiError):
    """The payload produced no record file (crash, timeout): a failure, never a pass."""
    exit_code = ExitCode.GATE_FAILED


class OverLimits(MhaCiError):
    """`update` asked to store a code object that cannot launch on its arch: a failed gate."""
    exit_code = ExitCode.GATE_FAILED


def stored_path(root: Path, toolchain: str) -> Path:
    return Path(root) / baselines.code_objects(toolchain)


def read_stored(path: Path) -> records_mod.CodeObjectFile:
    """The stored file of a toolchain, checked; any defect is a ConfigError naming the file."""
    try:
        return records_mod.load(path)
    except records_mod.RecordFileError as exc:
        raise ConfigError(f"stored checksums unreadable: {exc.reason}; restore the file from git or "
                          "rewrite it with `mha-ci checksums update`", file=exc.source) from None


def check_stored(root: Path, toolchain: str) -> None:
    """judge and update read the stored file after the compile: refuse a broken one before it."""
    path = stored_path(root, toolchain)
    if path.exists():
        read_stored(path)


def cache_dir(root: Path) -> Path:
    """$MHA_CI_CHECKSUMS_CACHE, else <the machine's cache (mha_ci.cache.cache_root)>/checksums."""
    if os.environ.get("MHA_CI_CHECKSUMS_CACHE"):
        return Path(os.environ["MHA_CI_CHECKSUMS_CACHE"]).resolve()
    return cache_root(root) / "checksums"


def compile_archs(archs) -> list[Arch]:
    return [a for a in archs if a.compile_target is not None]


@dataclass
class Computed:
    codeobjs: records_mod.CodeObjectFile
    path: Path
    wall_s: float


def _target_args(archs: list[Arch]) -> list[str]:
    """`--target NAME=BACKEND:ARCH:WARP` for each arch that compiles code objects, and
    `--shared-limit NAME=BYTES` for each with limits (the compile stops there when above)."""
    args = []
    for arch in archs:
        if arch.compile_target is not None:
            backend, target_arch, warp = arch.compile_target
            args += ["--target", f"{arch.name}={backend}:{target_arch}:{warp}"]
            if arch.limits is not None:
                args += ["--shared-limit", f"{arch.name}={arch.limits.shared_bytes}"]
    return args


def compute(root: Path, toolchain: Toolchain, archs: list[Arch], executor: Executor, out_dir: Path, *,
            job_arch: Arch | None = None, jobs: int | None = None, only: str | None = None,
            package: str = "mha", determinism_sample: int = DETERMINISM_SAMPLE, use_cache: bool = True,
            platform: str = "cpu", recheck: float | None = None, seed: int | None = None,
            slice_: Slice | None = None) -> Computed:
    """platform: the toolchain environment that compiles. Ahead-of-time compiles need no device,
    so cpu by default; cuda compiles the same variants in the sm90 jobs' image or venv, to show
    that environment produces the same code objects. recheck: the share of the compile cache's
    hits compiled again (None: the payload's default); seed: of the sample and recheck draws
    (None: drawn, and recorded in the result); slice_: compile only that slice of the variants
    (one shard of the checksums job, mha_ci.checksums.slices)."""
    targets = compile_archs(archs)
    toolchain = toolchain.on(platform)
    if not targets:
        raise MhaCiError("no arch with a compile_target selected (archs.yaml compile_target)")
    check_stored(root, toolchain.name)
    relative = f"{out_folder(slice_)}/{toolchain.name}.json"
    args = ["compute", "--out", relative, "--package", package, "--determinism-sample", str(determinism_sample)]
    args += _target_args(targets)
    caches: tuple[Path, ...] = ()
    if use_cache:
        caches = (cache_dir(root) / toolchain.name,)
        args += ["--cache-dir", str(caches[0])]
    stored = stored_path(root, toolchain.name)
    if stored.is_file():    # the claims of the cache are checked against it (relative: the payload runs in the checkout)
        args += ["--stored", str(stored.relative_to(root)) if stored.is_relative_to(root) else str(stored)]
    if recheck is not None:
        args += ["--recheck", str(recheck)]
    if seed is not None:
        args += ["--seed", str(seed)]
    if toolchain.lock and Path(toolchain.lock).is_file():
        args += ["--lock-sha256", lock_sha256(toolchain.lock)]
    if jobs:
        args += ["--jobs", str(jobs)]
    if only:
        args += ["--only", only]
    if slice_ is not None:
        args += ["--slice", str(slice_)]
    out_file = Path(out_dir) / relative
    if out_file.exists():
        out_file.unlink()          # never read a previous run's file as this run's result
    result = executor.run(PayloadRun(module="checksums", args=tuple(args), toolchain=toolchain,
                                     arch=job_arch or targets[0], out_dir=Path(out_dir),
                                     timeout_s=PAYLOAD_TIMEOUT_S, log_prefix=f"checksums {toolchain.name}",
                                     caches=caches))
    if result.exit_code == ExitCode.CONFIG_ERROR and only and out_file.is_file() and not result.error:
        raise _no_variant_matches(only, _read_fresh(out_file, toolchain.name))
    if result.error or result.timed_out or not out_file.is_file() or result.exit_code not in (0, 1):
        raise ChecksumsNoResult(f"checksums payload for {toolchain.name} produced no result "
                                f"(exit {result.exit_code}{', ' + result.error if result.error else ''}); "
                                "see its output above")
    return Computed(_read_fresh(out_file, toolchain.name), out_file, float(result.provenance.get("wall_s", 0.0)))


def _read_fresh(path: Path, toolchain: str) -> records_mod.CodeObjectFile:
    try:
        return records_mod.load(path)
    except records_mod.RecordFileError as exc:
        raise ChecksumsNoResult(f"checksums payload for {toolchain} wrote an unreadable record file: {exc}") from None


def _no_variant_matches(only: str, fresh: records_mod.CodeObjectFile) -> ConfigError:
    """The payload enumerated every variant and none has `only` in its key (exit 2 of the payload)."""
    closest = [str(k) for k in (fresh.stats or {}).get("closest", [])]
    hint = f"; closest keys: {', '.join(closest)}" if closest else ""
    return ConfigError(f"no variant matches --only {only!r} (a substring of the variant keys){hint}", key="--only",
                       suggestion=closest[0] if closest else None)


@dataclass
class Verdict:
    toolchain: str
    differences: list[Difference] = field(default_factory=list)
    compile_errors: list[dict] = field(default_factory=list)
    determinism: dict | None = None
    missing_stored: bool = False
    over_limits: list[limits_mod.Breach] = field(default_factory=list)
    spills_grown: list[limits_mod.SpillGrowth] = field(default_factory=list)
    table: str = ""

    cache_check: dict | None = None

    @property
    def nondeterministic(self) -> bool:
        return self.determinism is not None and not self.determinism.get("agree", False)

    @property
    def cache_mismatches(self) -> list[dict]:
        return list((self.cache_check or {}).get("mismatches") or [])

    @property
    def failed(self) -> bool:
        return (self.missing_stored or bool(self.compile_errors) or self.nondeterministic
                or bool(self.cache_mismatches) or bool(self.over_limits) or bool(self.spills_grown)
                or any(d.is_failure for d in self.differences))

    def to_json(self) -> dict:
        return {"toolchain": self.toolchain, "failed": self.failed, "missing_stored": self.missing_stored,
                "nondeterministic": self.nondeterministic, "determinism": self.determinism,
                "cache_check": self.cache_check,
                "compile_errors": self.compile_errors,
                "over_limits": [b.to_json() for b in self.over_limits],
                "spills_grown": [g.to_json() for g in self.spills_grown],
                "differences": [{"status": d.status, "key": d.key, "describe": d.describe(), "why": d.why,
                                 "deltas": {k: list(v) for k, v in d.deltas.items()}} for d in self.differences]}


def judge(root: Path, computed: Computed, archs: list[Arch], only: str | None = None,
          slice_: Slice | None = None) -> Verdict:
    """Compare with the stored file, restricted to the archs computed (and to the slice of keys
    computed: a stored record of another shard's slice is that shard's to compare)."""
    fresh = computed.codeobjs
    name = fresh.toolchain.get("name", computed.path.stem)
    names = [a.name for a in compile_archs(archs)]
    verdict = Verdict(toolchain=computed.path.stem, compile_errors=list(fresh.errors), determinism=fresh.determinism,
                      over_limits=_over_limits(fresh, archs), cache_check=fresh.cache_check)
    path = stored_path(root, computed.path.stem)
    lines = []
    if not path.is_file():
        verdict.missing_stored = True
        lines.append(f"no stored checksums for {name}: {path} does not exist "
                     f"(run `mha-ci checksums update --toolchain {computed.path.stem}`)")
    else:
        stored = read_stored(path).only_archs(names).only_keys(only).only_slice(slice_)
        # a refused variant has no code object: its failure is the breach, not a "removed"
        refused = {r["key"] for r in fresh.refused}
        stored = replace(stored, records=tuple(r for r in stored.records if r.key not in refused))
        verdict.differences = explain(compare(stored, fresh.only_archs(names)), stored, fresh)
        verdict.spills_grown = limits_mod.spill_growth(stored, fresh.only_archs(names))
        lines.append(render(verdict.differences, title=f"code objects of {computed.path.stem} vs {path.relative_to(root)}"
                            if path.is_relative_to(root) else f"code objects vs {path}",
                            total=len(fresh.records)).rstrip())
    lines += resource_lines(verdict, fresh.only_archs(names).records, archs)
    by_cause: dict[str, list[str]] = {}
    for error in verdict.compile_errors:
        by_cause.setdefault(records_mod.error_summary(error["error"])[:400], []).append(error["key"])
    for cause, keys in sorted(by_cause.items(), key=lambda item: -len(item[1])):
        shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        lines.append(f"  COMPILE ERROR ({len(keys)} variants) {shown}: {cause}")
    det = verdict.determinism
    if det is not None and verdict.nondeterministic:
        lines.append("  NONDETERMINISTIC: two fresh compiles of the same variant gave different code objects:")
        for m in det.get("mismatches", []):
            lines.append(f"    {m['key']}: record {str(m['record'])[:16]}, fresh {str(m['fresh_1'])[:16]}, "
                         f"fresh {str(m['fresh_2'])[:16]}")
        for p in det.get("problems", []):
            lines.append(f"    {p.splitlines()[-1] if p else p}")
    elif det is not None:
        lines.append(f"  determinism: {len(det.get('sample', []))} variants compiled twice "
                     f"in fresh processes: identical (seed {det.get('seed')})")
    lines += cache_lines(verdict.cache_check)
    verdict.table = "\n".join(lines) + "\n"
    return verdict


def cache_lines(check: dict | None) -> list[str]:
    """What the payload found when it compiled compile cache hits again (nothing without hits)."""
    if not check or not check.get("hits"):
        return []
    lines = [f"  COMPILE CACHE: {m['key']}: the cached entry says sha {str(m.get('cached'))[:16]}, a fresh compile "
             f"gives {str(m.get('fresh'))[:16]} ({m.get('found_by', 'compiled again')}); the cache is forged or "
             "corrupt: the entry was replaced, and other entries of it may be wrong too (--no-cache compiles "
             "everything)" for m in check.get("mismatches") or []]
    rechecked, share = len(check.get("rechecked") or []), check.get("share", 0)
    claims = check.get("claims", 0)
    why = [f"{claims} claiming the stored code object for changed inputs (the notes above: `mha-ci checksums "
           "update` refreshes their records)"] if claims else []
    why.append("every hit of an --only run" if share >= 1 else f"{share:.0%} of the rest drawn")
    verdict = "identical" if not lines else f"{len(lines)} differ"
    lines.append(f"  compile cache: {rechecked} of {check['hits']} hits compiled again ({', '.join(why)}; seed "
                 f"{check.get('seed')}): {verdict}")
    return lines


def _over_limits(fresh: records_mod.CodeObjectFile, archs) -> list[limits_mod.Breach]:
    """Code objects above their arch's limits, and the compiles refused before code generation."""
    found = limits_mod.breaches(fresh.records, compile_archs(archs)) + limits_mod.refusal_breaches(fresh.refused)
    return sorted(found, key=lambda b: (b.arch, b.key, b.figure))


def resource_lines(verdict: Verdict, records, archs) -> list[str]:
    """Limit breaches (each a failure), spills that grew (each a failure), then every spill."""
    lines = [f"  OVER LIMIT {b.describe()}" for b in verdict.over_limits]
    lines += [f"  SPILLS GREW {g.describe()}" for g in verdict.spills_grown]
    lines += limits_mod.spill_summary(records)
    unlimited = limits_mod.unlimited_archs(archs)
    if unlimited:
        lines.append(f"  no resource limits in archs.yaml for {', '.join(unlimited)}: their code objects are not gated")
    return lines


def write_verdict(out_dir: Path, verdict: Verdict, slice_: Slice | None = None) -> list[Path]:
    base = Path(out_dir) / out_folder(slice_)
    base.mkdir(parents=True, exist_ok=True)
    text, data = base / f"{verdict.toolchain}.verify.txt", base / f"{verdict.toolchain}.verify.json"
    text.write_text(verdict.table)
    write_atomic(data, json.dumps(verdict.to_json(), indent=1) + "\n")
    return [text, data]


def update(root: Path, computed: Computed, archs: list[Arch], only: str | None = None) -> tuple[Path, list[Difference]]:
    """Rewrite the stored file (atomically); with an arch subset, the other archs' records stay.
    Refuses to store a run with compile errors or a failed determinism check."""
    fresh = computed.codeobjs
    if fresh.errors:
        raise MhaCiError(f"not updating: {len(fresh.errors)} variants failed to compile (first: {fresh.errors[0]['key']})")
    if fresh.determinism is not None and not fresh.determinism.get("agree", False):
        raise MhaCiError("not updating: the determinism check failed (two fresh compiles disagree)")
    if fresh.cache_mismatches:
        raise MhaCiError(f"not updating: {len(fresh.cache_mismatches)} compile cache entries disagree with fresh "
                         f"compiles (first: {fresh.cache_mismatches[0]['key']}); the cache is forged or corrupt, "
                         "so other records from it may be wrong: run update with --no-cache")
    over = _over_limits(fresh, archs)
    if over:
        raise OverLimits(f"not updating: {len(over)} code objects exceed their arch's limits "
                         f"(first: {over[0].describe()})")
    path = stored_path(root, computed.path.stem)
    stored = read_stored(path) if path.exists() else None
    names = [a.name for a in compile_archs(archs)]
    merged = records_mod.merge(stored, fresh, names, only)
    merged = records_mod.CodeObjectFile(merged.toolchain, merged.records)
    differences = explain(compare(stored, merged), stored, merged) if stored else []
    records_mod.dump(merged, path, stored=True)
    return path, differences
