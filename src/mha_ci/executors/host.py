"""The host executor: the interpreter mha-ci itself runs on, as it is.

Nothing is installed. The pins of the job's toolchain are still enforced by the payload (a
host that lacks triton 3.4.0 cannot claim to have run a triton-3.4 job: exit 3, naming pin and
installed version); only the toolchain named "host" runs whatever is installed, and records it.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from mha_ci.executors.base import Executor, PayloadResult, PayloadRun
from mha_ci.executors.local_process import run_python_payload

HOST_TOOLCHAIN = "host"


class HostExecutor(Executor):
    name = "host"

    def __init__(self, root: Path, *, python: str | None = None, stream: TextIO | None = None) -> None:
        self.root = Path(root).resolve()
        self.python = python or sys.executable
        self.stream = stream or sys.stderr

    def run(self, payload: PayloadRun) -> PayloadResult:
        mode = "record" if payload.toolchain.name == HOST_TOOLCHAIN else "enforce"
        return run_python_payload(self.python, payload, self.root, executor=self.name, pin_mode=mode,
                                  stream=self.stream)
