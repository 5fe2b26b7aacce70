"""On-disk cache of compile results, so a warm `verify` compiles nothing.

Key = sha256 over everything a code object can depend on, in the brief's terms:
the kernel package's source files (every .py under it, path-relative), the variant's bucket
section of the arch's config JSON (in the payload; the rest of the file reaches a compile only
through the identity: a guard's num_stages, say), the variant (function, signature, constexprs, argument attributes, num_warps, num_stages,
target), and the toolchain (lock-file hash plus the Triton version actually imported, so the
`host` toolchain, which has no lock, is keyed by what is installed). A comment-only edit of a
kernel file therefore misses the cache and recompiles (and yields the same checksum: line info
is off); an edit elsewhere in the checkout (tests, runner) does not touch the key.
The key names no path of the checkout, so clones sharing the machine's cache (mha_ci.cache) hit
each other's entries. Entries are small JSON files written atomically (a temporary file in the
entry's folder renamed into place), so runs sharing the folder, at once or from several clones,
read either no entry or a whole one, never half of one; two runs compiling the same variant at
once both rename a whole entry of the same content, so entries need no lock of their own (one
would only save the second compile). A corrupt entry is treated as a miss. A hit moves the
entry's mtime (its last use); a run holds the folder's IN_USE lock shared while it reads and
writes entries, and `mha-ci cache prune` removes entries only with that lock held exclusively.

Nothing vouches for an entry: the folder may be restored from another run's upload or shared,
so whoever writes it can write any sha256 under any key. The payload (mha_ci.payloads.checksums)
compiles some hits again and compares: every hit that claims a stored record's code object for
changed inputs, every hit of an `--only` run, and a random share of the rest.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

CACHE_FORMAT = 1
IN_USE = ".in-use.lock"      # in each toolchain's folder: shared by runs, exclusive for prune


def tree_digest(package_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(package_dir).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        digest.update(str(path.relative_to(package_dir)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if Path(path).is_file() else "missing"


def cache_key(*, sources: str, config: str, identity: dict, toolchain: dict) -> str:
    blob = json.dumps({"format": CACHE_FORMAT, "sources": sources, "config": config, "variant": identity,
                       "toolchain": toolchain}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class CompileCache:
    def __init__(self, folder: Path | None) -> None:
        self.folder = Path(folder) if folder else None
        self.hits = self.misses = 0

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        """Hold the folder (shared with other runs) while inside, so prune leaves it alone, and
        mark it used now. A cache that cannot be written is used without the lock: prune cannot
        write it either."""
        if self.folder is None:
            yield
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle = open(self.folder / IN_USE, "a")
        except OSError:
            yield
            return
        with handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            _touch(Path(handle.name))
            yield

    def _path(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        if self.folder is None:
            self.misses += 1
            return None
        path = self._path(key)
        try:
            entry = json.loads(path.read_text())
            if isinstance(entry, dict) and entry.get("error") is None and entry.get("sha256"):
                self.hits += 1
                _touch(path)
                return entry
        except (OSError, ValueError):
            pass
        self.misses += 1
        return None

    def evict(self, key: str) -> None:
        """Drop an entry a fresh compile contradicted."""
        if self.folder is None:
            return
        try:
            self._path(key).unlink()
        except OSError:
            pass       # gone already, or a read-only cache: the entry is not used again in this run

    def put(self, key: str, entry: dict) -> None:
        if self.folder is None or entry.get("error") or not entry.get("sha256"):
            return     # failures and refusals are never cached: a fixed environment or limit must retry them
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
            with os.fdopen(fd, "w") as handle:
                json.dump(entry, handle, sort_keys=True)
            os.replace(tmp, path)
        except OSError:
            pass       # a read-only cache only costs time


def _touch(path: Path) -> None:
    """Mark `path` used now (its mtime: what prune reads, whatever the mount's atime policy)."""
    try:
        os.utime(path)
    except OSError:
        pass       # a read-only cache: prune cannot remove from it either
