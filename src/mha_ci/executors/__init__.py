"""Executors run a job payload inside a pinned toolchain: venv (default), docker, host."""
from __future__ import annotations

import importlib
from pathlib import Path

from mha_ci.errors import EnvironmentProblem
from mha_ci.executors.base import Executor
from mha_ci.executors.host import HostExecutor
from mha_ci.executors.venv import VenvExecutor


def make_executor(name: str, root: Path, *, cache: Path | None = None, pin_mode: str = "enforce") -> Executor:
    """The executor called `name` ("venv" | "docker" | "host") for the checkout at `root`.
    `cache`: where the venv executor keeps its venvs, when not under `root` (a base checkout
    made for `perf measure --against` shares the working tree's). `pin_mode`: host only."""
    if name == "venv":
        return VenvExecutor(root, cache=cache)
    if name == "host":
        return HostExecutor(root, pin_mode=pin_mode)
    try:
        module = importlib.import_module("mha_ci.executors.docker")   # needs the docker SDK: lazily
    except ImportError as exc:
        raise EnvironmentProblem(f"the docker executor cannot be loaded: {exc}") from None
    return module.DockerExecutor(root)
