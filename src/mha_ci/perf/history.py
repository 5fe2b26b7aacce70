"""When did a shape move: the per-shape series of a stored baseline over its git history.

Every commit that changed `perf_baselines/<arch>/<toolchain>.json` (the nightly refresh's, or a
re-roll by hand) is one version of the baseline. Each version is a mha-ci.perf/1 document, so each
shape has, per version, a trimmed mean, a noise band, and the commit that was measured
(provenance.commit). Between two versions a shape can move for three reasons that the stored
files record, and each is marked where it happens:

- `kernel`: the shape's code objects (`code_objects`, {kernel: sha256}) differ;
- `toolchain`: the Triton version of the provenance differs;
- `config`: `src/mha/configs` differs between the two measured commits (only judged when both
  commits are in this clone: a shallow clone cannot say, and then nothing is marked).

Each shape also gets its step: the version where the medians before and after differ by more
than the gate's threshold for the stored noise (mha_ci.perf.history_steps).

A version that is not a valid perf document is skipped with a warning and counted, not fatal:
one bad commit in a long history must not hide the rest. Nothing here needs a GPU.
"""
from __future__ import annotations

import difflib
import fnmatch
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from mha_ci.errors import ConfigError
from mha_ci.git import LONG_TIMEOUT_S
from mha_ci.git import run as run_git
from mha_ci.perf.document import parse_perf
from mha_ci.perf.history_links import commit_link_template
from mha_ci.perf.history_steps import DEFAULT_FLOOR_PCT, DEFAULT_K, Step, StepRule, find_step, step_rule
from mha_ci.perf.shapes import pass_of_key

SCHEMA = "mha-ci.perf-history/1"
CONFIGS_PATH = "src/mha/configs"
MARKS = ("kernel", "config", "toolchain")


def baseline_path(arch: str, toolchain: str) -> str:
    return f"perf_baselines/{arch}/{toolchain}.json"


def artifact_name(arch: str) -> str:
    """The name of the nightly workflow's artifact that holds the history pages of an arch."""
    return f"perf-history-{arch}"


@dataclass
class Version:
    """One committed version of the baseline file."""

    sha: str                    # the commit that wrote this version
    date: str                   # that commit's date (ISO)
    subject: str
    measured_commit: str | None  # provenance.commit: the code the newest run timed
    measured_date: str | None
    triton: str | None
    doc: dict = field(repr=False)

    def to_dict(self) -> dict:
        return {"sha": self.sha, "date": self.date, "subject": self.subject,
                "measured_commit": self.measured_commit, "measured_date": self.measured_date, "triton": self.triton}


@dataclass
class Point:
    version: int                # index into History.versions
    value_us: float | None      # trimmed_mean_us; None when the shape failed in that version
    noise_pct: float | None     # max(noise_pct, between_run_noise_pct): the band drawn around the value
    runs_us: list[float]
    code_objects: dict | None
    error: str | None
    marks: list[str] = field(default_factory=list)
    config_files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        band = (None if self.value_us is None or self.noise_pct is None else
                [self.value_us * (1 - self.noise_pct / 100), self.value_us * (1 + self.noise_pct / 100)])
        return {"version": self.version, "value_us": self.value_us, "noise_pct": self.noise_pct, "band_us": band,
                "runs_us": self.runs_us, "code_objects": self.code_objects, "error": self.error,
                "marks": self.marks, "config_files": self.config_files}


@dataclass
class Series:
    key: str
    points: list[Point]
    bucket: str | None = None       # the config bucket of the newest version that has the shape
    step: Step | None = None        # the largest step of the series (mha_ci.perf.history_steps)

    @property
    def pass_(self) -> str:
        return pass_of_key(self.key)

    def _valued(self) -> list[Point]:
        return [p for p in self.points if p.value_us is not None]

    @property
    def first_us(self) -> float | None:
        valued = self._valued()
        return valued[0].value_us if valued else None

    @property
    def last_us(self) -> float | None:
        valued = self._valued()
        return valued[-1].value_us if valued else None

    @property
    def move_pct(self) -> float | None:
        """Last value against first, in per cent; None with fewer than two values."""
        valued = self._valued()
        if len(valued) < 2 or not valued[0].value_us:
            return None
        return (valued[-1].value_us - valued[0].value_us) / valued[0].value_us * 100   # type: ignore[operator]

    @property
    def step_size(self) -> float:
        """|step| in per cent; 0 without a step: what the overview ranks by."""
        return abs(self.step.delta_pct) if self.step else 0.0

    def to_dict(self) -> dict:
        return {"key": self.key, "pass": self.pass_, "bucket": self.bucket, "first_us": self.first_us,
                "last_us": self.last_us, "move_pct": self.move_pct,
                "step": self.step.to_dict() if self.step else None, "points": [p.to_dict() for p in self.points]}


@dataclass
class History:
    arch: str
    toolchain: str
    path: str
    rev: str
    versions: list[Version]
    skipped: list[dict]          # {"sha", "reason"} of the versions that were not perf documents
    series: list[Series]         # largest move first
    step_rule: StepRule = field(default_factory=lambda: StepRule(DEFAULT_FLOOR_PCT, DEFAULT_K, "default"))
    link_template: str | None = None    # "https://github.com/o/r/commit/{sha}"; None: hashes as text

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "arch": self.arch, "toolchain": self.toolchain, "path": self.path, "rev": self.rev,
                "step_rule": self.step_rule.to_dict(), "link_template": self.link_template,
                "versions": [v.to_dict() for v in self.versions], "skipped": self.skipped,
                "series": [s.to_dict() for s in self.series]}


# git ----------------------------------------------------------------------------------------

# mha_ci.git.run as perf history runs it: bytes (a stored document is read as it was committed),
# over the baselines' history, and saying who needs git.
_git = partial(run_git, text=False, timeout=LONG_TIMEOUT_S,
               unavailable="perf history reads the baselines' git history: git is not on the PATH")


def _check_checkout(root: Path, rev: str) -> None:
    if _git(root, "rev-parse", "--git-dir").returncode != 0:
        raise ConfigError(f"not a git checkout: {root} (perf history reads the baselines from git history)")
    if _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").returncode != 0:
        raise ConfigError(f"'{rev}' names no commit in {root}", key="--rev")


def _commits(root: Path, rev: str, path: str) -> list[tuple[str, str, str]]:
    """(sha, ISO date, subject) of each commit that wrote `path`, oldest first; deletions left out."""
    done = _git(root, "log", "--reverse", "--diff-filter=ACMRT", "--format=%H%x00%cI%x00%s", rev, "--", path)
    if done.returncode != 0:
        raise ConfigError(f"git log failed: {done.stderr.decode(errors='replace').strip()}", file=path)
    return [tuple(line.split("\x00", 2)) for line in done.stdout.decode(errors="replace").splitlines()
            if line.count("\x00") == 2]


def _document(root: Path, sha: str, path: str) -> tuple[dict | None, str | None]:
    """The version of `path` at `sha` as a checked perf document, or (None, why not)."""
    done = _git(root, "show", f"{sha}:{path}")
    if done.returncode != 0:
        return None, f"git show failed: {done.stderr.decode(errors='replace').strip()}"
    try:
        return parse_perf(done.stdout, f"{sha[:12]}:{path}"), None
    except ConfigError as exc:
        return None, str(exc)


def _has_commit(root: Path, sha: str | None) -> bool:
    return bool(sha) and _git(root, "cat-file", "-e", f"{sha}^{{commit}}").returncode == 0


def _config_diff(root: Path, old: str | None, new: str | None) -> list[str] | None:
    """The files of src/mha/configs that differ between two measured commits; None when either
    commit is not in this clone (then nobody can say)."""
    if old == new:
        return []
    if not (_has_commit(root, old) and _has_commit(root, new)):
        return None
    done = _git(root, "diff", "--name-only", str(old), str(new), "--", CONFIGS_PATH)
    return done.stdout.decode().split() if done.returncode == 0 else None


# series -------------------------------------------------------------------------------------

def read_versions(root: Path, arch: str, toolchain: str, rev: str = "HEAD") -> tuple[list[Version], list[dict]]:
    """Every committed version of the baseline (oldest first) and the skipped ones."""
    _check_checkout(root, rev)
    path = baseline_path(arch, toolchain)
    commits = _commits(root, rev, path)
    if not commits:
        raise ConfigError(f"no committed version of {path} in the history of {rev}" + _known(root, rev, arch),
                          file=path)
    versions, skipped = [], []
    for sha, date, subject in commits:
        doc, why = _document(root, sha, path)
        if doc is None:
            print(f"mha-ci perf history: warning: {path} at {sha[:12]} skipped: {why}", file=sys.stderr)
            skipped.append({"sha": sha, "reason": why})
            continue
        prov = doc.get("provenance") or {}
        versions.append(Version(sha=sha, date=date, subject=subject, measured_commit=prov.get("commit"),
                                measured_date=prov.get("date"), triton=(prov.get("versions") or {}).get("triton"),
                                doc=doc))
    return versions, skipped


def _known(root: Path, rev: str, arch: str) -> str:
    """The archs with stored baselines at `rev` and the one closest to `arch`, for the message."""
    done = _git(root, "ls-tree", "--name-only", f"{rev}:perf_baselines")
    archs = sorted(n for n in done.stdout.decode(errors="replace").split() if n not in ("code_objects", "test_durations") and "." not in n) \
        if done.returncode == 0 else []
    if not archs or arch in archs:
        return ""
    near = difflib.get_close_matches(arch, archs, n=1)
    return f"; archs with baselines: {', '.join(archs)}" + (f" (did you mean '{near[0]}'?)" if near else "")


def _point(index: int, entry: dict) -> Point:
    stats = entry.get("stats") or {}
    noises = [n for n in (stats.get("noise_pct"), stats.get("between_run_noise_pct")) if isinstance(n, (int, float))]
    return Point(version=index, value_us=stats.get("trimmed_mean_us"), noise_pct=max(noises) if noises else None,
                 runs_us=list(stats.get("run_trimmed_means_us") or []), code_objects=entry.get("code_objects"),
                 error=entry.get("error"))


def build_series(root: Path, versions: list[Version], keys: list[str], rule: StepRule | None = None) -> list[Series]:
    """Each key's points over the versions it is in, marked, with its step; largest move first."""
    rule = rule or step_rule(root)
    config_diffs: dict[tuple[int, int], list[str] | None] = {}
    series = []
    for key in keys:
        points: list[Point] = []
        bucket = None
        for index, version in enumerate(versions):
            entry = next((e for e in version.doc["results"] if e.get("key") == key), None)
            if entry is None:
                continue
            bucket = entry.get("bucket") if isinstance(entry.get("bucket"), str) else bucket
            point = _point(index, entry)
            if points:
                previous = points[-1]
                old, new = versions[previous.version], version
                if previous.code_objects and point.code_objects and previous.code_objects != point.code_objects:
                    point.marks.append("kernel")
                pair = (previous.version, index)
                if pair not in config_diffs:
                    config_diffs[pair] = _config_diff(root, old.measured_commit, new.measured_commit)
                if config_diffs[pair]:
                    point.marks.append("config")
                    point.config_files = list(config_diffs[pair] or [])
                if old.triton and new.triton and old.triton != new.triton:
                    point.marks.append("toolchain")
            points.append(point)
        valued = [(p.version, p.value_us, p.noise_pct) for p in points if p.value_us is not None]
        series.append(Series(key=key, points=points, bucket=bucket, step=find_step(valued, rule)))
    return sorted(series, key=lambda s: (s.move_pct is None, -abs(s.move_pct or 0.0), s.key))


def select_keys(versions: list[Version], globs: list[str] | None, pass_: str | None) -> list[str]:
    """The keys of any version that match a glob (all without one) and the pass; exit 2 naming a
    glob that matches nothing, or a filter that leaves nothing."""
    every = sorted({e["key"] for v in versions for e in v.doc["results"] if isinstance(e.get("key"), str)})
    chosen = set(every) if not globs else set()
    for glob in globs or ():
        matched = fnmatch.filter(every, glob)
        if not matched:
            raise ConfigError(f"--shape '{glob}' matches no shape of the baseline's history ({len(every)} shapes)",
                              key="--shape")
        chosen.update(matched)
    keys = sorted(k for k in chosen if pass_ is None or pass_of_key(k) == pass_)
    if not keys:
        raise ConfigError(f"no {pass_} shape among the {len(chosen)} selected", key="--pass")
    return keys


def history(root: Path, arch: str, toolchain: str, globs: list[str] | None = None, pass_: str | None = None,
            rev: str = "HEAD") -> History:
    versions, skipped = read_versions(root, arch, toolchain, rev)
    path = baseline_path(arch, toolchain)
    if not versions:
        raise ConfigError(f"none of the {len(skipped)} committed versions of {path} is a perf document", file=path)
    rule = step_rule(root)
    return History(arch=arch, toolchain=toolchain, path=path, rev=rev, versions=versions, skipped=skipped,
                   series=build_series(root, versions, select_keys(versions, globs, pass_), rule),
                   step_rule=rule, link_template=commit_link_template(root))
