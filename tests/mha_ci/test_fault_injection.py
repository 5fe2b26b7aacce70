"""Fault injection: broken inputs, skipped runs and crashes never end in a green gate.

Each case is one line in a table: how to break something, the exit code `mha-ci` must give and
a phrase its output must hold. The rule they hold (issue 13): a missing, failed, NaN or
non-positive measurement fails the gate with a reason per shape; a crash is never reported as a
gate verdict (exit 4, one line, the traceback in a file); an interrupted run says so.
"""
from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path

import pytest

from mha_ci.cli import main
from mha_ci.errors import ExitCode

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "perf"))
from perf_builders import doc, entry  # noqa: E402

A = "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"
B = "dense_b1_hq128_hk8_sq8192_sk8192_dqk128_dv128_c1"
BASE = doc([entry(A, 100.0), entry(B, 1000.0)])


def candidate(**times) -> dict:
    """BASE with some shapes' trimmed means replaced (A=..., B=...); "drop" removes the shape."""
    out = copy.deepcopy(BASE)
    keys = {"A": A, "B": B}
    for name, value in times.items():
        result = next(r for r in out["results"] if r["key"] == keys[name])
        if value == "drop":
            out["results"].remove(result)
        elif value == "failed":
            result.update(stats=None, error="RuntimeError: launch failed")
        else:
            result["stats"]["trimmed_mean_us"] = value
    return out


def with_stats(document: dict, key: str, **stats) -> dict:
    out = copy.deepcopy(document)
    next(r for r in out["results"] if r["key"] == key)["stats"].update(stats)
    return out


# (id, baseline document, candidate document, exit code, phrase in stdout+stderr)
PERF_CASES = [
    ("candidate-nan", BASE, candidate(A=math.nan), 1, "candidate time is not a number: nan"),
    ("candidate-inf", BASE, candidate(A=math.inf), 1, "candidate time is not a number: inf"),
    ("candidate-zero", BASE, candidate(A=0.0), 1, "candidate time is not positive: 0.0"),
    ("candidate-negative", BASE, candidate(B=-5.0), 1, "candidate time is not positive: -5.0"),
    ("candidate-string", BASE, candidate(A="12.5"), 1, "candidate time is not a number: '12.5'"),
    ("candidate-null-time", BASE, candidate(A=None), 1, "candidate time is not a number: None"),
    ("candidate-half-missing", BASE, candidate(B="drop"), 1, f"{B}: not measured in the candidate"),
    ("candidate-all-failed", BASE, candidate(A="failed", B="failed"), 1,
     f"{B}: candidate failed: RuntimeError: launch failed"),
    ("candidate-noise-nan", BASE, with_stats(BASE, A, noise_pct=math.nan), 1, "candidate noise is not a number"),
    ("baseline-nan", candidate(A=math.nan), BASE, 1, "baseline time is not a number: nan"),
    ("baseline-null", candidate(A=None), BASE, 1, "baseline time is not a number: None"),
    ("baseline-string", candidate(B="fast"), BASE, 1, "baseline time is not a number: 'fast'"),
    ("baseline-zero", candidate(A=0), BASE, 1, "baseline time is not positive: 0"),
    ("subset-count-short", BASE, doc([entry(A, 100.0)], subset="pr") | {"selection": {"subset": "pr", "count": 2}},
     1, "counts 1 shape(s) more than its results hold"),
    ("stall-from-max-only", BASE, with_stats(BASE, A, max_us=500_000.0, stall=None), 0,
     "worst 0.50 s against a 100 us median (x5000.0; seen in max_us only)"),
    ("healthy", BASE, candidate(A=101.0), 0, "0 regressions"),
]


@pytest.mark.parametrize("base, cand, code, phrase", [c[1:] for c in PERF_CASES], ids=[c[0] for c in PERF_CASES])
def test_perf_compare_never_passes_a_broken_measurement(tmp_path, repo_root, capsys, base, cand, code, phrase):
    paths = []
    for name, document in (("base.json", base), ("cand.json", cand)):
        (tmp_path / name).write_text(json.dumps(document))     # NaN/Infinity as Python's json writes them
        paths.append(str(tmp_path / name))
    assert main(["--root", str(repo_root), "perf", "compare", *paths]) == code
    captured = capsys.readouterr()
    assert phrase in captured.out + captured.err
    assert "ok       +nan" not in captured.out
