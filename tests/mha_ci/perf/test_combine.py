"""A baseline combined from several runs (mha_ci.perf.combine) and the gate's use of its
between-run noise (mha_ci.perf.compare)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mha_ci.errors import ConfigError
from mha_ci.perf.combine import combine
from mha_ci.perf.compare import compare
from mha_ci.perf.document import check_perf

from perf_builders import doc, entry, gate, numerics, versus  # noqa: E402

KEYS = ["dense_b1_hq8_hk8_sq1024_sk1024_dqk64_dv64_c1", "dense_b64_hq8_hk1_sq1_sk4096_dqk128_dv128_c1"]
ROOT = Path(__file__).resolve().parents[3]


def _runs(values_per_run, noise=0.3):
    return [doc([entry(k, us, noise=noise) for k, us in zip(KEYS, values)], date=f"2026-11-2{i}T00:00:00+00:00")
            for i, values in enumerate(values_per_run)]


def test_median_value_and_between_run_noise_per_shape():
    out = combine(_runs([(100.0, 50.0), (104.0, 50.0), (102.0, 50.0)]))
    assert check_perf(out) is None
    first, second = (r["stats"] for r in out["results"])
    assert first["trimmed_mean_us"] == 102.0 and first["between_run_noise_pct"] == pytest.approx(1.961, abs=1e-3)
    assert first["run_trimmed_means_us"] == [100.0, 104.0, 102.0]
    assert second["between_run_noise_pct"] == 0.0
    assert [r["date"] for r in out["provenance"]["combined_runs"]][0].startswith("2026-11-20")
    assert out["provenance"]["date"].startswith("2026-11-22")


def test_a_shape_that_moves_between_runs_gets_a_wider_threshold():
    runs = _runs([(100.0, 50.0), (106.0, 50.0)])
    candidate = doc([entry(KEYS[0], 108.0), entry(KEYS[1], 54.0)])
    policy = gate(floor_pct=3.0, k=2.5)
    single = compare(runs[0], candidate, policy)
    assert [v.status for v in single.shapes] == ["regression", "regression"]
    combined = compare(combine(runs), candidate, policy)
    moved, steady = combined.shapes
    # 100 and 106: between-run noise 4.12 %, so +4.9 % is inside 2.5 x 4.13 %; the steady shape still fails
    assert moved.status == "ok" and moved.threshold_pct > 10
    assert steady.status == "regression" and steady.threshold_pct == 3.0


def test_a_disturbed_run_is_left_out_of_that_shape_only():
    runs = _runs([(100.0, 50.0), (101.0, 50.0)])
    runs.append(doc([entry(KEYS[0], 180.0, noise=24.0), entry(KEYS[1], 50.5)]))
    first, second = (r["stats"] for r in combine(runs, names=["a", "b", "c"])["results"])
    assert first["trimmed_mean_us"] == 100.5 and first["runs_left_out"] == {"c": 180.0}
    assert first["run_trimmed_means_us"] == [100.0, 101.0]
    assert "runs_left_out" not in second and second["trimmed_mean_us"] == 50.0


def test_refuses_fewer_than_two_runs_other_gpus_methods_or_shapes():
    runs = _runs([(100.0, 50.0), (101.0, 50.0)])
    with pytest.raises(ConfigError, match="at least 2"):
        combine(runs[:1])
    other_gpu = doc([entry(k, 1.0) for k in KEYS], gpu="NVIDIA H100")
    with pytest.raises(ConfigError, match="different GPU"):
        combine([runs[0], other_gpu], names=["a", "b"])
    other_method = json.loads(json.dumps(runs[1]))
    other_method["method"]["reps"] = 3
    with pytest.raises(ConfigError, match="another method"):
        combine([runs[0], other_method])
    relaid = json.loads(json.dumps(runs[1]))
    relaid["method"]["relayout"] = True       # one layout per process vs one per rep
    with pytest.raises(ConfigError, match="another method"):
        combine([runs[0], relaid])
    fewer = doc([entry(KEYS[0], 1.0)])
    with pytest.raises(ConfigError, match="same shapes"):
        combine([runs[0], fewer])


def test_a_shape_failed_in_one_run_is_an_error_in_the_baseline():
    runs = _runs([(100.0, 50.0)])
    runs.append(doc([entry(KEYS[0], None, error="OutOfMemoryError"), entry(KEYS[1], 50.0)]))
    failed, fine = combine(runs)["results"]
    assert failed["stats"] is None and "OutOfMemoryError" in failed["error"] and fine["stats"]


def test_cli_writes_the_combined_baseline(tmp_path):
    paths = []
    for i, run in enumerate(_runs([(100.0, 50.0), (102.0, 51.0)])):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(run))
    done = subprocess.run([sys.executable, "-m", "mha_ci", "--root", str(ROOT), "perf", "combine", *map(str, paths),
                           "--out", str(tmp_path / "base.json")], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "2 shapes from 2 runs" in done.stderr
    out = json.loads((tmp_path / "base.json").read_text())
    assert out["results"][0]["stats"]["trimmed_mean_us"] == 101.0


def test_roll_keeps_a_window_of_runs_per_shape():
    from mha_ci.perf.combine import roll

    first, reset = roll(None, _runs([(100.0, 50.0)])[0], window=3)
    assert reset == "no stored baseline"
    assert first["results"][0]["stats"]["between_run_noise_pct"] is None
    base = first
    for values in ((104.0, 50.0), (102.0, 50.0), (110.0, 50.0)):
        base, reset = roll(base, _runs([values])[0], window=3)
        assert reset is None
    stats = base["results"][0]["stats"]
    assert stats["run_trimmed_means_us"] == [104.0, 102.0, 110.0] and stats["trimmed_mean_us"] == 104.0
    assert stats["between_run_noise_pct"] == pytest.approx(100 * 4.163 / 105.333, abs=1e-2)
    assert len(base["provenance"]["combined_runs"]) == 3
    # a combined baseline is history too
    rolled, _ = roll(combine(_runs([(100.0, 50.0), (104.0, 50.0)])), _runs([(102.0, 50.0)])[0], window=5)
    assert rolled["results"][0]["stats"]["run_trimmed_means_us"] == [100.0, 104.0, 102.0]


def test_roll_starts_over_for_another_triton():
    from mha_ci.perf.combine import roll

    old = combine(_runs([(100.0, 50.0), (104.0, 50.0)]))
    new = doc([entry(k, 90.0) for k in KEYS], versions={"torch": "2.13.0", "triton": "3.8.0"})
    rolled, reset = roll(old, new, window=5)
    assert "different triton" in reset
    assert rolled["results"][0]["stats"]["run_trimmed_means_us"] == [90.0]


def _runs_with_numerics(per_run: list[dict | None], values=(100.0, 104.0, 102.0)) -> list[dict]:
    runs = _runs([(us, 50.0) for us in values])
    for run, num in zip(runs, per_run):
        if num is not None:
            run["results"][0]["numerics"] = num
    return runs


def test_combine_carries_the_numerics_of_the_run_it_keeps():
    kept = numerics(rms=2e-3, versus=versus("c" * 40))
    out = combine(_runs_with_numerics([numerics(), numerics(), kept]))      # 102 is the median: run 3
    shape = out["results"][0]
    assert shape["numerics"]["reference"]["errors"]["out"]["rms_rel"] == 2e-3
    assert "versus" not in shape["numerics"] and shape["numerics"]["error"] is None
    assert "numerics" not in out["results"][1]      # a shape measured without numerics stays so
    assert check_perf(out) is None


def test_runs_that_disagree_on_the_bits_make_the_shape_unmeasured():
    out = combine(_runs_with_numerics([numerics(), numerics(sha={"lse": "x"}), numerics()]))
    error = out["results"][0]["numerics"]["error"]
    assert error.startswith("runs disagree: lse of seed 7: run 1 and run 2 differ")
    candidate = doc([entry(KEYS[0], 102.0) | {"numerics": numerics()}, entry(KEYS[1], 50.0) | {"numerics": numerics()}])
    c = compare(out, candidate, gate())
    assert c.shapes[0].numerics.class_ == "unmeasured" and "runs disagree" in c.shapes[0].numerics.reason
    assert any(f.startswith("numerics not measured for 2 shape(s)") for f in c.failures)


def test_an_output_declared_unordered_may_differ_between_runs_the_others_may_not():
    unordered = lambda num: {**num, "unordered_outputs": ["lse"]}     # noqa: E731
    allowed = frozenset({"lse"})
    out = combine(_runs_with_numerics([unordered(numerics()), unordered(numerics(sha={"lse": "x"})),
                                       unordered(numerics())]), may_be_unordered=allowed)
    assert out["results"][0]["numerics"]["error"] is None
    out = combine(_runs_with_numerics([unordered(numerics()), unordered(numerics(sha={"out": "x"})),
                                       unordered(numerics())]), may_be_unordered=allowed)
    assert out["results"][0]["numerics"]["error"].startswith("runs disagree: out of seed 7")


def test_a_declared_unordered_output_the_gate_does_not_allow_is_a_disagreement():
    runs = _runs_with_numerics([{**numerics(), "unordered_outputs": ["lse"]},
                                {**numerics(sha={"lse": "x"}), "unordered_outputs": ["lse"]},
                                {**numerics(), "unordered_outputs": ["lse"]}])
    assert combine(runs)["results"][0]["numerics"]["error"].startswith("runs disagree: lse of seed 7")


def test_runs_on_other_seeds_are_not_a_disagreement():
    out = combine(_runs_with_numerics([numerics(seed=1), numerics(seed=2, sha="x"), numerics(seed=1)]))
    assert out["results"][0]["numerics"]["error"] is None


def test_a_failed_shape_keeps_the_first_runs_numerics_and_the_disagreement():
    runs = _runs_with_numerics([numerics(), numerics(sha="x")])
    runs[1]["results"][0].update(stats=None, error="launch failed")
    shape = combine(runs)["results"][0]
    assert shape["stats"] is None and shape["numerics"]["error"].startswith("runs disagree")
