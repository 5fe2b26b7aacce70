"""On-disk cache of compile results, so a warm `verify` compiles nothing.

Key = sha256 over everything a code object can depend on, in the brief's terms:
the source files of the variant's kernel module and of every module of the kernel package it
imports, transitively (module_sources_digest: a change to backward.py misses only the variants
whose kernels live in or import it; a change to common.py, which both passes import, misses
all), the variant's bucket
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

import ast
import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mha_ci.files import tree_digest

CACHE_FORMAT = 1
IN_USE = ".in-use.lock"      # in each toolchain's folder: shared by runs, exclusive for prune


def module_sources_digest(package_dir: Path, module: str) -> str:
    """sha256 of `module`'s file (a dotted name inside the package at `package_dir`) and of every
    module of that package it imports, transitively, read from the import statements. A jit
    function's code can depend only on its module's globals and the jit functions and constants
    it reaches through them, which those imports bring in. The package's __init__ files are
    left out: they import the host API, not what a kernel reads. A module that cannot be found or
    parsed gives the whole tree's digest, so the key stays conservative."""
    package_dir = Path(package_dir)
    root = package_dir.name
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(package_dir, root, name)
        if path is None:
            return tree_digest(package_dir)
        seen[name] = path
        try:
            tree = ast.parse(path.read_text(), filename=str(path))
        except (OSError, SyntaxError, ValueError):
            return tree_digest(package_dir)
        todo += _package_imports(tree, name, path.name == "__init__.py", root, package_dir)
    digest = hashlib.sha256()
    for name in sorted(seen):
        digest.update(name.encode() + b"\0" + seen[name].read_bytes() + b"\0")
    return digest.hexdigest()


def _module_file(package_dir: Path, root: str, name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] != root:
        return None
    base = package_dir.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_imports(tree: ast.AST, name: str, is_package: bool, root: str, package_dir: Path) -> list[str]:
    """The modules of the package that `name`'s import statements name (`from .x import y` may
    name a module y of package x, or a name defined in x: both are tried)."""
    here = name.split(".") if is_package else name.split(".")[:-1]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == root]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = here[:len(here) - (node.level - 1)] if node.level > 1 else here
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            elif node.module and node.module.split(".")[0] == root:
                base = node.module
            else:
                continue
            if base != root:     # the package's own __init__: the host API (docstring above)
                found.append(base)
            found += [f"{base}.{a.name}" for a in node.names
                      if _module_file(package_dir, root, f"{base}.{a.name}") is not None]
    return [m for m in found if m != root]


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
