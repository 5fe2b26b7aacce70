"""Leave one group out (mha_ci.perf.held_out): each group's runs against a baseline combined
from the other groups' runs."""

import pytest

from mha_ci.errors import ConfigError
from mha_ci.perf.held_out import combined_without, leave_one_group_out

from perf_builders import doc, entry, gate  # noqa: E402

KEYS = ["dense_b1_hq8_hk8_sq1024_sk1024_dqk64_dv64_c1", "dense_b64_hq8_hk1_sq1_sk4096_dqk128_dv128_c1"]


def run(first_us: float, second_us: float = 50.0, day: int = 1) -> dict:
    return doc([entry(KEYS[0], first_us, noise=0.3), entry(KEYS[1], second_us, noise=0.3)],
               date=f"2026-11-{day:02d}T00:00:00+00:00")


@pytest.fixture
def machines():
    # Machine "slow" runs the first shape 8 % slower than the other two machines.
    docs = {"a1": run(100.0, day=1), "a2": run(100.4, day=2), "b1": run(100.2, day=3), "b2": run(99.8, day=4),
            "slow1": run(108.0, day=5), "slow2": run(108.4, day=6)}
    groups = {"A": ["a1", "a2"], "B": ["b1", "b2"], "S": ["slow1", "slow2"]}
    return docs, groups


def test_combined_without_leaves_out_one_group(machines):
    docs, groups = machines
    baseline, names = combined_without(docs, groups, "S", max_noise_pct=5.0)
    assert names == ["a1", "a2", "b1", "b2"]
    first = baseline["results"][0]["stats"]
    assert first["run_trimmed_means_us"] == [100.0, 100.4, 100.2, 99.8]
    _, every = combined_without(docs, groups, None, max_noise_pct=5.0)
    assert every == ["a1", "a2", "b1", "b2", "slow1", "slow2"]


def test_each_group_is_judged_against_the_others(machines):
    docs, groups = machines
    rows = leave_one_group_out(docs, groups, gate(floor_pct=3.0, k=2.0))
    assert [(r["group"], r["run"]) for r in rows] == [("A", "a1"), ("A", "a2"), ("B", "b1"), ("B", "b2"),
                                                       ("S", "slow1"), ("S", "slow2")]
    assert rows[0]["baseline_from"] == ["b1", "b2", "slow1", "slow2"]
    # The slow machine's runs, against a baseline of the two others: its first shape regresses.
    assert [r["summary"]["regression"] for r in rows if r["group"] == "S"] == [1, 1]
    # The other machines' baselines hold the slow machine's runs: their between-run noise widens
    # the first shape's threshold, so nothing is called there.
    assert all(r["summary"]["regression"] == 0 for r in rows if r["group"] != "S")


def test_a_group_left_with_one_run_cannot_be_combined():
    docs = {"a": run(100.0, day=1), "b": run(100.0, day=2)}
    with pytest.raises(ConfigError, match="at least 2 runs"):
        combined_without(docs, {"A": ["a"], "B": ["b"]}, "A", max_noise_pct=5.0)
