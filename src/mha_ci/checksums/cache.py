"""On-disk cache of compile results, so a warm `verify` compiles nothing.

Key = sha256 over everything a code object can depend on, in the brief's terms:
the kernel package's source files (every .py under it, path-relative), the arch's config JSON,
the variant (function, signature, constexprs, argument attributes, num_warps, num_stages,
target), and the toolchain (lock-file hash plus the Triton version actually imported, so the
`host` toolchain, which has no lock, is keyed by what is installed). A comment-only edit of a
kernel file therefore misses the cache and recompiles (and yields the same checksum: line info
is off); an edit elsewhere in the checkout (tests, runner) does not touch the key.
Entries are small JSON files written atomically (a temporary file renamed into place), so runs
sharing the folder, at once or from several clones, read either an old entry or a whole new one,
and need no lock; a corrupt entry is treated as a miss.

Nothing vouches for an entry: the folder may be restored from another run's upload or shared,
so whoever writes it can write any sha256 under any key. The payload (mha_ci.payloads.checksums)
compiles some hits again and compares: every hit that claims a stored record's code object for
changed inputs, every hit of an `--only` run, and a random share of the rest.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

CACHE_FORMAT = 1


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

    def _path(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        if self.folder is None:
            self.misses += 1
            return None
        try:
            entry = json.loads(self._path(key).read_text())
            if entry.get("error") is None and entry.get("sha256"):
                self.hits += 1
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
