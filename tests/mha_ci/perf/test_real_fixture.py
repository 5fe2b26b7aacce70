"""The statistics on real per-dispatch timings from the H200 (run1.sh in
docs/records/2026-11-29-h200-perf-study/h200/README.md,
Triton 3.6.0, run perf-3.6-full-b; four shapes kept): recomputing from the raw dispatches must
give the numbers the payload reported there, and the stall it saw must be flagged."""
import json
from pathlib import Path

import pytest

from mha_ci.perf.document import perf_from_dump

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "perf" / "h200_dispatches_triton-3.6.json"

# As reported by the payload on the H200 in perf-3.6-full-b.json (trimmed mean, noise, stall).
REPORTED = {
    "dense_b1_hq64_hk8_sq8192_sk8192_dqk128_dv128_c1": (2368.205, 0.194, None),
    "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1": (590.574, 0.048, None),
    "varlen_b1_hq8_hk8_sq8192_sk8192_dqk192_dv128_c1": (823.29, 2.544, None),
    "varlen_b8_hq6_hk1_sq2048_sk2048_dqk64_dv64_c1": (371.021, 17.703, 1102.272),
}


@pytest.fixture(scope="module")
def results():
    dump = json.loads(FIXTURE.read_text())
    assert dump["provenance"]["gpu"] == "NVIDIA H200"
    return {r["key"]: r["stats"] for r in perf_from_dump(dump)["results"]}


def test_recomputed_stats_equal_what_the_payload_reported(results):
    assert set(results) == set(REPORTED)
    for key, (mean_us, noise, _) in REPORTED.items():
        assert results[key]["trimmed_mean_us"] == pytest.approx(mean_us, abs=0.01), key
        assert results[key]["noise_pct"] == pytest.approx(noise, abs=0.01), key


def test_real_stall_is_flagged_with_its_size(results):
    for key, (_, _, stall_us) in REPORTED.items():
        stall = results[key]["stall"]
        if stall_us is None:
            assert stall is None, key
        else:
            assert stall["worst_us"] == pytest.approx(stall_us, abs=0.01)
            assert stall["ratio"] > 3


def test_quiet_dense_shapes_keep_trimmed_mean_near_median(results):
    # docs/facts.md: the middle-80 % trimmed mean sat within about 1 % of the median on the H200.
    for key in ("dense_b1_hq64_hk8_sq8192_sk8192_dqk128_dv128_c1", "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"):
        s = results[key]
        assert abs(s["trimmed_mean_us"] - s["median_us"]) / s["median_us"] < 0.01, key
