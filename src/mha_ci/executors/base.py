"""The one interface all executors share.

A payload is a Python module of `mha_ci.payloads` (it imports torch/triton/mha, never the
orchestrating side) started as `python -m mha_ci.payloads.<name> ARGS` with `src/` on
PYTHONPATH, inside the toolchain's environment. Before it does any work the payload checks the
installed versions against the toolchain's pins (mha_ci.payloads.pincheck) and exits 3 on a
mismatch, whatever executor started it.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path

from mha_ci.model.types import Arch, Toolchain


@dataclass(frozen=True)
class PayloadRun:
    """What to run: `python -m mha_ci.payloads.<module> *args`."""

    module: str                       # e.g. "correctness"
    args: tuple[str, ...]
    toolchain: Toolchain
    arch: Arch
    out_dir: Path                     # writable; everything the payload produces lands here
    env: dict[str, str] = field(default_factory=dict)   # only these pass in (plus PYTHONPATH etc.)
    timeout_s: float | None = None
    log_prefix: str = ""
    # Host folders the payload reads as a cache (the compile cache): the docker executor mounts
    # each that exists, read-only, at its path; the others see the host anyway.
    caches: tuple[Path, ...] = ()


@dataclass(frozen=True)
class PayloadResult:
    exit_code: int
    timed_out: bool = False
    error: str | None = None          # an executor fault (OOM kill, build failure), not a test failure
    provenance: dict = field(default_factory=dict)   # executor, image digest, python, ...


class Executor(abc.ABC):
    name: str
    # Whether payloads enforce the lock's pins or only record them (`--pins record`, host only).
    pin_mode: str = "enforce"

    @abc.abstractmethod
    def run(self, payload: PayloadRun) -> PayloadResult:
        """Run one payload to completion; never raises for a failing payload, only for
        environment problems (EnvironmentProblem, exit 3)."""
