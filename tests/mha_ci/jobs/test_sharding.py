"""Longest-processing-time sharding: the split every shard job computes on its own machine."""
from __future__ import annotations

import json
import random

import pytest

from mha_ci.jobs.correctness import sharding


def _tests(count: int) -> list[str]:
    return [f"tests/mha/test_fwd.py::test_case[{i}]" for i in range(count)]


def _durations(tests: list[str], seed: int = 7) -> dict[str, float]:
    rng = random.Random(seed)
    # heavy-tailed, like real kernel tests: a few long shapes, many short ones
    return {t: round(rng.lognormvariate(0.0, 1.2), 3) for t in tests}


def test_every_test_lands_in_exactly_one_shard():
    tests = _tests(101)
    shards = sharding.split(tests, _durations(tests), 4)
    assert [s.index for s in shards] == [1, 2, 3, 4]
    flat = [t for s in shards for t in s.tests]
    assert sorted(flat) == sorted(tests)


def test_same_input_same_split_and_order_does_not_matter():
    tests = _tests(80)
    recorded = _durations(tests)
    first = sharding.split(tests, recorded, 3)
    shuffled = list(tests)
    random.Random(1).shuffle(shuffled)
    again = sharding.split(shuffled + shuffled[:5], dict(reversed(list(recorded.items()))), 3)  # dupes too
    assert [s.tests for s in first] == [s.tests for s in again]
    assert [s.predicted_s for s in first] == [s.predicted_s for s in again]


def test_ties_are_broken_by_node_id():
    tests = ["b", "a", "d", "c"]
    shards = sharding.split(tests, {t: 1.0 for t in tests}, 2)
    # (duration, node id) order: a, b, c, d -> shard 1 gets a and c, shard 2 b and d
    assert [s.tests for s in shards] == [("a", "c"), ("b", "d")]


def test_balance_is_within_the_lpt_bound():
    tests = _tests(200)
    recorded = _durations(tests, seed=3)
    for count in (2, 4, 8):
        shards = sharding.split(tests, recorded, count)
        loads = [s.predicted_s for s in shards]
        # LPT: the slowest shard exceeds the ideal by at most the longest single test
        assert max(loads) <= sum(loads) / count + max(recorded.values()) + 1e-9
        assert sharding.predicted_balance(shards).imbalance < 1.15


def test_lpt_beats_a_round_robin_split_on_skewed_durations():
    tests = _tests(12)
    recorded = {t: (20.0 if i < 2 else 1.0) for i, t in enumerate(tests)}
    loads = [s.predicted_s for s in sharding.split(tests, recorded, 2)]
    assert sorted(loads) == [25.0, 25.0]


def test_unknown_tests_count_as_the_mean_of_known_ones():
    recorded = {"a": 2.0, "b": 4.0, "z-not-collected": 100.0}
    estimate = sharding.estimated_durations(["a", "b", "new1", "new2"], recorded)
    assert estimate == {"a": 2.0, "b": 4.0, "new1": 3.0, "new2": 3.0}


def test_nothing_known_counts_every_test_as_one_second():
    shards = sharding.split(["x", "y", "z"], {}, 2)
    assert [s.predicted_s for s in shards] == [2.0, 1.0]


def test_more_shards_than_tests_leaves_empty_shards():
    shards = sharding.split(["only"], {}, 3)
    assert [len(s.tests) for s in shards] == [1, 0, 0]


def test_shard_of_rejects_a_shard_that_does_not_exist():
    with pytest.raises(ValueError):
        sharding.shard_of(["a"], {}, 3, 2)
    with pytest.raises(ValueError):
        sharding.split(["a"], {}, 0)


def test_durations_file_round_trip_and_schema_check(tmp_path):
    path = tmp_path / "d" / "interpreter.json"
    assert sharding.load_durations(path) == {}
    sharding.write_durations(path, {"t::b": 0.123456, "t::a": 2}, arch="interpreter", toolchains=["triton-3.4"],
                             provenance={"commit": "abc"})
    data = json.loads(path.read_text())
    assert data["schema"] == "mha-ci.durations/1"
    assert list(data["durations"]) == ["t::a", "t::b"]
    assert sharding.load_durations(path) == {"t::a": 2.0, "t::b": 0.1235}
    path.write_text(json.dumps({"schema": "other/1", "durations": {}}))
    with pytest.raises(ValueError, match="schema"):
        sharding.load_durations(path)
