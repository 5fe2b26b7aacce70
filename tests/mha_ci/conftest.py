"""Fixtures shared by the tests of the runner (tests/mha_ci). Keep them small and general."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mha_ci.cache import cache_root

REPO_ROOT = Path(__file__).resolve().parents[2]
# The machine's cache as the test run found it ($MHA_CI_CACHE, else ~/.cache/mha-ci): the toolchain
# environments `make ci` built are there, and a slow test rebuilding them would take minutes.
MACHINE_CACHE = cache_root()


@pytest.fixture(autouse=True)
def private_cache(request, tmp_path_factory, monkeypatch) -> None:
    """No test writes the machine's cache unasked: XDG_CACHE_HOME points into pytest's temporary
    folder and MHA_CI_CACHE is unset. Slow tests (real toolchain environments, marked `slow`) get
    MHA_CI_CACHE=MACHINE_CACHE instead, so they reuse (or build once, as `mha-ci run` would) the
    environments of the lock files; a test may still set its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
    if request.node.get_closest_marker("slow"):
        monkeypatch.setenv("MHA_CI_CACHE", str(MACHINE_CACHE))
    else:
        monkeypatch.delenv("MHA_CI_CACHE", raising=False)


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


@pytest.fixture
def sibling_checkout(pipeline_root: Path):
    """`make(name)`: another checkout root beside `pipeline_root` with a copy of its pipelines/
    and containers/ (a base branch and a pull request, say), to edit apart."""
    def make(name: str) -> Path:
        root = pipeline_root.parent / f"{pipeline_root.name}-{name}"
        for folder in ("pipelines", "containers"):
            shutil.copytree(pipeline_root / folder, root / folder)
        return root
    return make


@pytest.fixture
def torch_python() -> str:
    """A Python with torch: $MHA_CI_TEST_TORCH_PYTHON, else the golden toolchain's venv in the
    machine's cache (built or reused through the venv executor, as `mha-ci run` would)."""
    candidate = os.environ.get("MHA_CI_TEST_TORCH_PYTHON")
    if candidate:
        return candidate
    from mha_ci.executors.venv import VenvExecutor
    from mha_ci.model.loader import load_pipeline

    pipeline = load_pipeline(REPO_ROOT)
    env = VenvExecutor(REPO_ROOT, cache=MACHINE_CACHE).ensure_env(pipeline.toolchains["triton-3.4"])
    return str(env / "bin" / "python")
