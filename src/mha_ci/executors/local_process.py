"""Starting a payload as a child process of this machine (shared by the venv and host executors).

Why a clean environment: a job must give the same verdict wherever it runs, so nothing of the
caller's shell leaks in except what a payload legitimately needs (PATH, HOME, locale, temp
folder, which GPUs this runner may use, the ld.lld Triton 3.4 needs). The payload contract
(mha_ci.payloads) is completed here: PYTHONPATH=<root>/src, MHA_CI_OUT, MHA_CI_PINS, cwd=<root>.
"""
from __future__ import annotations

import codecs
import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from mha_ci.errors import EnvironmentProblem, ExitCode
from mha_ci.executors.base import PayloadResult, PayloadRun

# Variables of the caller that pass into a payload's environment; everything else is dropped.
PASSTHROUGH = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM",
    # which GPUs this runner was given (a CI runner may own a subset of the host's GPUs)
    "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    # Triton 3.4 links AMD code objects with an external ld.lld (docs/facts.md); cache location
    "TRITON_HIP_LLD_PATH", "TRITON_CACHE_DIR",
    # where the memcheck job finds compute-sanitizer (mha_ci.payloads.sanitizer.find)
    "MHA_CI_COMPUTE_SANITIZER", "CUDA_HOME",
)

TAIL_LINES = 60


def payload_environment(payload: PayloadRun, root: Path, pin_mode: str = "enforce",
                        keep_pythonpath: bool = False) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASSTHROUGH if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env.update(payload.env)
    inherited = os.environ.get("PYTHONPATH") if keep_pythonpath else None
    env["PYTHONPATH"] = str(root / "src") + (os.pathsep + inherited if inherited else "")
    env["PYTHONUNBUFFERED"] = "1"
    if "PYTHONPYCACHEPREFIX" not in env:
        # the checkout may be read-only (docker mounts it so); with a prefix nothing is written beside it
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["MHA_CI_OUT"] = str(payload.out_dir)
    env["MHA_CI_PINS"] = json.dumps({"toolchain": payload.toolchain.name, "mode": pin_mode,
                                     "pins": dict(payload.toolchain.pins)}, sort_keys=True)
    return env


def run_python_payload(python: str, payload: PayloadRun, root: Path, *, executor: str,
                       pin_mode: str = "enforce", stream: TextIO | None = None,
                       provenance: dict | None = None, keep_pythonpath: bool = False) -> PayloadResult:
    """Run `python -m mha_ci.payloads.<module> args`, streaming its output as it comes with the
    job's prefix at the start of every line. Exit 3 of a payload is an environment problem and raises EnvironmentProblem
    carrying the payload's last lines (the pin check names pin and installed version there)."""
    stream = stream or sys.stderr
    payload.out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", f"mha_ci.payloads.{payload.module}", *payload.args]
    env = payload_environment(payload, root, pin_mode, keep_pythonpath)
    prefix = f"[{payload.log_prefix}] " if payload.log_prefix else ""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # own group: a timeout kills xdist workers too
    except OSError as exc:
        raise EnvironmentProblem(f"{executor} executor cannot start {python}: {exc}") from None

    def pump() -> None:
        # Chunks, not lines: pytest's progress dots arrive without a newline for minutes at a time.
        assert proc.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        at_line_start, partial = True, ""
        while chunk := os.read(proc.stdout.fileno(), 65536):
            text = decoder.decode(chunk)
            pieces = text.split("\n")
            shown = []
            for i, piece in enumerate(pieces):
                last = i == len(pieces) - 1
                if piece and at_line_start:
                    shown.append(prefix)
                shown.append(piece if last else piece + "\n")
                partial += piece
                if not last:
                    tail.append(partial)
                    partial, at_line_start = "", True
                elif piece:
                    at_line_start = False
            stream.write("".join(shown))
            stream.flush()
        if partial:
            tail.append(partial)
            stream.write("\n")
            stream.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=payload.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    except KeyboardInterrupt:
        _kill_group(proc)
        raise
    reader.join(timeout=10)
    wall = time.monotonic() - started
    result_provenance = {"executor": executor, "python": python, "wall_s": round(wall, 3), "pin_mode": pin_mode,
                         **(provenance or {})}
    if timed_out:
        return PayloadResult(exit_code=proc.returncode if proc.returncode is not None else -9, timed_out=True,
                             error=f"timed out after {payload.timeout_s:g} s", provenance=result_provenance)
    if proc.returncode == ExitCode.ENVIRONMENT_ERROR:
        last = "\n".join(list(tail)[-8:])
        raise EnvironmentProblem(f"payload {payload.module} for toolchain {payload.toolchain.name} reported an "
                                 f"environment problem (exit 3):\n{last}")
    error = None
    if proc.returncode < 0:
        error = f"killed by signal {-proc.returncode} ({_signal_name(-proc.returncode)})"
    return PayloadResult(exit_code=proc.returncode, error=error, provenance=result_provenance)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"
