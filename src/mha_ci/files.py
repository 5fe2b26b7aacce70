"""Reading inputs and writing results without trusting the file system.

An input path may name a device (/dev/zero never ends), a FIFO (opening it waits for a writer
forever) or a file of gigabytes; `read_capped` refuses all three with a usage error naming the
file (exit 2) before reading more than its cap. A result written in place and cut short (full disk,
kill) looks like a complete one to the next reader; `write_atomic` leaves either the old file or
the whole new one, and a failed write is an environment error (exit 3). Two runs writing into one
folder interleave their results; `exclusive_folder` lets only one in.

Standard library plus mha_ci.errors only.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterator, TypeGuard

from mha_ci.errors import ConfigError, EnvironmentProblem

# The machine's storage failing under a write (full disk, quota, read-only remount, I/O error): an
# environment error (exit 3), not a bug in mha-ci and not a verdict on the code.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG})


def storage_failure(exc: BaseException) -> TypeGuard[OSError]:
    return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def read_capped(path: Path, what: str, max_bytes: int) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` of them; anything else is a ConfigError."""
    path = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; it changes
        # nothing for a regular file.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror or exc}", file=str(path)) from None
    # Checked on the descriptor, before a file object exists: Python refuses to make one of a folder.
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or special file"
        raise ConfigError(f"cannot read {what}: it is {kind}, not a regular file", file=str(path))
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read {what}: {exc.strerror or exc}", file=str(path)) from None
    if len(data) > max_bytes:
        raise ConfigError(f"{what} has more than the {max_bytes} allowed bytes", file=str(path))
    return data


def read_json(path: Path) -> dict | None:
    """A JSON file written by one of our own steps (a payload's result), or None when it is
    missing or not JSON: the caller says what that means."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def tree_digest(package_dir: Path) -> str:
    """sha256 of a package's Python sources: every .py under it, path-relative, caches left out."""
    digest = hashlib.sha256()
    for path in sorted(Path(package_dir).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        digest.update(str(path.relative_to(package_dir)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def write_atomic(path: Path, text: str | bytes) -> None:
    """Replace `path` with `text` (UTF-8, or bytes as they are) all at once: a temporary file
    beside it, flushed to disk, then a rename. An OSError (no space left, read-only, quota) is
    EnvironmentProblem (exit 3); `path` keeps its previous content and no temporary file stays behind."""
    path = Path(path)
    # The rename would replace a FIFO or a device silently, and fail on a folder: each is a
    # usage error naming the path.
    refuse_special_outputs(path.parent, (path.name,), option="output")
    try:
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise EnvironmentProblem(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(handle, "wb") as stream:
            # mkstemp makes the file 0600; the result is an ordinary file, as a plain write makes it.
            os.fchmod(stream.fileno(), 0o666 & ~_umask())
            stream.write(text.encode("utf-8") if isinstance(text, str) else text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise EnvironmentProblem(f"cannot write {path}: {exc.strerror or exc}") from None


def _umask() -> int:
    """The process's umask, read without setting it (os.umask sets it, for every thread at once)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def exclusive_folder(folder: Path, option: str) -> Iterator[None]:
    """Hold `folder` for this process while inside; a folder another process holds is a ConfigError.

    The lock is flock(2) on the folder itself: no lock file to leave behind or clean up, and the
    kernel drops it when the holder exits, however it exits (kill -9 included)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise ConfigError(f"{option} {folder}: cannot open it: {exc.strerror or exc}", key=option) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"{option} {folder} is in use by another mha-ci run; wait for it to finish or "
                              f"pass another {option}", key=option) from None
        yield
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a FIFO" if stat.S_ISFIFO(mode) else "a device or special file"


def refuse_special_outputs(folder: Path, files: tuple[str, ...], folders: tuple[str, ...] = (),
                           option: str = "--out") -> None:
    """A ConfigError (exit 2) naming the first of `folder`'s output paths that exists as something
    the output cannot replace: a folder where a file goes, a file where a folder goes, a FIFO (writing
    into one waits for a reader forever) or a device. A symbolic link is replaced, never followed."""
    for name, want_folder in [(n, False) for n in files] + [(n, True) for n in folders]:
        path = Path(folder) / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigError(f"{option}: cannot inspect {name}: {exc.strerror or exc}", file=str(path),
                              key=option) from None
        fits = stat.S_ISDIR(mode) if want_folder else (stat.S_ISREG(mode) or stat.S_ISLNK(mode))
        if not fits:
            what = "a folder" if want_folder else "a regular file"
            found = "a file" if stat.S_ISREG(mode) else _kind(mode)
            raise ConfigError(f"{option}: {name} is {found}, where this command writes {what}; remove it or "
                              f"pass another {option}", file=str(path), key=option)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def publish(folder: Path, files: tuple[str, ...], write: Callable[[Path], object],
            folders: tuple[str, ...] = (), option: str = "--out") -> None:
    """Write a set of outputs that are read together (a report as json, md, txt, html) so that
    `folder` never holds a mix of two runs: `write(staging)` writes them into a fresh folder beside
    them; the earlier run's outputs are removed first, and the new ones are renamed in only once all
    were written. A storage failure (full disk, quota) is an EnvironmentProblem (exit 3) that leaves
    none of the outputs behind, rather than a complete-looking stale one."""
    folder = Path(folder)
    refuse_special_outputs(folder, files, folders, option)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name in (*files, *folders):
            _remove(folder / name)
        staging = Path(tempfile.mkdtemp(dir=folder, prefix=".staging."))
    except OSError as exc:
        raise EnvironmentProblem(f"cannot write into {folder}: {exc.strerror or exc}") from None
    try:
        write(staging)
        for name in (*files, *folders):
            if (staging / name).exists():
                os.replace(staging / name, folder / name)
    except OSError as exc:
        if not storage_failure(exc):
            raise
        where = Path(exc.filename).name if exc.filename else "a report file"
        raise EnvironmentProblem(f"cannot write {where} into {folder}: {exc.strerror or exc}; no report of this "
                                 "run is left there (and none of an earlier one): no verdict") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def unique_keys(pairs: list, duplicate) -> dict:
    """json.loads' object_pairs_hook that refuses a repeated key: JSON leaves it undefined (Python
    keeps the last, other readers the first). `duplicate(key)` makes the exception raised."""
    found: dict = {}
    for key, value in pairs:
        if key in found:
            raise duplicate(key)
        found[key] = value
    return found
