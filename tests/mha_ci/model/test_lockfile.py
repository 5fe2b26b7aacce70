"""Pins read from toolchain lock files (model.lockfile, which payloads may use too)."""
from __future__ import annotations

import pytest

from mha_ci.model.lockfile import normalise, read_pins


def test_reads_pins_and_skips_hashes_and_comments(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("# comment\n"
                    "Typing_Extensions==4.16.0 \\\n    --hash=sha256:00\n"
                    "torch==2.13.0+cpu \\\n    --hash=sha256:11 \\\n    --hash=sha256:22\n"
                    "--index-url https://example.invalid/simple\n")
    assert read_pins(lock) == {"typing-extensions": "4.16.0", "torch": "2.13.0+cpu"}


@pytest.mark.parametrize("line", ["torch>=2.13", "torch", "torch==2.13.0\ntorch==2.13.0"])
def test_loose_or_repeated_pins_are_refused(tmp_path, line):
    lock = tmp_path / "requirements.lock"
    lock.write_text(line + "\n")
    with pytest.raises(ValueError):
        read_pins(lock)


def test_checked_in_locks_pin_the_toolchain(repo_root):
    golden = read_pins(repo_root / "containers/triton-3.4/requirements.lock")
    top = read_pins(repo_root / "containers/triton-3.8/requirements.lock")
    assert (golden["triton"], top["triton"]) == ("3.4.0", "3.8.0")
    assert golden["torch"] == top["torch"]
    assert normalise("pytest_xdist") == "pytest-xdist"
