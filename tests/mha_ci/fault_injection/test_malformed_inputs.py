"""Malformed inputs to perf compare, perf history and perf bisect (issue 34 item 5): a wrong type
where a document has an object, a tampered resume state, a folder where an output file goes. Each
is a usage error (exit 2) naming the file and the key, never an internal error (exit 4)."""
import copy
import json
import subprocess
from pathlib import Path

import pytest

from mha_ci.bisect.state import NAME, SCHEMA, open_state
from mha_ci.cli import main
from mha_ci.errors import ConfigError, ExitCode

from perf_builders import doc, entry

REPO = Path(__file__).resolve().parents[3]
A = "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def _commit_all(root: Path) -> None:
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "baseline")


def _versions_as_string() -> dict:
    out = doc([entry(A, 100.0)])
    out["provenance"]["versions"] = "triton 3.4.0"
    return out


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_perf_compare_refuses_versions_that_are_not_an_object(tmp_path, capsys, side):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(doc([entry(A, 100.0)])))
    bad.write_text(json.dumps(_versions_as_string()))
    paths = [str(bad), str(good)] if side == "baseline" else [str(good), str(bad)]
    assert main(["--root", str(REPO), "perf", "compare", *paths]) == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "bad.json" in err and "provenance.versions" in err


def test_perf_history_refuses_versions_that_are_not_an_object(pipeline_root, tmp_path, capsys):
    stored = pipeline_root / "perf_baselines" / "sm90" / "triton-3.4.json"
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_text(json.dumps(_versions_as_string()))
    _commit_all(pipeline_root)
    code = main(["--root", str(pipeline_root), "perf", "history", "--arch", "sm90", "--toolchain", "triton-3.4",
                 "--out", str(tmp_path / "out")])
    assert code == ExitCode.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "triton-3.4.json" in err and "provenance.versions" in err


ARGUMENTS = {"good": "a" * 40, "bad": "c" * 40, "arch": "sm90", "toolchain": "triton-3.4", "pass": None,
             "shapes": [A]}
COMMITS = [{"sha": sha * 40, "subject": f"commit {sha}", "tree": sha * 40} for sha in "abc"]
STATE = {"schema": SCHEMA, "arguments": ARGUMENTS, "trees": {},
         "cpu": {"commits": COMMITS, "builds": [["a" * 40], ["b" * 40, "c" * 40]]},
         "steps": {"b" * 40: {"commit": "b" * 40, "regressed": True, "shapes": {}, "seconds": 1.0}}}


def _tampered(path: str, value) -> dict:
    out = copy.deepcopy(STATE)
    *parents, last = path.split(".")
    node = out
    for name in parents:
        node = node[name]
    node[last] = value
    return out


@pytest.mark.parametrize("path, value, key", [
    ("cpu.builds", "x", "cpu.builds"),
    ("cpu.builds", [["a" * 40], ["b" * 40, "f" * 40]], "cpu.builds"),
    ("cpu.commits", "x", "cpu.commits"),
    ("cpu", [], "cpu"),
    ("steps", [], "steps"),
    ("steps", {"f" * 40: {"commit": "f" * 40, "regressed": True, "shapes": {}}}, "steps"),
    ("steps", {"b" * 40: {"commit": "b" * 40}}, "steps"),
    ("trees", "x", "trees"),
])
def test_a_tampered_bisect_state_is_a_usage_error_naming_the_key(tmp_path, path, value, key):
    (tmp_path / NAME).write_text(json.dumps(_tampered(path, value)))
    with pytest.raises(ConfigError) as caught:
        open_state(tmp_path, ARGUMENTS)
    assert caught.value.exit_code == ExitCode.CONFIG_ERROR
    assert NAME in str(caught.value) and key in str(caught.value)


def test_an_untampered_bisect_state_opens(tmp_path):
    (tmp_path / NAME).write_text(json.dumps(STATE))
    state = open_state(tmp_path, ARGUMENTS)
    assert list(state.steps()) == ["b" * 40]


def test_perf_compare_refuses_a_folder_where_compare_json_goes(tmp_path, capsys):
    base = tmp_path / "base.json"
    base.write_text(json.dumps(doc([entry(A, 100.0)])))
    out = tmp_path / "out"
    (out / "compare.json").mkdir(parents=True)
    assert main(["--root", str(REPO), "perf", "compare", str(base), str(base), "--out", str(out)]) \
        == ExitCode.CONFIG_ERROR
    assert "compare.json" in capsys.readouterr().err


def test_perf_history_refuses_a_folder_where_history_json_goes(pipeline_root, tmp_path, capsys):
    stored = pipeline_root / "perf_baselines" / "sm90" / "triton-3.4.json"
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_text(json.dumps(doc([entry(A, 100.0)])))
    _commit_all(pipeline_root)
    out = tmp_path / "out"
    (out / "history.json").mkdir(parents=True)
    code = main(["--root", str(pipeline_root), "perf", "history", "--arch", "sm90", "--toolchain", "triton-3.4",
                 "--out", str(out)])
    assert code == ExitCode.CONFIG_ERROR
    assert "history.json" in capsys.readouterr().err
