"""What the machine's cache (mha_ci.cache) holds, and trimming it: `mha-ci cache info/prune`.

An entry is what can go as a whole: a toolchain environment (venvs/<name>), an image build
context (contexts/<name>) or one compile result (checksums/<toolchain>/<xx>/<key>.json). Each
is covered by the lock its builders and users take: the environment's and the context's build
lock, the compile cache folder's IN_USE lock (mha_ci.checksums.cache). Prune removes an entry
only while holding that lock exclusively, taken without waiting: an entry a running build or
payload holds is kept and reported as in use. Lock files stay: one removed while another
process waits on it would let two builders in at once.

Last use: the lock file's mtime for an environment (moved at every payload run), the entry's
mtime for a compile result (moved at every hit), the newest file's mtime for a context.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mha_ci.checksums.cache import IN_USE

DAY_S = 86400


@dataclass(frozen=True)
class Entry:
    kind: str                 # "venv", "compile", "context"
    name: str                 # venvs/<name>, checksums/<toolchain>/<key>, contexts/<name>
    path: Path
    lock: Path                # taken exclusively to remove the entry
    size: int                 # bytes
    last_use: float           # seconds since the epoch


@dataclass
class Pruned:
    removed: list[Entry] = field(default_factory=list)
    in_use: list[Entry] = field(default_factory=list)
    failed: list[tuple[Entry, str]] = field(default_factory=list)


def entries(cache: Path) -> list[Entry]:
    """Every entry of `cache`, oldest last use first."""
    cache = Path(cache)
    found = [*_venvs(cache / "venvs"), *_compile_results(cache / "checksums"), *_contexts(cache / "contexts")]
    return sorted(found, key=lambda e: (e.last_use, e.name))


def _venvs(folder: Path) -> Iterator[Entry]:
    for path in _subfolders(folder):
        lock = folder / f".{path.name}.lock"
        yield Entry("venv", f"venvs/{path.name}", path, lock, _size(path), _mtime(lock, path))


def _compile_results(folder: Path) -> Iterator[Entry]:
    for toolchain in _subfolders(folder):
        for path in toolchain.glob("??/*.json"):
            yield Entry("compile", f"checksums/{toolchain.name}/{path.stem}", path, toolchain / IN_USE,
                        _size(path), _mtime(path))


def _contexts(folder: Path) -> Iterator[Entry]:
    for path in _subfolders(folder):
        newest = max((_mtime(p) for p in path.rglob("*")), default=_mtime(path))
        yield Entry("context", f"contexts/{path.name}", path, folder / f".{path.name}.lock", _size(path), newest)


def _subfolders(folder: Path) -> list[Path]:
    """Entry folders; names starting with a dot are a build's temporary folder or a lock."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))


def _size(path: Path) -> int:
    """Bytes of the files under `path`; links are counted as links, never followed."""
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_size if path.exists() or path.is_symlink() else 0
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass          # removed while we walk: not there any more
    return total


def _mtime(*candidates: Path) -> float:
    for path in candidates:
        try:
            return path.lstat().st_mtime
        except OSError:
            continue
    return 0.0


def chosen(found: list[Entry], *, older_than_days: float | None, max_bytes: int | None,
           now: float | None = None) -> list[Entry]:
    """What prune removes, oldest first: entries unused for more than `older_than_days`, then
    more of the oldest until the rest fit in `max_bytes`."""
    now = time.time() if now is None else now
    ordered = sorted(found, key=lambda e: (e.last_use, e.name))
    picked = [e for e in ordered if older_than_days is not None and now - e.last_use > older_than_days * DAY_S]
    if max_bytes is not None:
        left = sum(e.size for e in ordered) - sum(e.size for e in picked)
        for entry in ordered:
            if left <= max_bytes:
                break
            if entry not in picked:
                picked.append(entry)
                left -= entry.size
    return picked


def prune(cache: Path, picked: Iterable[Entry]) -> Pruned:
    """Remove `picked` from `cache`, each only with its lock held exclusively (taken without
    waiting: one held by a run is in use and stays). The locks are held until all are removed."""
    result = Pruned()
    held: dict[Path, IO[str] | None] = {}
    try:
        for entry in picked:
            if entry.lock not in held:
                held[entry.lock] = _try_lock(entry.lock)
            if held[entry.lock] is None:
                result.in_use.append(entry)
                continue
            try:
                _remove(entry)
                result.removed.append(entry)
            except OSError as exc:
                result.failed.append((entry, exc.strerror or str(exc)))
    finally:
        for handle in held.values():
            if handle is not None:
                handle.close()
    return result


def _try_lock(lock: Path) -> IO[str] | None:
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a")
    except OSError:
        return None           # cannot take it, so cannot tell that nobody holds it
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _remove(entry: Entry) -> None:
    if entry.kind == "compile":
        entry.path.unlink(missing_ok=True)
        return
    # Renamed out of the way first (a dot name: never listed as an entry, and the venv executor
    # removes such leftovers), so nobody finds half of it under its name.
    aside = Path(tempfile.mkdtemp(prefix=f".{entry.path.name}.building-pruned-", dir=entry.path.parent))
    os.rename(entry.path, aside / "entry")
    shutil.rmtree(aside)
    if entry.kind == "venv":
        (entry.path.parent / f"{entry.path.name}.install.log").unlink(missing_ok=True)
