"""The delta's confidence interval (mha_ci.perf.interval) and where it shows."""
from mha_ci.perf import interval, report
from mha_ci.perf.compare import compare

from perf_builders import doc, entry, gate  # noqa: E402

KEY = "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"


def test_rep_means_need_enough_finite_positive_values():
    assert interval.rep_means({"rep_means_us": [1.0, 2.0, 3.0]}) == [1.0, 2.0, 3.0]
    assert interval.rep_means({"rep_means_us": [1.0, 2.0]}) is None
    assert interval.rep_means({"rep_means_us": [1.0, float("nan"), 3.0, 4.0]}) is None
    assert interval.rep_means({"rep_means_us": [1.0, True, 3.0]}) is None
    assert interval.rep_means({}) is None and interval.rep_means(None) is None


def test_the_interval_holds_the_delta_narrows_with_less_noise_and_repeats():
    base = [100.0, 100.5, 99.5, 100.2, 99.8, 100.1]
    slow = [v * 1.05 for v in base]
    low, high = interval.delta_interval(KEY, base, slow)
    assert low <= 5.0 <= high and high - low < 1.5
    noisy = [100.0, 104.0, 96.0, 102.0, 98.0, 101.0]
    wide = interval.delta_interval(KEY, noisy, [v * 1.05 for v in noisy])
    assert wide[1] - wide[0] > high - low
    assert interval.delta_interval(KEY, base, slow) == (low, high)       # seeded by the key


def _with_reps(us: float, reps: list[float]) -> dict:
    e = entry(KEY, us)
    e["stats"]["rep_means_us"] = reps
    return e


def test_the_verdict_and_the_reports_carry_it():
    base = [100.0, 100.5, 99.5, 100.2, 99.8, 100.1]
    cand = [v * 1.05 for v in base]
    c = compare(doc([_with_reps(100.0, base)]), doc([_with_reps(105.0, cand)]), gate())
    v = c.shapes[0]
    assert v.ci_pct is not None and v.ci_pct[0] <= v.delta_pct <= v.ci_pct[1]
    assert v.to_dict()["ci_pct"] == [round(v.ci_pct[0], 3), round(v.ci_pct[1], 3)]
    assert f"95 % CI {v.ci_pct[0]:+.1f}..{v.ci_pct[1]:+.1f}" in report.text(c)
    assert f"+5.0 ({v.ci_pct[0]:+.1f}..{v.ci_pct[1]:+.1f})" in report.markdown(c)
    # without rep means on a side: no interval, and the reports read as before
    plain = compare(doc([entry(KEY, 100.0)]), doc([_with_reps(105.0, cand)]), gate())
    assert plain.shapes[0].ci_pct is None and "CI" not in report.text(plain)
