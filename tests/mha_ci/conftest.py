"""Fixtures shared by the tests of the runner (tests/mha_ci). Keep them small and general."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo_root() -> Path:
    """The checkout this test suite belongs to (holds pipelines/, containers/, src/)."""
    return REPO_ROOT


@pytest.fixture
def pipeline_root(tmp_path: Path) -> Path:
    """A throwaway checkout root with a copy of pipelines/ and the toolchain lock files and
    Dockerfiles (image references derive from both), for tests that edit the YAML. Returns the
    root (pass it as `--root`)."""
    shutil.copytree(REPO_ROOT / "pipelines", tmp_path / "pipelines")
    for lock in [*(REPO_ROOT / "containers").glob("*/requirements*.lock"),
                 *(REPO_ROOT / "containers").glob("*/Dockerfile.*")]:
        target = tmp_path / "containers" / lock.parent.name
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lock, target / lock.name)
    return tmp_path
