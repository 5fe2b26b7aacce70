"""The perf gate: classify every shape of a candidate against a baseline.

Per shape (both sides' `trimmed_mean_us`):
  delta_pct     = 100 * (candidate - baseline) / baseline
  threshold_pct = max(floor_pct, k * sqrt(noise_baseline^2 + noise_candidate^2))
  regression    delta_pct >  threshold_pct
  improvement   delta_pct < -threshold_pct
  ok            otherwise
  invalid       the gate cannot judge: missing on one side, failed on one side, either side's
                noise (the one the threshold uses) above invalid_noise_pct, or the two
                measurements are not comparable
                (mha_ci.perf.comparable: different GPU, arch, kernel, or Triton release
                without --cross-toolchain; torch, driver and unpinned sides are noted, not refused).
An invalid shape whose measurement is broken - a shape the candidate should have measured and
did not, a failed run, a trimmed mean, median, max or noise that is not a finite number, a time
outside [MIN_TIME_US, MAX_TIME_US] (1 ns to an hour), a noise outside [0, MAX_NOISE_PCT], on
either side - fails the gate whatever the policy says: a gate that cannot
see a shape must not report it as passing. A candidate without `selection` is a full measurement:
every baseline shape it lacks is broken. Only a shape new to the candidate (no baseline yet) and a
noisy measurement are invalid without failing (unless `fail_on_invalid`), and only while they are
few: a verdict needs at least one judged shape (improvement, ok or regression), and more than
`max_invalid_pct` % of the compared shapes invalid fails the gate, since a gate blind to that many
cannot hold its planted-slowdown catch rate (pipelines/perf.yaml).
The two noises are combined in quadrature because the delta is a difference of two independent
estimates. A document made from several runs (mha_ci.perf.combine: a baseline, or a candidate
measured with --repeat) also knows how far a shape moves between runs; its noise is the larger
of the within-run and the between-run figure, for the threshold and the invalid limit alike (a
limit on the within-run figure alone let a between-run noise of 30 % widen the threshold to hide
+50 %). Stalls (mha_ci.perf.stats) ride along per shape and do not change the status; they
fail the gate only with `fail_on_stall`.

Each verdict names its pass (fwd or bwd, from the key) and whether both sides ran the same code
objects (`same_code`: both documents record the sha256 of every kernel the shape launched, and
they are equal). A shape with the same code on both sides cannot have changed speed through the
change under test: its delta is a free A/A sample of the comparison's noise, and the reports say
so. Such a shape is still judged, since host code (the launch wrapper, validation) can slow it
without touching a code object, unless the comparison knows that host code is byte-identical on
both sides too (`unchanged_host`: a same-GPU A/B whose change is confined to src/mha/configs). Then
a move beyond its threshold is an A/A move, status ok with the move in its reason (why, and the
measurement behind it: docs/perf-method.md, "The pull-request A/B").

Where the documents carry numerics (output digests and errors against a float64 reference), each
verdict also holds its numerics class (mha_ci.perf.numerics: identical, reordered, less-accurate,
nondeterministic, wrong, unmeasured). A wrong or nondeterministic shape fails the gate whatever
its speed; a less-accurate one fails unless its key matches an --accept-less-accurate glob (a
precision trade made on purpose, listed as accepted). When the comparison requires numerics
(`perf measure --against`, whose both sides ran the payload that measures them, or a candidate
that has any), a judged shape without them fails the gate: a check that silently did not run
must not read as passed. Documents without numerics compare as before.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from fnmatch import fnmatchcase
from typing import TypeGuard

from mha_ci.perf import comparable, interval, numerics
from mha_ci.perf.numerics import NumericsVerdict
from mha_ci.perf.shapes import pass_of_key
from mha_ci.perf.stats import stall_from_summary

STATUSES = ("improvement", "ok", "regression", "invalid")
# What a measured time can be, in us: no dispatch takes under a nanosecond, none of the workloads
# an hour. Outside, it is not a measurement: 5e-324 us read as a 100 % improvement, and a delta
# against it overflowed to Infinity (not JSON).
MIN_TIME_US = 0.001
MAX_TIME_US = 3.6e9
# A noise (a standard deviation of rep means, in % of their median) below 0 is not one, and one
# of a hundred times the value says the shape was not measured.
MAX_NOISE_PCT = 1e4


@dataclass(frozen=True)
class GatePolicy:
    """The gate's settings. No defaults: pipelines/perf.yaml is their one home, and
    mha_ci.perf.config.gate_policy builds this from it."""
    floor_pct: float
    k: float
    invalid_noise_pct: float
    stall_factor: float
    stall_min_excess_us: float
    fail_on_stall: bool
    fail_on_invalid: bool
    max_invalid_pct: float
    less_accurate_factor: float         # numerics: head/base rms_rel above this is "less accurate"
    error_floor: float                  # numerics: the smallest rms_rel a ratio is taken of
    # Every judged shape must carry numerics (perf measure --against: both sides ran the payload
    # that measures them). Without it they are required only when the candidate has any.
    require_numerics: bool
    # numerics: outputs that may differ on the same code where the kernel declares them unordered
    may_be_unordered: tuple[str, ...] = ()

    def threshold_pct(self, noise_base: float, noise_cand: float) -> float:
        return max(self.floor_pct, self.k * math.hypot(noise_base, noise_cand))


@dataclass(frozen=True)
class ShapeVerdict:
    key: str
    baseline_us: float | None
    candidate_us: float | None
    delta_pct: float | None
    threshold_pct: float | None
    status: str
    stall: dict | None                  # the candidate's worst stall, or None
    reason: str = ""
    noise_baseline_pct: float | None = None
    noise_candidate_pct: float | None = None
    shape: dict | None = None
    bucket: str | None = None
    tags: tuple[str, ...] = ()
    tp: tuple[int, ...] = ()
    broken: bool = False                # invalid because a measurement is missing, failed or not a time
    # 95 % bootstrap interval of delta_pct from both sides' rep means (mha_ci.perf.interval);
    # None where either side has too few reps or no delta
    ci_pct: tuple[float, float] | None = None
    same_code: bool | None = None       # both sides launched identical code objects; None: unknown
    numerics: NumericsVerdict | None = None     # None: neither side measured numerics
    numerics_accepted: bool = False     # less accurate, and accepted by an --accept-less-accurate glob

    @property
    def pass_(self) -> str:
        return pass_of_key(self.key)

    @property
    def numerics_class(self) -> str | None:
        return None if self.numerics is None else self.numerics.class_

    def to_dict(self) -> dict:
        data = asdict(self)
        data["numerics"] = None if self.numerics is None else self.numerics.to_dict()
        data["pass"] = self.pass_
        data["tags"], data["tp"] = list(self.tags), list(self.tp)
        for name in ("baseline_us", "candidate_us", "delta_pct", "threshold_pct",
                     "noise_baseline_pct", "noise_candidate_pct"):
            if data[name] is not None:
                data[name] = round(data[name], 3)
        if self.ci_pct is not None:
            data["ci_pct"] = [round(self.ci_pct[0], 3), round(self.ci_pct[1], 3)]
        return data


@dataclass(frozen=True)
class Comparison:
    shapes: tuple[ShapeVerdict, ...]
    policy: GatePolicy
    refused: str | None = None          # why the two documents are not comparable, if they are not
    notes: tuple[str, ...] = ()         # differences that do not refuse it (torch, driver, unpinned)
    cross_toolchain: bool = False
    not_measured: int = 0               # baseline shapes outside the candidate's subset
    unaccounted: int = 0                # shapes the candidate's selection counts but its results lack
    baseline_provenance: dict = field(default_factory=dict)
    candidate_provenance: dict = field(default_factory=dict)
    numerics_required: bool = False     # every judged shape must carry numerics (fail closed)
    accept_less_accurate: tuple[str, ...] = ()      # the globs of --accept-less-accurate
    unchanged_host: bool = False        # host code byte-identical on both sides (see the module doc)

    @property
    def summary(self) -> dict[str, int]:
        counts = {status: 0 for status in STATUSES}
        for verdict in self.shapes:
            counts[verdict.status] += 1
        return counts

    @property
    def summary_by_pass(self) -> dict[str, dict[str, int]]:
        """The summary of each pass the comparison holds (fwd before bwd)."""
        out: dict[str, dict[str, int]] = {}
        for verdict in sorted(self.shapes, key=lambda v: v.pass_ != "fwd"):
            counts = out.setdefault(verdict.pass_, {status: 0 for status in STATUSES})
            counts[verdict.status] += 1
        return out

    @property
    def numerics_summary(self) -> dict[str, int] | None:
        """How many shapes fell in each numerics class (mha_ci.perf.numerics.CLASSES order), with
        `accepted` counting the less-accurate ones accepted; None when no shape has a verdict."""
        judged = [v for v in self.shapes if v.numerics is not None]
        if not judged:
            return None
        counts = {name: sum(1 for v in judged if v.numerics_class == name) for name in numerics.CLASSES}
        return counts | {"accepted": sum(1 for v in judged if v.numerics_accepted)}

    def numerics_of(self, class_: str) -> list[ShapeVerdict]:
        return [v for v in self.shapes if v.numerics_class == class_]

    @property
    def stalled(self) -> list[ShapeVerdict]:
        return [v for v in self.shapes if v.stall]

    @property
    def broken(self) -> list[ShapeVerdict]:
        return [v for v in self.shapes if v.broken]

    @property
    def judged(self) -> int:
        """Shapes with a verdict (improvement, ok or regression)."""
        return len(self.shapes) - self.summary["invalid"]

    @property
    def gate_failed(self) -> bool:
        return bool(self.failures)

    @property
    def failures(self) -> list[str]:
        """Why the gate fails, one line per cause (empty when it passes)."""
        summary, out = self.summary, []
        if self.refused:
            out.append(f"refused: {self.refused}")
        elif not self.judged:
            out.append(f"no shape was judged ({summary['invalid']} invalid of {len(self.shapes)}): "
                       f"a verdict needs at least one improvement, ok or regression")
        elif 100.0 * summary["invalid"] > self.policy.max_invalid_pct * len(self.shapes):
            out.append(f"{summary['invalid']} of {len(self.shapes)} shapes invalid "
                       f"({100.0 * summary['invalid'] / len(self.shapes):.1f} %), more than "
                       f"gate.max_invalid_pct {self.policy.max_invalid_pct:g} %")
        if summary["regression"]:
            out.append(f"{summary['regression']} regression(s)")
        out += [f"broken measurement: {v.key}: {v.reason}" for v in self.broken]
        if self.unaccounted:
            out.append(f"the candidate's selection counts {self.unaccounted} shape(s) more than its results hold")
        if self.policy.fail_on_stall and self.stalled:
            out.append(f"{len(self.stalled)} stalled shape(s) (fail_on_stall)")
        if self.policy.fail_on_invalid and summary["invalid"]:
            out.append(f"{summary['invalid']} invalid shape(s) (fail_on_invalid)")
        return out + self._numerics_failures()

    def _numerics_failures(self) -> list[str]:
        out = [f"wrong result: {v.key}: {_reason(v)}" for v in self.numerics_of(numerics.WRONG)]
        out += [f"nondeterministic: {v.key}: {_reason(v)}" for v in self.numerics_of(numerics.NONDETERMINISTIC)]
        less = [v for v in self.numerics_of(numerics.LESS_ACCURATE) if not v.numerics_accepted]
        if less:
            out.append(f"{len(less)} shape(s) less accurate than the base (rms_rel beyond "
                       f"x{self.policy.less_accurate_factor:g}; --accept-less-accurate GLOB accepts): "
                       + _listed(less))
        if self.numerics_required:
            unmeasured = [v for v in self.shapes if v.status != "invalid"
                          and v.numerics_class in (None, numerics.UNMEASURED)]
            if unmeasured:
                out.append(f"numerics not measured for {len(unmeasured)} shape(s): " + _listed(unmeasured))
        return out

    def to_dict(self) -> dict:
        return {
            "schema": "mha-ci.perf-compare/1",
            "summary": self.summary,
            "summary_by_pass": self.summary_by_pass,
            "same_code": sum(1 for v in self.shapes if v.same_code),
            "refused": self.refused,
            "notes": list(self.notes),
            "cross_toolchain": self.cross_toolchain,
            "not_measured": self.not_measured,
            "unaccounted": self.unaccounted,
            "gate_failed": self.gate_failed,
            "failures": self.failures,
            "numerics_summary": self.numerics_summary,
            "numerics_required": self.numerics_required,
            "accept_less_accurate": list(self.accept_less_accurate),
            "unchanged_host": self.unchanged_host,
            "aa_moves": [v.key for v in self.shapes if v.reason.startswith(AA_MOVE)],
            "gate": asdict(self.policy),
            "baseline": _provenance_brief(self.baseline_provenance),
            "candidate": _provenance_brief(self.candidate_provenance),
            "shapes": [v.to_dict() for v in self.shapes],
        }


# How many shape keys a numerics failure line names before it counts the rest.
LISTED_SHAPES = 5


def _reason(v: ShapeVerdict) -> str:
    return v.numerics.reason if v.numerics is not None else "numerics not measured"


def _listed(verdicts: list[ShapeVerdict]) -> str:
    """The first keys with their numerics reason, and how many more."""
    shown = "; ".join(f"{v.key} ({_reason(v)})" for v in verdicts[:LISTED_SHAPES])
    return shown + (f"; and {len(verdicts) - LISTED_SHAPES} more" if len(verdicts) > LISTED_SHAPES else "")


def _provenance_brief(p: dict) -> dict:
    return {k: p.get(k) for k in ("gpu", "arch", "toolchain", "versions", "kernel", "commit", "dirty", "date",
                                  "executor", "image_digest", "planted_slowdown_pct", "pins_checked",
                                  "pin_mismatches")}


def compare(baseline: dict, candidate: dict, policy: GatePolicy, cross_toolchain: bool = False,
            accept_less_accurate: Sequence[str] = (), unchanged_host: bool = False) -> Comparison:
    """Classify every shape; both arguments are mha-ci.perf/1 documents (document.load_perf).
    Numerics are required when `policy.require_numerics` or the candidate has any; a less
    accurate shape whose key matches a glob of `accept_less_accurate` (fnmatch) does not fail.
    `unchanged_host`: both sides ran byte-identical host code, so a same-code shape's move is an
    A/A move (the module docstring)."""
    base_p, cand_p = baseline["provenance"], candidate["provenance"]
    refused = comparable.refusal(base_p, cand_p, cross_toolchain)
    base = {e["key"]: e for e in baseline["results"]}
    cand = {e["key"]: e for e in candidate["results"]}
    # A pull-request measurement covers a subset: baseline shapes outside it are not "missing".
    # Without a selection nothing says it is a subset, so every baseline shape is expected.
    selection = candidate.get("selection")
    if selection is None:
        selection = {"subset": "full"}
    candidate_is_full = selection.get("subset") == "full" and not selection.get("chunk")
    keys = sorted(set(cand) | (set(base) if candidate_is_full else set()))
    not_measured = 0 if candidate_is_full else len(set(base) - set(cand))
    # A subset candidate does not list the keys it meant to measure, only how many: fewer results
    # than that count means shapes dropped out unseen.
    counted = selection.get("count")
    unaccounted = max(0, counted - len(cand)) if _is_count(counted) else 0
    required = policy.require_numerics or any(numerics.has_numerics(e) for e in cand.values())
    globs = tuple(accept_less_accurate)
    verdicts = tuple(_with_numerics(_aa_move(_verdict(key, base.get(key), cand.get(key), policy, refused),
                                             unchanged_host),
                                    base.get(key), cand.get(key), policy, required, globs, base_p.get("commit"))
                     for key in keys)
    return Comparison(shapes=verdicts, policy=policy, refused=refused, cross_toolchain=cross_toolchain,
                      not_measured=not_measured, unaccounted=unaccounted,
                      numerics_required=required, accept_less_accurate=globs, unchanged_host=unchanged_host,
                      baseline_provenance=base_p, candidate_provenance=cand_p,
                      notes=tuple(comparable.notes(base_p, cand_p)))


def _with_numerics(verdict: ShapeVerdict, b: dict | None, c: dict | None, policy: GatePolicy, required: bool,
                   globs: tuple[str, ...], base_commit: str | None) -> ShapeVerdict:
    """The verdict with its numerics class (mha_ci.perf.numerics); none when neither side measured
    numerics and the comparison does not require them."""
    if not (required or numerics.has_numerics(b) or numerics.has_numerics(c)):
        return verdict
    judged = numerics.classify(b, c, verdict.same_code, factor=policy.less_accurate_factor,
                               floor=policy.error_floor, base_commit=base_commit,
                               may_be_unordered=frozenset(policy.may_be_unordered))
    accepted = judged.class_ == numerics.LESS_ACCURATE and any(fnmatchcase(verdict.key, g) for g in globs)
    return replace(verdict, numerics=judged, numerics_accepted=accepted)


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def finite(value) -> float | None:
    """`value` as a float when it is a finite JSON number, else None (null, a string, NaN, inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _verdict(key: str, b: dict | None, c: dict | None, policy: GatePolicy, refused: str | None) -> ShapeVerdict:
    meta = c or b or {}
    bs, cs = (b or {}).get("stats"), (c or {}).get("stats")
    bt, ct = _time(bs), _time(cs)
    bn, cn = _noise(bs), _noise(cs)
    reason, broken = _invalid_reason(b, c, bs, cs, policy, refused)
    delta: float | None = None
    threshold: float | None = None
    # a noisy or refused shape still shows its delta
    if not broken and bt is not None and ct is not None and bn is not None and cn is not None:
        delta = 100.0 * (ct - bt) / bt
        threshold = policy.threshold_pct(bn, cn)
    if reason:
        status = "invalid"
    elif delta is None or threshold is None:
        # _invalid_reason gives a reason whenever a time or noise is missing on either side.
        raise RuntimeError(f"shape {key}: judged valid but lacks a time or noise (a bug in _invalid_reason)")
    else:
        status, reason = _classify(delta, threshold)
    reps = (interval.rep_means(bs), interval.rep_means(cs))
    ci = interval.delta_interval(key, reps[0], reps[1]) if delta is not None and reps[0] and reps[1] else None
    return ShapeVerdict(
        key=key, baseline_us=bt, candidate_us=ct, noise_baseline_pct=bn, noise_candidate_pct=cn,
        same_code=same_code(b, c),
        stall=_stall(cs, policy),
        shape=meta.get("shape"), bucket=meta.get("bucket"),
        tags=tuple(meta.get("tags") or ()),
        tp=tuple(sorted({o["tp"] for o in meta.get("origins") or () if o.get("tp")})),
        delta_pct=delta, threshold_pct=threshold, status=status, reason=reason, broken=broken, ci_pct=ci,
    )


AA_MOVE = "A/A move"


def _aa_move(verdict: ShapeVerdict, unchanged_host: bool) -> ShapeVerdict:
    """A same-code shape beyond its threshold when host code is unchanged too: ok, the move said."""
    if not (unchanged_host and verdict.same_code and verdict.status in ("regression", "improvement")):
        return verdict
    return replace(verdict, status="ok",
                   reason=f"{AA_MOVE}: {verdict.delta_pct:+.2f} % beyond the {verdict.threshold_pct:.2f} % threshold "
                          "with identical code objects and host code on both sides")


def same_code(b: dict | None, c: dict | None) -> bool | None:
    """Whether two results of one shape ran identical code objects: None when either side did not
    record them (older documents, another kernel than mha, a failed shape)."""
    ours, theirs = (b or {}).get("code_objects"), (c or {}).get("code_objects")
    if not isinstance(ours, dict) or not isinstance(theirs, dict) or not ours or not theirs:
        return None
    return ours == theirs


def _classify(delta: float, threshold: float) -> tuple[str, str]:
    """(status, reason) of a valid shape from its delta and threshold (the module docstring)."""
    if delta > threshold:
        return "regression", f"+{delta:.1f} % > {threshold:.1f} %"
    if delta < -threshold:
        return "improvement", f"{delta:.1f} % < -{threshold:.1f} %"
    return "ok", ""


def _time(stats) -> float | None:
    return finite(stats.get("trimmed_mean_us")) if isinstance(stats, dict) else None


def _noise(stats) -> float | None:
    """A shape's noise for the threshold: within-run, or between runs when larger; None when not a number."""
    if not isinstance(stats, dict):
        return None
    within, between = finite(stats.get("noise_pct")), stats.get("between_run_noise_pct")
    if within is None or (between is not None and finite(between) is None):
        return None
    return max(within, finite(between) or 0.0)


def _stall(stats, policy: GatePolicy) -> dict | None:
    if not isinstance(stats, dict):
        return None

    return stats.get("stall") or stall_from_summary(stats, policy.stall_factor, policy.stall_min_excess_us)


def _broken_stats(side: str, stats: dict) -> str | None:
    """Why one side's stats are not a measurement (a time or noise that cannot be one), or None."""
    # The median and the max are what stalls are read from: a broken one hides a stall.
    for name, label in (("trimmed_mean_us", "time"), ("median_us", "median_us"), ("max_us", "max_us")):
        stored = stats.get(name)      # the messages show it as stored, not as a float
        time = finite(stored)
        if time is None:
            return f"{side} {label} is not a number: {stored!r}"
        if time <= 0:
            return f"{side} {label} is not positive: {stored!r}"
        if time < MIN_TIME_US:
            return f"{side} {label} is below {MIN_TIME_US:g} us, not a measured time: {stored!r}"
        if time > MAX_TIME_US:
            return f"{side} {label} is above {MAX_TIME_US:g} us, not a measured time: {stored!r}"
    if _noise(stats) is None:
        return f"{side} noise is not a number: {stats.get('noise_pct')!r}"
    for name in ("noise_pct", "between_run_noise_pct"):
        value = stats.get(name)
        if value is not None and not 0 <= value <= MAX_NOISE_PCT:
            return f"{side} noise is not a percentage: {value!r}"
    return None


def _invalid_reason(b, c, bs, cs, policy: GatePolicy, refused: str | None) -> tuple[str, bool]:
    """(why the gate cannot judge this shape, whether that is a broken measurement), or ("", False)."""
    if refused:
        return f"not comparable: {refused}", False
    if b is None:
        return "no baseline for this shape", False
    if c is None:
        return "not measured in the candidate", True
    noises = []
    for side, entry, stats in (("baseline", b, bs), ("candidate", c, cs)):
        if not isinstance(stats, dict):
            return f"{side} failed: {entry.get('error')}", True
        broken = _broken_stats(side, stats)
        if broken:
            return broken, True
        noise = _noise(stats)
        assert noise is not None        # _broken_stats refuses a noise that is not a number
        noises.append((side, noise, noise > stats["noise_pct"]))
    for side, noise, between_runs in noises:
        if noise > policy.invalid_noise_pct:
            between = " (between runs)" if between_runs else ""
            return (f"too noisy: {side} noise {noise:.1f} %{between} > {policy.invalid_noise_pct:.1f} %",
                    False)
    return "", False
