"""Which tests shard i of N runs: longest-processing-time first over recorded durations.

Every shard job collects the same test list and computes the same split on its own machine, so
the split must depend on nothing but the set of node ids and the durations file: tests are
ordered by (duration descending, node id) and each goes to the currently lightest shard (ties:
the lowest shard number). Input order and duplicates do not matter. Tests with no recorded
duration count as the mean of the recorded ones among the collected tests (1.0 s if none is
recorded), so a new test neither piles up on one shard nor is treated as free.

Durations file (perf_baselines/test_durations/<arch>.json):
    {"schema": "mha-ci.durations/1", "arch": ..., "toolchains": [...], "provenance": {...},
     "durations": {"tests/mha/test_x.py::test_y[a]": 0.42, ...}}
"""
from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from pathlib import Path

from mha_ci.files import write_atomic

DURATIONS_SCHEMA = "mha-ci.durations/1"
UNKNOWN_DEFAULT_S = 1.0


@dataclass(frozen=True)
class Shard:
    index: int                      # 1-based, as in job ids ("1of4")
    tests: tuple[str, ...]          # sorted by node id: tests of one file stay together
    predicted_s: float


@dataclass(frozen=True)
class ShardBalance:
    """Spread of the shards' loads: imbalance = slowest / mean (1.0 is perfect)."""

    loads_s: tuple[float, ...]

    @property
    def slowest_s(self) -> float:
        return max(self.loads_s, default=0.0)

    @property
    def imbalance(self) -> float:
        mean = sum(self.loads_s) / len(self.loads_s) if self.loads_s else 0.0
        return self.slowest_s / mean if mean > 0 else 1.0

    def to_json(self) -> dict:
        return {"loads_s": [round(x, 3) for x in self.loads_s], "slowest_s": round(self.slowest_s, 3),
                "imbalance": round(self.imbalance, 3)}


def load_durations(path: Path) -> dict[str, float]:
    """Recorded per-test seconds; a missing file means nothing is known yet (all tests equal)."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    if data.get("schema") != DURATIONS_SCHEMA:
        raise ValueError(f"{path}: schema is {data.get('schema')!r}, expected {DURATIONS_SCHEMA!r}")
    return {str(k): float(v) for k, v in data.get("durations", {}).items()}


def estimated_durations(tests: list[str] | tuple[str, ...], recorded: dict[str, float]) -> dict[str, float]:
    unique = sorted(set(tests))
    known = [recorded[t] for t in unique if t in recorded]
    fallback = sum(known) / len(known) if known else UNKNOWN_DEFAULT_S
    return {t: recorded.get(t, fallback) for t in unique}


def split(tests: list[str] | tuple[str, ...], recorded: dict[str, float], shards: int) -> list[Shard]:
    """All N shards (so a caller can report the predicted balance of the whole split)."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, not {shards}")
    estimate = estimated_durations(tests, recorded)
    order = sorted(estimate, key=lambda t: (-estimate[t], t))
    heap = [(0.0, index) for index in range(shards)]      # (load, index): lightest first, then lowest index
    members: list[list[str]] = [[] for _ in range(shards)]
    for test in order:
        load, index = heapq.heappop(heap)
        members[index].append(test)
        heapq.heappush(heap, (load + estimate[test], index))
    return [Shard(index=i + 1, tests=tuple(sorted(members[i])), predicted_s=sum(estimate[t] for t in members[i]))
            for i in range(shards)]


def shard_of(tests: list[str] | tuple[str, ...], recorded: dict[str, float], index: int, shards: int) -> Shard:
    if not 1 <= index <= shards:
        raise ValueError(f"shard {index} of {shards} does not exist")
    return split(tests, recorded, shards)[index - 1]


def predicted_balance(all_shards: list[Shard]) -> ShardBalance:
    return ShardBalance(tuple(s.predicted_s for s in all_shards))


def write_durations(path: Path, durations: dict[str, float], *, arch: str, toolchains: list[str],
                    provenance: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"schema": DURATIONS_SCHEMA, "arch": arch, "toolchains": sorted(set(toolchains)), "provenance": provenance,
            "durations": {k: round(v, 4) for k, v in sorted(durations.items())}}
    write_atomic(path, json.dumps(data, indent=2) + "\n")
