"""Where a shape's series stepped, and the words for a move.

A step is the version that best splits a shape's series into a flat before and a flat after,
where the two stretches' medians differ by more than the shape's threshold. The threshold is the gate's (pipelines/perf.yaml):
max(floor_pct, k * hypot(noise before, noise after)), each noise the median of the stored
noises on its side, so a step is what the gate would have called a change between the two
stretches. Medians, not means: one odd version must not make or hide a step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from mha_ci.model.loader import load_perf_settings
from mha_ci.model.perf_schema import PERF_FILE

# pipelines/perf.yaml's gate, for a checkout that has no pipelines/ (a bare clone of the
# baselines); history.json names which one was used.
DEFAULT_FLOOR_PCT = 3.0
DEFAULT_K = 2.0
# Below this a move is shown as no change: the stored values carry one decimal of a per cent.
FLAT_PCT = 0.05


@dataclass(frozen=True)
class StepRule:
    floor_pct: float
    k: float
    source: str                 # the file the two numbers come from, or "default"

    def threshold_pct(self, noise_before: float, noise_after: float) -> float:
        return max(self.floor_pct, self.k * math.hypot(noise_before, noise_after))

    def to_dict(self) -> dict:
        return {"floor_pct": self.floor_pct, "k": self.k, "source": self.source}


@dataclass(frozen=True)
class Step:
    version: int                # the first version of the after stretch (index into History.versions)
    before_us: float            # median of the values before it
    after_us: float             # median of the values from it on
    delta_pct: float            # after against before
    threshold_pct: float

    def to_dict(self) -> dict:
        return {"version": self.version, "before_us": self.before_us, "after_us": self.after_us,
                "delta_pct": self.delta_pct, "threshold_pct": self.threshold_pct, "wording": moved(self.delta_pct)}


def step_rule(root: Path) -> StepRule:
    """The gate's floor and k of the checkout; the defaults where it has no pipelines/perf.yaml."""
    if not (Path(root) / "pipelines" / PERF_FILE).is_file():
        return StepRule(DEFAULT_FLOOR_PCT, DEFAULT_K, "default")
    gate = load_perf_settings(root)[0].gate
    return StepRule(float(gate.floor_pct), float(gate.k), f"pipelines/{PERF_FILE}")


def find_step(points: list[tuple[int, float, float | None]], rule: StepRule) -> Step | None:
    """The step of (version, value_us, noise_pct) points, oldest first; None without one.

    The split is the one that fits the series best as two flat stretches (least total distance
    of the values from their stretch's median). Choosing the split with the largest difference
    of medians instead puts a step late: once the after stretch is short, the before stretch's
    median already holds values from after the step and still reads as "before"."""
    best: tuple[float, int] | None = None
    for i in range(1, len(points)):
        cost = _spread([p[1] for p in points[:i]]) + _spread([p[1] for p in points[i:]])
        if best is None or cost < best[0]:
            best = (cost, i)
    if best is None:
        return None
    before, after = points[:best[1]], points[best[1]:]
    before_us, after_us = median(p[1] for p in before), median(p[1] for p in after)
    if before_us <= 0:
        return None
    delta = (after_us - before_us) / before_us * 100
    threshold = rule.threshold_pct(_noise(before), _noise(after))
    if abs(delta) <= threshold:
        return None
    return Step(points[best[1]][0], before_us, after_us, delta, threshold)


def _spread(values: list[float]) -> float:
    centre = median(values)
    return sum(abs(v - centre) for v in values)


def _noise(points: list[tuple[int, float, float | None]]) -> float:
    """The median stored noise of a stretch; 0 where none is stored (then the floor alone holds)."""
    known = [p[2] for p in points if p[2] is not None]
    return median(known) if known else 0.0


def direction(delta_pct: float | None) -> str:
    """faster | slower | flat | unknown: a time that went down is faster."""
    if delta_pct is None:
        return "unknown"
    if abs(delta_pct) < FLAT_PCT:
        return "flat"
    return "faster" if delta_pct < 0 else "slower"


def moved(delta_pct: float | None) -> str:
    """'12.3 % faster' (the time went down by 12.3 %), '4.0 % slower', 'no change' or '-'."""
    way = direction(delta_pct)
    if way == "unknown":
        return "-"
    if way == "flat":
        return "no change"
    return f"{abs(delta_pct):.1f} % {way}"    # type: ignore[arg-type]
