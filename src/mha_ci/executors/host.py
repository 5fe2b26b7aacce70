"""The host executor: the interpreter mha-ci itself runs on, as it is.

Nothing is installed, and the caller's PYTHONPATH stays behind src/ (a Triton brought to a host
as a folder on PYTHONPATH is part of "as it is"). The pins of the job's toolchain and platform
are enforced by the payload (a host that lacks triton 3.4.0 cannot claim to have run a
triton-3.4 job: exit 3, naming pin and installed version), unless the run asked for
`pin_mode="record"` (`mha-ci run --executor host --pins record`): for a GPU host that cannot
install the locks (no network), the payloads then run what is installed, record every mismatch,
and every result says it is unpinned. The toolchain named "host" is always recorded.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from mha_ci.executors.base import Executor, PayloadResult, PayloadRun
from mha_ci.executors.local_process import run_python_payload

HOST_TOOLCHAIN = "host"
PIN_MODES = ("enforce", "record")


class HostExecutor(Executor):
    name = "host"

    def __init__(self, root: Path, *, python: str | None = None, stream: TextIO | None = None,
                 pin_mode: str = "enforce") -> None:
        if pin_mode not in PIN_MODES:
            raise ValueError(f"pin_mode must be one of {PIN_MODES}, not {pin_mode!r}")
        self.root = Path(root).resolve()
        self.python = python or sys.executable
        self.stream = stream or sys.stderr
        self.pin_mode = pin_mode

    def run(self, payload: PayloadRun) -> PayloadResult:
        mode = "record" if payload.toolchain.name == HOST_TOOLCHAIN else self.pin_mode
        return run_python_payload(self.python, payload, self.root, executor=self.name, pin_mode=mode,
                                  stream=self.stream, keep_pythonpath=True)
