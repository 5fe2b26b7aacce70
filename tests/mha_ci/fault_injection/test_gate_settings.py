"""Probes of the pipeline settings a pull request could loosen with one token: a gate setting of
`.inf` switches the perf gate off, a quoted value is coerced into a setting, a shard count of a
hundred million plans a matrix no one can run, and a runner label that is a `${{ }}` expression is
copied into `runs-on`. `mha-ci validate` refuses each one (exit 2, naming the file and key)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mha_ci.cli import main
from mha_ci.errors import ExitCode

from perf_builders import doc, entry  # noqa: E402

KEYS = [f"dense_b{i}_hq8_hk8_sq1024_sk1024_dqk128_dv128_c1" for i in range(1, 5)]


def edit(root: Path, file: str, old: str, new: str) -> None:
    path = root / "pipelines" / file
    text = path.read_text()
    assert old in text, f"{file} no longer holds {old!r}"
    path.write_text(text.replace(old, new, 1))


# (id, file, old, new, phrase in the error)
LOOSENED = [
    ("floor-inf", "perf.yaml", "floor_pct: 3.0", "floor_pct: .inf", "finite number"),
    ("invalid-noise-inf", "perf.yaml", "invalid_noise_pct: 5.0", "invalid_noise_pct: .inf", "finite number"),
    ("floor-1e300", "perf.yaml", "floor_pct: 3.0", "floor_pct: 1.0e+300", "less than or equal to 25"),
    # YAML 1.1 reads `1e300` (no dot) as a string, which lax parsing turned into a number
    ("floor-1e300-a-string", "perf.yaml", "floor_pct: 3.0", "floor_pct: 1e300", "valid number"),
    ("invalid-noise-400", "perf.yaml", "invalid_noise_pct: 5.0", "invalid_noise_pct: 400", "widest threshold"),
    ("k-a-million", "perf.yaml", "k: 2.0", "k: 1000000", "widest threshold"),
    ("against-floor-inf", "perf.yaml", "floor_pct: 1.5", "floor_pct: .inf", "finite number"),
    ("against-floor-90", "perf.yaml", "floor_pct: 1.5", "floor_pct: 90", "less than or equal to 25"),
    ("stall-excess-inf", "perf.yaml", "stall_min_excess_us: 50.0", "stall_min_excess_us: .inf", "finite number"),
    ("max-invalid-99", "perf.yaml", "max_invalid_pct: 5.0", "max_invalid_pct: 99", "less than or equal to 50"),
    ("refresh-noise-inf", "perf.yaml", "max_noise_pct: 2.5", "max_noise_pct: .inf", "finite number"),
    ("seconds-per-shape-inf", "perf.yaml", "max_seconds_per_shape: 1.5", "max_seconds_per_shape: .inf",
     "finite number"),
    ("floor-a-string", "perf.yaml", "floor_pct: 3.0", 'floor_pct: "3"', "valid number"),
    ("l2-flush-a-string", "perf.yaml", "l2_flush: false", 'l2_flush: "no"', "valid boolean"),
    ("warmup-a-string", "perf.yaml", "warmup: 10", 'warmup: "10"', "valid integer"),
    ("skip-draft-yes", "jobs.yaml", "skip_draft: true", 'skip_draft: "yes"', "valid boolean"),
    ("sharded-one", "jobs.yaml", "sharded: true", "sharded: 1", "valid boolean"),
    ("a-hundred-million-shards", "archs.yaml", "correctness_shards: 4", "correctness_shards: 100000000",
     "less than or equal to 64"),
    ("runner-label-expression", "archs.yaml", "[self-hosted, linux, h100]",
     "[self-hosted, linux, '${{ github.event.pull_request.title }}']", "expression"),
    ("runner-label-expression-spaced", "archs.yaml", "[self-hosted, linux, h100]",
     "[self-hosted, linux, 'h100-${{github.head_ref}}']", "expression"),
]


@pytest.mark.parametrize("file, old, new, phrase", [c[1:] for c in LOOSENED], ids=[c[0] for c in LOOSENED])
def test_validate_refuses_a_setting_that_loosens_or_breaks_the_pipeline(pipeline_root, capsys, file, old, new,
                                                                         phrase):
    edit(pipeline_root, file, old, new)
    assert main(["--root", str(pipeline_root), "validate"]) == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert file in err and phrase in err, err
    assert "Traceback" not in err


def test_nan_was_and_stays_refused(pipeline_root, capsys):
    edit(pipeline_root, "perf.yaml", "floor_pct: 3.0", "floor_pct: .nan")
    assert main(["--root", str(pipeline_root), "validate"]) == ExitCode.CONFIG_ERROR


def test_the_current_settings_are_inside_the_bounds(repo_root):
    assert main(["--root", str(repo_root), "validate"]) == ExitCode.OK


def test_an_infinite_gate_never_judges_five_times_slower_as_ok(pipeline_root, tmp_path, capsys):
    """Issue 34's probe: with `.inf` floor and noise limit, every shape 5x slower read `ok +400.0 %`."""
    edit(pipeline_root, "perf.yaml", "floor_pct: 3.0", "floor_pct: .inf")
    edit(pipeline_root, "perf.yaml", "invalid_noise_pct: 5.0", "invalid_noise_pct: .inf")
    base, cand = tmp_path / "base.json", tmp_path / "cand.json"
    base.write_text(json.dumps(doc([entry(k, 100.0) for k in KEYS])))
    cand.write_text(json.dumps(doc([entry(k, 500.0) for k in KEYS])))
    code = main(["--root", str(pipeline_root), "perf", "compare", str(base), str(cand)])
    out = capsys.readouterr()
    assert code == ExitCode.CONFIG_ERROR, out.out
    assert "perf.yaml" in out.err and "+400.0" not in out.out
