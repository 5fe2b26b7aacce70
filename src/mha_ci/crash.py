"""What the CLI does when mha-ci itself breaks or is told to stop.

A crash must never read as a gate verdict: "exit 1, a gate failed" with a traceback on stderr
sends a reader hunting for a regression that is not there. So an unexpected exception becomes one
line naming it and the file its traceback went to (exit 4, errors.ExitCode.INTERNAL_ERROR).

SIGTERM is how CI runners cancel a job. Python's default for it kills the process on the spot,
leaving payloads (in their own process groups) running and results.json saying "running"; turned
into errors.Terminated it unwinds like Ctrl-C instead.
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
            if Path(out_dir).is_dir():
                path.write_text(text)
                return path
    with contextlib.suppress(OSError):
        handle, name = tempfile.mkstemp(prefix="mha-ci-crash-", suffix=".txt")
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        return Path(name)
    return None


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


@contextlib.contextmanager
def on_sigterm() -> Iterator[None]:
    """While inside, SIGTERM raises errors.Terminated in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
