"""A confidence interval for each delta: how far the measured change could be from the true one,
given the rep-to-rep spread of both sides.

A shape's value is the median of its rep means (mha_ci.perf.stats), so the interval is a
percentile bootstrap of that statistic: both sides' rep means are resampled with replacement,
the delta of the two medians taken each time, and the central `level` share of those deltas
kept. Standard library only; the generator is seeded by the shape's key, so a report is the
same every time it is made from the same documents.

It describes the noise inside the two runs, not between machines or days (the gate's floor is
for that): a narrow interval beside a large delta says the change is real on this pair of runs.
With a handful of reps the bootstrap median takes few distinct values, so the interval is coarse;
fewer than MIN_REPS reps on either side gives none.
"""
from __future__ import annotations

import hashlib
import math
import random
import statistics

MIN_REPS = 3
RESAMPLES = 2000
LEVEL = 0.95


def rep_means(stats: object) -> list[float] | None:
    """The finite, positive rep means of a result's stats, or None when there are too few."""
    values = stats.get("rep_means_us") if isinstance(stats, dict) else None
    if not isinstance(values, list):
        return None
    means = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
             and math.isfinite(v) and v > 0]
    return means if len(means) >= MIN_REPS and len(means) == len(values) else None


def delta_interval(key: str, base: list[float], cand: list[float], resamples: int = RESAMPLES,
                   level: float = LEVEL) -> tuple[float, float]:
    """(low, high) of the delta in percent, 100 * (cand / base - 1), at `level`."""
    rng = random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))
    deltas = []
    for _ in range(resamples):
        b = statistics.median(rng.choices(base, k=len(base)))
        c = statistics.median(rng.choices(cand, k=len(cand)))
        deltas.append(100.0 * (c - b) / b)
    deltas.sort()
    cut = (1.0 - level) / 2.0
    low = deltas[int(math.floor(cut * (resamples - 1)))]
    high = deltas[int(math.ceil((1.0 - cut) * (resamples - 1)))]
    return low, high
