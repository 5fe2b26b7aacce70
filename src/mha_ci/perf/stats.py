"""From per-dispatch timings to the numbers the gate compares.

Standard library only: the GPU payload computes its results with this same module, and the
orchestrating side recomputes them from a `--dump-dispatches` file (tests do), so both agree by
construction.

Definitions (docs/perf-method.md, "Measuring one shape"):
- a rep is `dispatches` dispatches of one shape, each timed on its own;
- the rep's value is the mean of its chronological middle: the first trim_low_pct % and the
  last trim_high_pct % of the dispatches *in the order they ran* are dropped (not the fastest and
  slowest: a slow dispatch in the middle is real and must weigh on the mean; the edges are where
  clocks ramp and queues fill or drain);
- the shape's value (`trimmed_mean_us`) is the median of its rep means;
- `noise_pct` is the robust standard deviation of the rep means relative to their median, in
  percent: 1.4826 x MAD (the median absolute deviation, scaled to match a standard deviation
  for normal data). Robust because one rep hit by a stall (a 1.6 s dispatch in a 400 us shape)
  would otherwise make the whole shape "too noisy" and hide it from the gate; the stall is
  reported as a stall instead, and the median of rep means ignores that rep. The plain spread,
  (max - min) / median - the measure docs/facts.md quotes for back-to-back H200 medians - is kept
  as `spread_pct`;
- a stall is a dispatch above max(stall_factor x median, median + stall_min_excess_us), where
  median is that of every dispatch of the shape; stalls are reported whatever the mean did.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Method:
    """How a shape is measured; stored verbatim as the `method` of a mha-ci.perf/1 document."""

    warmup: int = 10
    dispatches: int = 40
    reps: int = 5
    trim_low_pct: float = 10.0
    trim_high_pct: float = 10.0
    max_seconds_per_shape: float = 1.2
    min_dispatches: int = 10
    l2_flush: bool = False
    seed: int = 0
    stall_factor: float = 3.0
    stall_min_excess_us: float = 50.0
    # Each rep after the first on fresh inputs behind a pad of its own size (mha_ci.payloads.perf,
    # "Memory layout"), so a run's value averages over placements instead of holding one.
    relayout: bool = False

    def to_dict(self) -> dict:
        data = asdict(self)
        data["trim"] = [self.trim_low_pct, self.trim_high_pct]   # the stored format names "trim" (docs/architecture.md)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Method":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Stall:
    rep: int            # 0-based rep
    index: int          # 0-based dispatch within the rep (chronological)
    us: float
    ratio: float        # us / median of the shape's dispatches


@dataclass(frozen=True)
class ShapeStats:
    trimmed_mean_us: float
    median_us: float
    mean_us: float
    max_us: float
    noise_pct: float
    spread_pct: float
    reps: int
    dispatches: int                         # per rep
    rep_means_us: tuple[float, ...]
    stalls: tuple[Stall, ...] = field(default=())

    def to_dict(self) -> dict:
        worst = max(self.stalls, key=lambda s: s.us) if self.stalls else None
        return {
            "trimmed_mean_us": round(self.trimmed_mean_us, 3),
            "median_us": round(self.median_us, 3),
            "mean_us": round(self.mean_us, 3),
            "max_us": round(self.max_us, 3),
            "noise_pct": round(self.noise_pct, 3),
            "spread_pct": round(self.spread_pct, 3),
            "reps": self.reps,
            "dispatches": self.dispatches,
            "rep_means_us": [round(m, 3) for m in self.rep_means_us],
            "stall": None if worst is None else {
                "count": len(self.stalls),
                "worst_us": round(worst.us, 3),
                "ratio": round(worst.ratio, 2),
                "rep": worst.rep,
                "index": worst.index,
            },
        }


def trim_bounds(n: int, low_pct: float, high_pct: float) -> tuple[int, int]:
    """[start, stop) of the chronological middle of n dispatches; never empty."""
    low = int(math.floor(n * low_pct / 100.0))
    high = int(math.floor(n * high_pct / 100.0))
    if n - low - high < 1:
        raise ValueError(f"trimming {low_pct} % + {high_pct} % of {n} dispatches leaves nothing")
    return low, n - high


def rep_mean(times_us: list[float], low_pct: float, high_pct: float) -> float:
    """Mean of the chronological middle of one rep (see the module docstring)."""
    if not times_us:
        raise ValueError("a rep needs at least one dispatch")
    start, stop = trim_bounds(len(times_us), low_pct, high_pct)
    kept = times_us[start:stop]
    return sum(kept) / len(kept)


MAD_TO_SIGMA = 1.4826   # MAD x this = standard deviation, for normally distributed values


def noise_pct(rep_means: list[float]) -> float:
    """Robust standard deviation of the rep means relative to their median, in percent."""
    if len(rep_means) < 2:
        return 0.0
    mid = statistics.median(rep_means)
    if mid <= 0:
        return math.inf
    mad = statistics.median(abs(m - mid) for m in rep_means)
    return 100.0 * MAD_TO_SIGMA * mad / mid


def spread_pct(rep_means: list[float]) -> float:
    """(max - min) / median of the rep means, in percent (0 for a single rep)."""
    if len(rep_means) < 2:
        return 0.0
    mid = statistics.median(rep_means)
    return 100.0 * (max(rep_means) - min(rep_means)) / mid if mid > 0 else math.inf


def find_stalls(reps_us: list[list[float]], factor: float, min_excess_us: float) -> tuple[Stall, ...]:
    all_times = [t for rep in reps_us for t in rep]
    median = statistics.median(all_times)
    limit = max(factor * median, median + min_excess_us)
    return tuple(Stall(rep=r, index=i, us=t, ratio=t / median if median > 0 else math.inf)
                 for r, rep in enumerate(reps_us) for i, t in enumerate(rep) if t > limit)


def _finite_number(value: object) -> float | None:
    """`value` itself when it is a finite JSON number (a bool is not one), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def stall_from_summary(stats: dict, factor: float, min_excess_us: float) -> dict | None:
    """The stall a stored result shows through its summary alone (`max_us` against `median_us`).

    For documents whose writer did not look for stalls (another measuring tool, an older payload):
    the slowest dispatch is the only one known, so the count is unknown (None) and so is where it ran.
    """
    top, median = _finite_number(stats.get("max_us")), _finite_number(stats.get("median_us"))
    if top is None or median is None:
        return None
    if median <= 0 or top <= max(factor * median, median + min_excess_us):
        return None
    return {"count": None, "worst_us": round(float(top), 3), "ratio": round(top / median, 2), "rep": None,
            "index": None}


def shape_stats(reps_us: list[list[float]], method: Method) -> ShapeStats:
    """Every number of one shape's result from its per-dispatch timings (microseconds)."""
    if not reps_us or any(not rep for rep in reps_us):
        raise ValueError("need at least one rep, each with at least one dispatch")
    means = [rep_mean(rep, method.trim_low_pct, method.trim_high_pct) for rep in reps_us]
    all_times = [t for rep in reps_us for t in rep]
    return ShapeStats(
        trimmed_mean_us=statistics.median(means),
        median_us=statistics.median(all_times),
        mean_us=sum(all_times) / len(all_times),
        max_us=max(all_times),
        noise_pct=noise_pct(means),
        spread_pct=spread_pct(means),
        reps=len(reps_us),
        dispatches=min(len(rep) for rep in reps_us),
        rep_means_us=tuple(means),
        stalls=find_stalls(reps_us, method.stall_factor, method.stall_min_excess_us),
    )


def dispatches_per_rep(estimate_us: float, method: Method) -> int:
    """Dispatches per rep so that the timed work of a shape stays within its time budget.

    `estimate_us` is the median warm-up dispatch. Never above `dispatches`, never below
    `min_dispatches`: a 10 ms shape gets fewer dispatches, not a shorter trim.
    """
    if estimate_us <= 0:
        return method.dispatches
    fits = int(method.max_seconds_per_shape * 1e6 / (estimate_us * method.reps))
    return max(method.min_dispatches, min(method.dispatches, fits))
