"""The pin check every payload runs first: exit 3 naming pin and installed version on a mismatch.

Runs against this interpreter's own packages (pytest is installed wherever these tests run), so
no environment has to be built: pinning a version that is not installed is the mismatch.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mha_ci.payloads import pincheck

SRC = Path(__file__).resolve().parents[3] / "src"
PYTEST_VERSION = importlib.metadata.version("pytest")


def _run(pins: dict | None, *extra: str, mode: str | None = None, raw_env: str | None = None):
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(SRC)}
    if raw_env is not None:
        env["MHA_CI_PINS"] = raw_env
    elif pins is not None:
        env["MHA_CI_PINS"] = json.dumps({"toolchain": "triton-3.4", "mode": mode or "enforce", "pins": pins})
    return subprocess.run([sys.executable, "-m", "mha_ci.payloads.pincheck", *extra], env=env,
                          capture_output=True, text=True, timeout=60)


def test_matching_pins_pass_and_report_versions():
    proc = _run({"pytest": PYTEST_VERSION})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["pytest"] == PYTEST_VERSION


def test_mismatch_exits_3_naming_pin_and_installed_version():
    proc = _run({"pytest": "0.0.1", "triton": "3.4.0"})
    assert proc.returncode == 3
    assert f"toolchain triton-3.4 pins pytest==0.0.1 but the environment has pytest {PYTEST_VERSION}" in proc.stderr


def test_two_versions_of_a_pinned_package_on_the_path_are_a_mismatch(tmp_path):
    """Two wheels unpacked into one folder (as a GPU host's carried Triton over an older one): the
    first metadata found matches the pin, but which module is imported cannot be told."""
    for version in ("1.0", "2.0"):
        info = tmp_path / f"fakepkg-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakepkg\nVersion: {version}\n")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": f"{tmp_path}{os.pathsep}{SRC}",
           "MHA_CI_PINS": json.dumps({"toolchain": "triton-3.4", "pins": {"fakepkg": "1.0"}})}
    proc = subprocess.run([sys.executable, "-m", "mha_ci.payloads.pincheck"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stdout
    assert "two versions of fakepkg unpacked into one folder" in proc.stderr
    assert "1.0 in" in proc.stderr and "2.0 in" in proc.stderr


def test_two_versions_in_different_path_folders_are_not_ambiguous(tmp_path):
    """The first folder on the path wins for the import and for the metadata alike."""
    for version, folder in (("1.0", "first"), ("2.0", "second")):
        info = tmp_path / folder / f"fakepkg-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakepkg\nVersion: {version}\n")
    env = {"PATH": os.environ.get("PATH", ""),
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "first"), str(tmp_path / "second"), str(SRC)]),
           "MHA_CI_PINS": json.dumps({"toolchain": "triton-3.4", "pins": {"fakepkg": "1.0"}})}
    proc = subprocess.run([sys.executable, "-m", "mha_ci.payloads.pincheck"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_missing_package_is_a_mismatch():
    proc = _run({"surely-not-installed-pkg": "1.0"})
    assert proc.returncode == 3
    assert "pins surely-not-installed-pkg==1.0 but the environment does not have surely-not-installed-pkg" in proc.stderr


def test_names_are_compared_after_pep503_normalisation():
    proc = _run({"PyTest": PYTEST_VERSION})
    assert proc.returncode == 0, proc.stderr


def test_record_mode_runs_whatever_is_installed():
    proc = _run({"pytest": "0.0.1"}, mode="record")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["pytest"] == PYTEST_VERSION


def test_no_pins_at_all_is_refused():
    proc = _run(None)
    assert proc.returncode == 3
    assert "MHA_CI_PINS is not set" in proc.stderr


def test_malformed_pins_are_refused():
    proc = _run(None, raw_env="{not json")
    assert proc.returncode == 3
    assert "MHA_CI_PINS is not valid" in proc.stderr


def test_pins_on_the_command_line_and_record_file(tmp_path):
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(SRC), "MHA_CI_OUT": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "mha_ci.payloads.pincheck", "--toolchain", "t",
                           "--pins", json.dumps({"pytest": PYTEST_VERSION}), "--record", "v/versions.json"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "v" / "versions.json").read_text())["pytest"] == PYTEST_VERSION


def test_pincheck_imports_nothing_heavy():
    code = ("import sys, mha_ci.payloads.pincheck; "
            "bad = [m for m in ('torch', 'triton', 'numpy', 'pydantic', 'yaml') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_check_lists_every_mismatch_at_once():
    with pytest.raises(pincheck.PinMismatch) as info:
        pincheck.check({"toolchain": "tc", "mode": "enforce", "pins": {"pytest": "0.0.1", "no-such-pkg-x": "2"}})
    assert len(str(info.value).splitlines()) == 2


def _record_mode(monkeypatch, pins: dict, mode: str = "record") -> None:
    monkeypatch.setenv("MHA_CI_PINS", json.dumps({"toolchain": "triton-3.4", "mode": mode, "pins": pins}))


MISMATCHED = {"pytest": "0.0.1", "nosuchpkg-a": "1.0", "nosuchpkg-b": "2.0"}


def test_record_mode_collapses_the_mismatches_to_one_line_with_the_count(monkeypatch, capsys):
    """Every payload process prints this; the list itself goes into the results it writes."""
    _record_mode(monkeypatch, MISMATCHED)
    found = pincheck.enforce_report()
    err = capsys.readouterr().err
    assert err.splitlines() == ["mha-ci pin check: UNPINNED run (pins recorded, not enforced): 3 pin mismatches; "
                                "the full list is pin_mismatches in this run's results"]
    assert len(found["pin_mismatches"]) == 3 and found["pins_checked"] is False     # kept in full for the results
    assert any("pins pytest==0.0.1" in m for m in found["pin_mismatches"])


def test_record_mode_without_results_prints_the_full_list(monkeypatch, capsys):
    """enforce() keeps only the versions: its output is the one place the mismatches are."""
    _record_mode(monkeypatch, MISMATCHED)
    pincheck.enforce()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "mha-ci pin check: UNPINNED run (pins recorded, not enforced):" and len(lines) == 4


def test_enforced_pins_still_exit_3_with_every_mismatch(monkeypatch, capsys):
    _record_mode(monkeypatch, MISMATCHED, mode="enforce")
    with pytest.raises(SystemExit) as stop:
        pincheck.enforce_report()
    err = capsys.readouterr().err
    assert stop.value.code == 3
    assert "pins pytest==0.0.1" in err and "nosuchpkg-a" in err and "nosuchpkg-b" in err
    assert "UNPINNED" not in err
