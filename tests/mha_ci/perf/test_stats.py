"""mha_ci.perf.stats on hand-made reps and on the per-dispatch fixture (payload dump format)."""
import math
import statistics

import pytest

from mha_ci.perf.document import perf_from_dump
from mha_ci.perf.stats import (Method, dispatches_per_rep, find_stalls, noise_pct, rep_mean, shape_stats,
                               spread_pct, trim_bounds)

import perf_builders  # noqa: E402


def test_trim_keeps_the_chronological_middle_80_percent():
    assert trim_bounds(50, 10, 10) == (5, 45)
    assert trim_bounds(10, 10, 10) == (1, 9)
    # 4 dispatches: 10 % of 4 rounds down to nothing trimmed
    assert trim_bounds(4, 10, 10) == (0, 4)
    with pytest.raises(ValueError):
        trim_bounds(2, 50, 50)


def test_rep_mean_drops_edges_in_time_order_not_by_value():
    # First and last dispatch are the slow edges; one slow dispatch in the middle is real.
    times = [500.0] + [100.0] * 4 + [300.0] + [100.0] * 3 + [900.0]
    assert rep_mean(times, 10, 10) == pytest.approx((100 * 7 + 300) / 8)
    # Sorting first (an outlier trim) would have dropped the 300 instead of keeping it.
    assert rep_mean(times, 10, 10) != pytest.approx(statistics.mean(sorted(times)[1:9]))


def test_shape_value_is_the_median_of_rep_means_and_noise_is_robust():
    reps = [[100.0] * 10, [102.0] * 10, [98.0] * 10, [101.0] * 10, [99.0] * 10, [400.0] * 10]
    stats = shape_stats(reps, Method(stall_factor=3.0, stall_min_excess_us=0.0))
    assert stats.trimmed_mean_us == pytest.approx(100.5)
    assert stats.rep_means_us == (100.0, 102.0, 98.0, 101.0, 99.0, 400.0)
    # One wild rep: the spread explodes, the robust noise stays near the others' scatter.
    assert stats.spread_pct == pytest.approx(100 * 302 / 100.5)
    mad = statistics.median(abs(m - 100.5) for m in stats.rep_means_us)
    assert stats.noise_pct == pytest.approx(100 * 1.4826 * mad / 100.5)
    assert stats.noise_pct < 3
    assert stats.reps == 6 and stats.dispatches == 10
    assert stats.max_us == 400.0 and stats.median_us == pytest.approx(100.5)


def test_noise_of_identical_reps_is_zero_and_single_rep_has_none():
    assert noise_pct([5.0, 5.0, 5.0]) == 0.0
    assert noise_pct([5.0]) == 0.0 and spread_pct([5.0]) == 0.0


def test_stalls_need_factor_times_median_and_the_absolute_excess():
    reps = [[10.0] * 20, [10.0] * 9 + [45.0] + [10.0] * 10]
    # 45 us is 4.5 x the median but only 35 us above it: not a stall with a 50 us floor
    assert find_stalls(reps, 3.0, 50.0) == ()
    stalls = find_stalls(reps, 3.0, 0.0)
    assert len(stalls) == 1 and (stalls[0].rep, stalls[0].index) == (1, 9)
    assert stalls[0].ratio == pytest.approx(4.5)


def test_dispatches_per_rep_respects_budget_and_bounds():
    m = Method(dispatches=50, reps=6, max_seconds_per_shape=1.5, min_dispatches=10)
    assert dispatches_per_rep(20.0, m) == 50            # tiny kernel: full count
    assert dispatches_per_rep(10_000.0, m) == 25        # 1.5 s / (6 x 10 ms)
    assert dispatches_per_rep(100_000.0, m) == 10       # never below min_dispatches
    assert dispatches_per_rep(0.0, m) == 50


def test_fixture_recomputed_matches_facts_shape():
    dump = perf_builders.synthetic_dump()
    doc = perf_from_dump(dump)
    by_key = {r["key"]: r["stats"] for r in doc["results"]}
    assert len(by_key) == len(dump["shapes"])
    for key, s in by_key.items():
        # docs/facts.md: the middle-80 % trimmed mean sits within about 1 % of the median
        assert abs(s["trimmed_mean_us"] - s["median_us"]) / s["median_us"] < 0.02, key
        assert s["reps"] == 6 and s["dispatches"] >= 10
    stalled = {k: s["stall"] for k, s in by_key.items() if s["stall"]}
    assert list(stalled) == ["dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"]
    stall = stalled["dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"]
    assert stall["worst_us"] == 1_640_000.0 and (stall["rep"], stall["index"]) == (3, 21)
    assert stall["ratio"] > 4000
    # ... and the stalled rep does not make the shape unjudgeable
    assert by_key["dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"]["noise_pct"] < 2


def test_fixture_rep_means_follow_the_definition():
    dump = perf_builders.synthetic_dump()
    item = dump["shapes"][1]
    doc = perf_from_dump(dump)
    means = [sum(rep[len(rep) // 10: len(rep) - len(rep) // 10]) / (len(rep) - 2 * (len(rep) // 10))
             for rep in item["reps"]]
    stats = doc["results"][1]["stats"]
    assert stats["rep_means_us"] == [round(m, 3) for m in means]
    assert stats["trimmed_mean_us"] == pytest.approx(statistics.median(means), abs=1e-3)
    assert math.isclose(stats["max_us"], max(max(r) for r in item["reps"]), abs_tol=1e-3)
