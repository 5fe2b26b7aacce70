"""An A/B in rounds (mha_ci.perf.rounds): each round a fresh process pair with its share of the
reps, the first side alternating, each side pooled so its noise sees the spread between processes."""
import json
from pathlib import Path

import pytest

from mha_ci.errors import ConfigError
from mha_ci.jobs import perf as perf_kind
from mha_ci.jobs.context import JobContext, RunOptions
from mha_ci.model.loader import load_pipeline
from mha_ci.model.types import Job
from mha_ci.perf.rounds import pool, round_method
from mha_ci.perf.stats import Method

from ab_sides import AbSides  # noqa: E402
from perf_builders import doc, entry  # noqa: E402

KEY = "dense_b1_hq8_hk1_sq8192_sk8192_dqk64_dv64_c0_wl128_wr0_sink_bwd"
OTHER = "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"
METHOD = Method(reps=6, dispatches=10, min_dispatches=10, max_seconds_per_shape=1.5)


def test_a_round_gets_its_share_of_the_reps_and_of_the_time_budget():
    one = round_method(METHOD, 2)
    assert (one.reps, one.max_seconds_per_shape) == (3, 0.75)
    assert round_method(METHOD, 1) == METHOD
    with pytest.raises(ConfigError, match="do not split"):
        round_method(METHOD, 4)


def _dump(times: dict[str, list[float]]) -> dict:
    return {"shapes": [{"key": k, "reps": [[t] * 10 for t in rep_times]} for k, rep_times in times.items()]}


def test_pooling_takes_every_rounds_reps_so_a_process_offset_becomes_noise():
    rounds = [doc([entry(KEY, 100.0), entry(OTHER, 50.0)]), doc([entry(KEY, 101.5), entry(OTHER, 50.0)])]
    dumps = [_dump({KEY: [100.0, 100.1, 99.9], OTHER: [50.0] * 3}), _dump({KEY: [101.5, 101.6, 101.4], OTHER: [50.0] * 3})]
    pooled = pool(rounds, dumps, METHOD)
    first = pooled["results"][0]
    assert first["stats"]["reps"] == 6
    assert first["stats"]["rep_means_us"] == [100.0, 100.1, 99.9, 101.5, 101.6, 101.4]
    assert first["stats"]["trimmed_mean_us"] == pytest.approx(100.75)   # the two middle reps
    # inside each round the noise was 0.1 %; pooled, the 1.5 % between them shows
    assert first["stats"]["noise_pct"] > 0.9
    assert first["round_trimmed_means_us"] == [100.0, 101.5]
    assert pooled["selection"]["rounds"] == 2 and pooled["method"]["reps"] == 6
    assert pooled["results"][1]["stats"]["noise_pct"] == 0.0


def test_a_shape_failed_or_running_other_code_in_one_round_is_an_error():
    failed = entry(KEY, None, error="RuntimeError: boom")
    other_code = entry(OTHER, 50.0)
    other_code["code_objects"] = {"attn_fwd": "b"}
    same_code = entry(OTHER, 50.0)
    same_code["code_objects"] = {"attn_fwd": "a"}
    rounds = [doc([entry(KEY, 100.0), same_code]), doc([failed, other_code])]
    dumps = [_dump({KEY: [100.0] * 3, OTHER: [50.0] * 3}), _dump({OTHER: [50.0] * 3})]
    pooled = pool(rounds, dumps, METHOD)
    assert pooled["results"][0]["stats"] is None and "round 2: RuntimeError: boom" in pooled["results"][0]["error"]
    assert pooled["results"][1]["stats"] is None and "other code objects" in pooled["results"][1]["error"]
    with pytest.raises(ConfigError, match="other shapes"):
        pool([rounds[0], doc([entry(KEY, 100.0)])], dumps, METHOD)


def test_rounds_must_split_the_reps(pipeline_root):
    perf = pipeline_root / "pipelines" / "perf.yaml"
    perf.write_text(perf.read_text().replace("  rounds: 2\n", "  rounds: 4\n"))
    with pytest.raises(ConfigError, match="rounds of at least 2 reps"):
        load_pipeline(pipeline_root)


@pytest.mark.slow
def test_the_ab_runs_its_rounds_alternating_who_goes_first(pipeline_root, tmp_path, monkeypatch):
    """perf.yaml's two rounds: two lockstep pairs with 3 reps each, the head first in the second,
    numerics (and saved outputs) in the first only; each side pooled to 6 reps."""
    import shutil
    src = Path(__file__).resolve().parents[3] / "src"
    shutil.copytree(src / "mha_ci", pipeline_root / "src" / "mha_ci", ignore=shutil.ignore_patterns("__pycache__"))
    base = tmp_path / "base"
    (base / "src" / "mha").mkdir(parents=True)
    (base / "src" / "mha" / "__init__.py").write_text("")
    fake = AbSides()
    monkeypatch.setattr(perf_kind, "make_executor", lambda *a, **kw: fake)
    job = Job(kind="perf", arch="sm90", toolchain="triton-3.4")
    result = perf_kind.run_job(job, JobContext(load_pipeline(pipeline_root), fake, tmp_path / "o",
                                               RunOptions(perf_subset="pr", perf_against=str(base))))
    assert result.verdict == "pass", result.message
    turns = sorted(fake.turns)
    assert [(side, role, reps, numerics) for folder, side, role, reps, numerics in turns] == [
        ("base", "a", 3, True), ("head", "b", 3, True), ("base", "b", 3, False), ("head", "a", 3, False)]
    assert [folder.rsplit("/", 2)[-2] for folder, *_ in turns] == ["round1", "round1", "round2", "round2"]
    head = json.loads((tmp_path / "o" / "jobs" / job.id / "perf-head.json").read_text())
    assert head["selection"]["rounds"] == 2
    assert all(r["stats"]["reps"] == 6 and r["numerics"]["versus"]["outputs"]["out"]["identical"]
               for r in head["results"])
