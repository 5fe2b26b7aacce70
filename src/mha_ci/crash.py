"""What the CLI does when mha-ci itself breaks or is told to stop.

A crash must never read as a gate verdict: "exit 1, a gate failed" with a traceback on stderr
sends a reader hunting for a regression that is not there. So an unexpected exception becomes one
line naming it and the file its traceback went to (exit 4, errors.ExitCode.INTERNAL_ERROR).

SIGTERM is how CI runners cancel a job. Python's default for it kills the process on the spot,
leaving payloads (in their own process groups) running and results.json saying "running"; turned
into errors.Terminated it unwinds like Ctrl-C instead. Only the first signal does: a second one
must not interrupt that unwinding (on_signals).
"""
from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Iterator

from mha_ci.errors import Terminated

CRASH_FILE = "mha-ci-crash.txt"


def report_crash(exc: BaseException, out_dir: Path | None = None) -> str:
    """Write the traceback of `exc` to a file; return the one line to print."""
    text = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n" + "".join(
        traceback.format_exception(type(exc), exc, exc.__traceback__))
    where = _write_somewhere(text, out_dir)
    first = (str(exc).splitlines() or [""])[0]
    return (f"internal error: {type(exc).__name__}: {first} "
            f"({'traceback in ' + str(where) if where else 'traceback could not be written anywhere'})")


def _write_somewhere(text: str, out_dir: Path | None) -> Path | None:
    # --out first (next to the run's other files), else a fresh file in the temp folder: the
    # crash may be that --out is unusable.
    if out_dir is not None:
        with contextlib.suppress(OSError):
            path = Path(out_dir) / CRASH_FILE
            # not into a FIFO (the write would wait for a reader) or anything else but a file
            if Path(out_dir).is_dir() and (path.is_file() or not path.exists()) and not path.is_symlink():
                path.write_text(text)
                return path
    with contextlib.suppress(OSError):
        handle, name = tempfile.mkstemp(prefix="mha-ci-crash-", suffix=".txt")
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        return Path(name)
    return None


@contextlib.contextmanager
def on_signals(process_exits: bool = True) -> Iterator[None]:
    """While inside, SIGTERM raises errors.Terminated and SIGINT KeyboardInterrupt in the main
    thread, for the first of them only. Signals come in pairs (a nested `timeout`, a kill of the
    process group, a second Ctrl-C): a later one raising again would cut the cleanup of the first
    short (the payload group left alive, a traceback, exit 1). So once one fired, later ones are
    ignored, up to the process's exit when `process_exits` (the command line: restoring the default
    handlers would let a late signal turn the exit status into a kill or a traceback); a caller
    that goes on (main called from Python) gets its handlers back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum, frame) -> None:
        if fired:
            return
        fired.append(signum)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, handler)
    # A SIGINT the parent ignores (a job started in the background) stays ignored.
    if previous[signal.SIGINT] is signal.default_int_handler:
        signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        if not (fired and process_exits):
            for signum, action in previous.items():
                signal.signal(signum, action)
