"""Fault injection on the perf gate: a gate that judged nothing, or too little, is red, and an
absurd perf document is bad input (exit 2 naming the file), never a crash (exit 4).

Every case runs `mha-ci perf compare BASE CAND` through the CLI and checks the exit code and a
phrase of its output (issue 24, High 2 and 3 and the perf part of "oversized inputs").
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from mha_ci.cli import main

from perf_builders import doc, entry  # noqa: E402

# A full run's worth of shapes (231 like the sm90 workload set) and its first two.
KEYS = [f"dense_b{i}_hq8_hk8_sq1024_sk1024_dqk128_dv128_c1" for i in range(1, 232)]
A, B = KEYS[0], KEYS[1]
FULL = doc([entry(key, 100.0) for key in KEYS])
PAIR = doc([entry(A, 100.0), entry(B, 1000.0)])


def scaled(document: dict, factor: float, keys=None, **stats) -> dict:
    """`document` with the times of `keys` (default all) multiplied by `factor` and `stats` set on them."""
    out = copy.deepcopy(document)
    for result in out["results"]:
        if keys is None or result["key"] in keys:
            s = result["stats"]
            s.update({name: s[name] * factor for name in ("trimmed_mean_us", "median_us", "max_us")})
            s.update(stats)
    return out


def timed(document: dict, key: str, us: float) -> dict:
    """`document` with every time of shape `key` set to `us`."""
    return scaled(document, 1.0, keys=[key], trimmed_mean_us=us, median_us=us, max_us=us)


def without(document: dict, *names: str, keep: int | None = None) -> dict:
    """`document` without the top-level `names`, and with only its first `keep` results."""
    out = {k: v for k, v in copy.deepcopy(document).items() if k not in names}
    if keep is not None:
        out["results"] = out["results"][:keep]
    return out


def with_selection(document: dict, **selection) -> dict:
    return copy.deepcopy(document) | {"selection": selection}


# (id, baseline, candidate, exit code, phrase in stdout + stderr)
GATE_CASES = [
    ("every-shape-invalid", FULL, scaled(FULL, 1.0, noise_pct=6.0), 1,
     "no shape was judged (231 invalid of 231)"),
    ("noise-just-over-the-limit-hides-50pct", FULL, scaled(FULL, 1.5, noise_pct=5.01), 1,
     "no shape was judged"),
    ("empty-baseline-3x-slower-candidate", without(FULL, keep=0), scaled(FULL, 3.0), 1,
     "no shape was judged"),
    ("candidate-without-results", FULL, with_selection(without(FULL, keep=0), subset="pr", count=0), 1,
     "no shape was judged (0 invalid of 0)"),
    ("candidate-without-selection-is-full", FULL, without(FULL, "selection", keep=200), 1,
     f"broken measurement: {KEYS[230]}: not measured in the candidate"),
    ("a-quarter-of-the-shapes-invalid", FULL, scaled(FULL, 1.0, keys=KEYS[:58], noise_pct=6.0), 1,
     "58 of 231 shapes invalid (25.1 %), more than gate.max_invalid_pct"),
    ("candidate-between-run-noise-8-hides-12pct", PAIR, scaled(PAIR, 1.12, between_run_noise_pct=8.0), 1,
     "too noisy: candidate noise 8.0 % (between runs) > 5.0 %"),
    ("candidate-between-run-noise-30-hides-50pct", PAIR, scaled(PAIR, 1.5, between_run_noise_pct=30.0), 1,
     "too noisy: candidate noise 30.0 % (between runs) > 5.0 %"),
    ("baseline-between-run-noise-50-lets-80pct-through", scaled(PAIR, 1.0, between_run_noise_pct=50.0),
     scaled(PAIR, 1.8), 1, "too noisy: baseline noise 50.0 % (between runs) > 5.0 %"),
    ("candidate-median-nan", PAIR, scaled(PAIR, 1.0, keys=[A], median_us=float("nan")), 1,
     f"broken measurement: {A}: candidate median_us is not a number: nan"),
    ("candidate-median-zero", PAIR, scaled(PAIR, 1.0, keys=[A], median_us=0), 1,
     f"broken measurement: {A}: candidate median_us is not positive: 0"),
    ("candidate-max-inf", PAIR, scaled(PAIR, 1.0, keys=[B], max_us=float("inf")), 1,
     f"broken measurement: {B}: candidate max_us is not a number: inf"),
    ("baseline-max-negative", scaled(PAIR, 1.0, keys=[B], max_us=-1.0), PAIR, 1,
     f"broken measurement: {B}: baseline max_us is not positive: -1.0"),
    ("baseline-median-null", scaled(PAIR, 1.0, keys=[A], median_us=None), PAIR, 1,
     f"broken measurement: {A}: baseline median_us is not a number: None"),
    ("healthy-subset", FULL, with_selection(without(FULL, keep=30), subset="pr", count=30), 0,
     "0 regressions"),
    # Not a physical time (below a nanosecond, or above an hour): read as a 100 % improvement, or
    # as a delta that overflows to Infinity, it would pass.
    ("candidate-time-5e-324", PAIR, timed(PAIR, A, 5e-324), 1,
     f"broken measurement: {A}: candidate time is below 0.001 us"),
    ("candidate-time-1e-300", PAIR, timed(PAIR, A, 1e-300), 1,
     f"broken measurement: {A}: candidate time is below 0.001 us"),
    ("baseline-time-5e-324", timed(PAIR, B, 5e-324), PAIR, 1,
     f"broken measurement: {B}: baseline time is below 0.001 us"),
    ("candidate-time-1e300", PAIR, timed(PAIR, A, 1e300), 1,
     f"broken measurement: {A}: candidate time is above 3.6e+09 us"),
    ("candidate-noise-negative", PAIR, scaled(PAIR, 1.5, keys=[A], noise_pct=-40.0), 1,
     f"broken measurement: {A}: candidate noise is not a percentage: -40.0"),
    ("baseline-noise-1e300", scaled(PAIR, 1.0, keys=[B], noise_pct=1e300), PAIR, 1,
     f"broken measurement: {B}: baseline noise is not a percentage: 1e+300"),
]


def _compare(tmp_path: Path, root: Path, base, cand, *options: str) -> int:
    paths = []
    for name, document in (("base.json", base), ("cand.json", cand)):
        path = tmp_path / name
        path.write_text(document if isinstance(document, str) else json.dumps(document))
        paths.append(str(path))
    return main(["--root", str(root), "perf", "compare", *paths, *options])


@pytest.mark.parametrize("base, cand, code, phrase", [c[1:] for c in GATE_CASES], ids=[c[0] for c in GATE_CASES])
def test_the_perf_gate_passes_only_having_judged_enough(tmp_path, repo_root, capsys, base, cand, code, phrase):
    assert _compare(tmp_path, repo_root, base, cand) == code
    captured = capsys.readouterr()
    assert phrase in captured.out + captured.err


def test_a_shape_hidden_by_between_run_noise_is_invalid_not_ok(tmp_path, repo_root, capsys):
    # One shape of a full run: too few invalid to fail the gate, but it must not read "ok".
    cand = scaled(FULL, 1.5, keys=[A], between_run_noise_pct=30.0)
    assert _compare(tmp_path, repo_root, FULL, cand, "--format", "json") == 0
    shapes = {s["key"]: s for s in json.loads(capsys.readouterr().out)["shapes"]}
    assert shapes[A]["status"] == "invalid"
    assert shapes[A]["reason"] == "too noisy: candidate noise 30.0 % (between runs) > 5.0 %"


def _strict_json(text: str) -> dict:
    def refuse(constant: str):
        raise AssertionError(f"{constant} in the JSON output: not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("base, cand", [(timed(PAIR, A, 5e-324), PAIR), (PAIR, timed(PAIR, A, 1e300)),
                                        (scaled(PAIR, 1.0, keys=[A], noise_pct=1e300), PAIR)],
                         ids=["baseline-5e-324", "candidate-1e300", "noise-1e300"])
def test_the_json_report_stays_json_whatever_the_times(tmp_path, repo_root, capsys, base, cand):
    assert _compare(tmp_path, repo_root, base, cand, "--format", "json") == 1
    report = _strict_json(capsys.readouterr().out)
    assert report["gate_failed"] and report["summary"]["improvement"] == 0


def _deep(levels: int) -> str:
    return json.dumps(PAIR)[:-1] + ', "deep": ' + "[" * levels + "]" * levels + "}"


def _raw(document: dict, old: str, new: str) -> str:
    text = json.dumps(document)
    assert old in text
    return text.replace(old, new, 1)


# (id, candidate (a document or its JSON text), phrase in stderr after the file's name)
BAD_DOCUMENTS = [
    ("integer-of-400-digits", _raw(PAIR, '"trimmed_mean_us": 100.0', '"trimmed_mean_us": ' + "9" * 400),
     "an integer of 400 digits"),
    ("integer-of-5000-digits", _raw(PAIR, '"noise_pct": 0.5', '"noise_pct": -' + "7" * 5000),
     "an integer of 5000 digits"),
    ("nested-100000-deep", _deep(100_000), "nested too deep"),
    ("stall-a-string", scaled(PAIR, 1.0, keys=[A], stall="x"), f"({A}): stall is not an object or null"),
    ("stall-a-list", scaled(PAIR, 1.0, keys=[B], stall=[1, 2]), f"({B}): stall is not an object or null"),
    ("stall-without-worst", scaled(PAIR, 1.0, keys=[A], stall={"ratio": 4.0}),
     f"({A}): stall's worst_us is not a finite number"),
    ("stats-a-number", _raw(PAIR, '"stats": {', '"stats": 5, "x": {'), "stats is not an object"),
    ("selection-count-below-results", with_selection(PAIR, subset="full", count=1),
     "selection count 1 is below the 2 results"),
    ("selection-subset-unknown", with_selection(PAIR, subset="most", count=2), "selection subset 'most'"),
    ("origins-not-objects", _raw(PAIR, '"origins": [{', '"origins": ["x", {'), "origins is not a list of objects"),
    # JSON leaves duplicate keys undefined and Python keeps the last: a reader of the file (or
    # another tool) would see one time, the gate another.
    ("duplicate-time", _raw(PAIR, '"trimmed_mean_us": 100.0', '"trimmed_mean_us": 500.0, "trimmed_mean_us": 100.0'),
     "duplicate key 'trimmed_mean_us'"),
    ("duplicate-results", _raw(PAIR, '"results": [', '"results": [], "results": ['), "duplicate key 'results'"),
]


@pytest.mark.parametrize("cand, phrase", [c[1:] for c in BAD_DOCUMENTS], ids=[c[0] for c in BAD_DOCUMENTS])
def test_an_absurd_perf_document_is_bad_input_naming_the_file(tmp_path, repo_root, capsys, cand, phrase):
    assert _compare(tmp_path, repo_root, PAIR, cand) == 2
    err = capsys.readouterr().err
    assert "cand.json: " in err and phrase in err
    assert "internal error" not in err and "Traceback" not in err
