"""Choosing a bucket's best candidate from its timing rows.

Every row holds one shape's current config and candidates timed in one process, so each
candidate's ratio to the current config is taken within one run. A candidate qualifies when it
was timed on every shape of the bucket, computes what the current config computes (the forward's
max_abs_diff within OUTPUT_TOLERANCE; a backward step's gradients, which have no fixed scale -
dK and dQ grow with the sequence - by max_rel_diff, relative to each gradient's largest
magnitude), and makes no shape slower than the gate's floor;
the best is the qualifying one with the lowest geometric-mean ratio over the goal shapes (the
regressed ones a report named; else every shape), if that is at least MIN_GAIN_PCT below 1
(less is within a run's noise and not worth a config change).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

CURRENT = "current"
MIN_GAIN_PCT = 1.0
OUTPUT_TOLERANCE = 2e-2       # two tilings' bf16 outputs differ in rounding (a bf16 step: 0.4-0.8 % of the value), not more


@dataclass
class Score:
    id: str
    shapes: int = 0
    ratios: dict = field(default_factory=dict)         # key -> candidate / current trimmed mean
    disqualified: str = ""
    goal: frozenset = frozenset()                      # keys the choice is ranked on; empty: all

    @property
    def geomean(self) -> float:
        ratios = [r for k, r in self.ratios.items() if not self.goal or k in self.goal]
        return _geomean(ratios)

    @property
    def geomean_all(self) -> float:
        return _geomean(list(self.ratios.values()))

    def to_json(self) -> dict:
        return {"id": self.id, "geomean_ratio": None if math.isinf(self.geomean) else round(self.geomean, 4),
                "geomean_ratio_all": None if math.isinf(self.geomean_all) else round(self.geomean_all, 4),
                "shapes": len(self.ratios), "worst_ratio": round(max(self.ratios.values()), 4) if self.ratios else None,
                "disqualified": self.disqualified}


def _geomean(ratios: list[float]) -> float:
    if not ratios:
        return math.inf
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def scores(rows: list[dict], candidate_ids: list[str], floor_pct: float,
           goal: frozenset = frozenset()) -> list[Score]:
    out = []
    for cid in candidate_ids:
        score = Score(cid, goal=goal)
        for row in rows:
            cur, mine = row["configs"].get(CURRENT, {}), row["configs"].get(cid)
            if mine is None:
                score.disqualified = score.disqualified or f"not timed on {row['key']}"
                continue
            if mine.get("error") or not mine.get("stats") or not (cur.get("stats") or {}).get("trimmed_mean_us"):
                score.disqualified = score.disqualified or f"failed on {row['key']}: {mine.get('error') or cur.get('error')}"
                continue
            measure = "max_rel_diff" if "max_rel_diff" in mine else "max_abs_diff"
            diff = mine.get(measure)
            if diff is not None and diff > OUTPUT_TOLERANCE:
                score.disqualified = score.disqualified or (
                    f"output differs from the current config's on {row['key']} ({measure} {diff:.3g})")
            score.ratios[row["key"]] = mine["stats"]["trimmed_mean_us"] / cur["stats"]["trimmed_mean_us"]
        worst = max(score.ratios.items(), key=lambda kv: kv[1], default=None)
        if worst and worst[1] > 1 + floor_pct / 100 and not score.disqualified:
            score.disqualified = f"{worst[0]} slower by {100 * (worst[1] - 1):.1f} % (gate floor {floor_pct} %)"
        out.append(score)
    return sorted(out, key=lambda s: (bool(s.disqualified), s.geomean))


def best(ranked: list[Score]) -> Score | None:
    for score in ranked:
        if not score.disqualified and score.geomean <= 1 - MIN_GAIN_PCT / 100:
            return score
    return None
