"""The binary search over distinct builds, as a pure function of an injected measurement.

Builds are in history order; build 0 is good's. The first step measures the last build (bad's):
if it does not regress against good the search stops (not reproducible here). Otherwise the
search keeps `lo` (not regressed; good at first) and `hi` (regressed) and measures the middle
build until they are neighbours: the first commit of build `hi` is the first commit that moved,
because every commit between two neighbouring builds' first commits shares the earlier one's
code objects. A step is measured at most once per search (the caller stores and replays them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Step:
    """One build measured against good: regressed, with each shape's figures (key -> dict of
    delta_pct, threshold_pct, status, base_us, build_us) and the GPU seconds it took."""
    commit: str
    regressed: bool
    shapes: dict = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"commit": self.commit, "regressed": self.regressed, "shapes": self.shapes, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: dict) -> "Step":
        return cls(data["commit"], bool(data["regressed"]), dict(data.get("shapes") or {}),
                   float(data.get("seconds") or 0.0))


@dataclass(frozen=True)
class Outcome:
    steps: tuple[Step, ...]       # in the order measured
    first_moved: int | None       # index of the build whose first commit moved; None: not reproducible

    @property
    def reproducible(self) -> bool:
        return self.first_moved is not None


def search(count: int, measure: Callable[[int], Step]) -> Outcome:
    """Binary search over builds 0..count-1 (count >= 2); measure(i) times build i against build 0."""
    if count < 2:
        raise ValueError("a search needs good's build and at least one other")
    steps = [measure(count - 1)]
    if not steps[0].regressed:
        return Outcome(tuple(steps), None)
    lo, hi = 0, count - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        step = measure(mid)
        steps.append(step)
        lo, hi = (lo, mid) if step.regressed else (mid, hi)
    return Outcome(tuple(steps), hi)


def most_steps(count: int) -> int:
    """Steps a search over `count` builds takes at most: the check of bad, then ceil(log2(count - 1))."""
    return 1 + max(0, (count - 2).bit_length())
