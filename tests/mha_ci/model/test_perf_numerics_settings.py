"""perf.yaml's `numerics` section (model.perf_schema.NumericsSpec): `mha-ci validate` refuses a
factor or floor that would switch the numerics gate off or make every reordering fail, and
mha_ci.perf.config hands the checked values to the gate."""
from __future__ import annotations

from pathlib import Path

import pytest

from mha_ci.cli import main
from mha_ci.errors import ExitCode
from mha_ci.model.loader import load_pipeline
from mha_ci.perf.config import against_policy, gate_policy

FACTOR = "less_accurate_factor: 1.25"
FLOOR = "error_floor: 1.0e-6"


def _edit(root: Path, old: str, new: str) -> None:
    path = root / "pipelines" / "perf.yaml"
    text = path.read_text()
    assert old in text, f"perf.yaml no longer holds {old!r}"
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("old, new, phrase", [
    (FACTOR, "less_accurate_factor: 1.0", "greater than 1"),
    (FACTOR, "less_accurate_factor: 0.5", "greater than 1"),
    (FACTOR, "less_accurate_factor: 11", "less than or equal to 10"),
    (FACTOR, "less_accurate_factor: .inf", "finite number"),
    (FACTOR, "less_accurate_factor: .nan", "finite number"),
    (FACTOR, 'less_accurate_factor: "1.25"', "valid number"),
    (FLOOR, "error_floor: 0", "greater than 0"),
    (FLOOR, "error_floor: 0.01", "less than 0.01"),
    (FLOOR, "error_floor: .nan", "finite number"),
], ids=["factor-1", "factor-half", "factor-11", "factor-inf", "factor-nan", "factor-a-string", "floor-0",
        "floor-1e-2", "floor-nan"])
def test_validate_refuses_a_numerics_setting_out_of_bounds(pipeline_root, capsys, old, new, phrase):
    _edit(pipeline_root, old, new)
    assert main(["--root", str(pipeline_root), "validate"]) == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "perf.yaml" in err and "numerics" in err and phrase in err, err


@pytest.mark.parametrize("new", ["may_be_unordered: [dq, dz]", "may_be_unordered: dq", "may_be_unordered: [1]"],
                         ids=["unknown-output", "not-a-list", "not-a-name"])
def test_validate_refuses_an_allowance_that_names_no_output(pipeline_root, capsys, new):
    _edit(pipeline_root, "may_be_unordered: [dq]", new)
    assert main(["--root", str(pipeline_root), "validate"]) == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "perf.yaml" in err and "may_be_unordered" in err, err


def test_the_section_is_required(pipeline_root, capsys):
    _edit(pipeline_root, "numerics:", "numerics_gone:")
    assert main(["--root", str(pipeline_root), "validate"]) == ExitCode.CONFIG_ERROR


def test_the_gate_gets_the_checked_values(repo_root):
    spec = load_pipeline(repo_root).perf
    policy = gate_policy(spec)
    assert (policy.less_accurate_factor, policy.error_floor) == (spec.numerics.less_accurate_factor,
                                                                spec.numerics.error_floor)
    assert 1 < policy.less_accurate_factor <= 10 and not policy.require_numerics
    # perf measure --against: both sides ran the payload that measures numerics
    assert against_policy(gate_policy(spec), spec).require_numerics
