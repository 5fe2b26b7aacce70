"""What a toolchain environment must hold, derived from the wheels its lock pins, and the check
of an environment's site-packages against it.

Why not the environment's own RECORD files: the venv cache can be written by others (a CI cache
restored from another run's upload, a cache shared between clones), and a RECORD there says
whatever its writer wanted. What the cache cannot forge is the lock file in the checkout: its
`--hash=sha256:` pins name exact wheels, and a wheel whose sha256 matches its pin carries its
own RECORD, the sha256 of every file it installs. Those hashes are the manifest.

The check walks site-packages and fails on the first of: a file the manifest lists that is
missing or differs; a file no pinned wheel installs (a `.pth` file or `sitecustomize.py` runs at
interpreter start, an extension module beside a package's source is imported instead of it);
a symlink (no wheel holds one; it would let content from outside in); a folder no wheel makes.
The metadata pip writes itself into a dist-info (INSTALLER, REQUESTED, RECORD, direct_url.json)
may be there with any content: no import executes it. `__pycache__` folders are not looked into:
payloads run with PYTHONPYCACHEPREFIX outside the cache (executors/venv.py), so Python never
reads the bytecode there.

Hashing is the slow part (the triton-3.8 CPU environment holds 1.7 GB in site-packages), so a
walk also yields a stat fingerprint (path, device, inode, size, mtime, ctime of every file): a
content change or a replaced file moves the ctime or the inode, and neither can be set back by
whoever writes the files, so an unchanged fingerprint (kept outside the cache) lets a later run
skip the hashing.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import stat
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from mha_ci.model.lockfile import normalise

MANIFEST_FORMAT = 1
# Written by pip into each dist-info it installs; none of them is ever executed.
PIP_METADATA = ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json")
CHUNK = 1 << 20
HASH_THREADS = 4        # hashlib releases the GIL on large buffers: threads use every core


class ManifestError(ValueError):
    """The wheels at hand do not make a manifest for the lock (wrong hash, not a wheel, ...)."""


@dataclass
class Manifest:
    """site-packages-relative POSIX path -> sha256 (hex) of the file; None: any content (pip's metadata)."""

    files: dict[str, str | None]
    wheels: dict[str, str] = field(default_factory=dict)     # package -> sha256 of its wheel

    def folders(self) -> set[str]:
        """Every folder a file of the manifest lies in, at any depth."""
        out: set[str] = set()
        for path in self.files:
            while "/" in path:
                path = path.rsplit("/", 1)[0]
                if path in out:
                    break
                out.add(path)
        return out

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_text().encode()).hexdigest()

    def to_text(self) -> str:
        return json.dumps({"format": MANIFEST_FORMAT, "wheels": self.wheels, "files": self.files},
                          sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_text(cls, text: str) -> "Manifest":
        data = json.loads(text)
        if data.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"manifest format {data.get('format')!r}")
        return cls(dict(data["files"]), dict(data["wheels"]))


def file_sha256(path: Path | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _record_hex(value: str) -> str | None:
    """RECORD's `sha256=<urlsafe base64, unpadded>` as hex; None for another or no algorithm."""
    algorithm, _, encoded = value.partition("=")
    if algorithm != "sha256" or not encoded:
        return None
    return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).hex()


def _installed_path(member: str, site_rel: str) -> str | None:
    """Where pip puts a wheel member, relative to site-packages; None outside it (scripts go to
    bin/, headers to include/: nothing imports them)."""
    parts = PurePosixPath(member).parts
    if parts and parts[0].endswith(".data") and len(parts) > 2:
        scheme, rest = parts[1], PurePosixPath(*parts[2:])
        if scheme in ("purelib", "platlib"):
            return str(rest)
        if scheme == "data" and rest.is_relative_to(site_rel):
            return str(rest.relative_to(site_rel))
        return None
    return member


def derive(wheels: list[Path], hashes: dict[str, frozenset[str]], site_rel: str) -> Manifest:
    """The manifest of exactly the lock's wheels. `hashes`: the lock's pins (lockfile.read_hashes);
    `site_rel`: site-packages relative to the environment (lib/python3.11/site-packages)."""
    files: dict[str, str | None] = {}
    found: dict[str, str] = {}
    for wheel in wheels:
        if not wheel.name.endswith(".whl"):
            raise ManifestError(f"{wheel.name} is not a wheel: the files a source distribution installs "
                                "cannot be checked against the lock's hashes")
        name = normalise(wheel.name.split("-", 1)[0])
        sha = file_sha256(wheel)
        if name not in hashes:
            raise ManifestError(f"{wheel.name}: {name} is not pinned in the lock")
        if sha not in hashes[name]:
            raise ManifestError(f"{wheel.name} has sha256 {sha}; the lock pins {name} to "
                                f"{', '.join(sorted(hashes[name]))}")
        if name in found:
            raise ManifestError(f"two wheels of {name}")
        found[name] = sha
        files.update(_wheel_files(wheel, site_rel))
    missing = sorted(set(hashes) - set(found))
    if missing:
        raise ManifestError(f"no wheel for {', '.join(missing)}")
    return Manifest(files, found)


def _wheel_files(wheel: Path, site_rel: str) -> dict[str, str | None]:
    """The wheel's members with their sha256 from its RECORD; a member RECORD does not hash is
    hashed here (the wheel's own bytes are pinned, so either way the hash is the lock's)."""
    out: dict[str, str | None] = {}
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if not m.endswith("/")]
        records = [m for m in members if m.count("/") == 1 and m.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise ManifestError(f"{wheel.name}: {len(records)} dist-info RECORD files, expected one")
        dist_info = records[0].split("/", 1)[0]
        recorded: dict[str, str | None] = {}
        for row in csv.reader(io.StringIO(archive.read(records[0]).decode("utf-8"))):
            if row:
                recorded[row[0]] = _record_hex(row[1]) if len(row) > 1 else None
        for member in members:
            path = _installed_path(member, site_rel)
            if path is None or "__pycache__" in PurePosixPath(path).parts:
                continue        # bytecode some wheels ship (numpy): never read, as the check's own walk skips it
            if member.startswith(f"{dist_info}/") and member.split("/", 1)[1] in PIP_METADATA:
                out[path] = None
                continue
            expected = recorded.get(member)
            if expected is None:
                expected = hashlib.sha256(archive.read(member)).hexdigest()
            out[path] = expected
    for name in PIP_METADATA:
        out.setdefault(f"{dist_info}/{name}", None)
    return out


@dataclass
class Walk:
    """What one pass over site-packages found: regular files (path -> stat), folders, and the
    entries that may not be there at all (symlinks, devices, FIFOs)."""

    files: dict[str, os.stat_result]
    folders: set[str]
    forbidden: list[str]

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for path in sorted(self.files):
            st = self.files[path]
            digest.update(f"{path}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n"
                          .encode("utf-8", "surrogateescape"))
        return digest.hexdigest()


def walk(site: Path) -> Walk:
    files: dict[str, os.stat_result] = {}
    folders: set[str] = set()
    forbidden: list[str] = []
    todo = [""]
    while todo:
        relative = todo.pop()
        with os.scandir(site / relative if relative else site) as entries:
            for entry in entries:
                path = f"{relative}/{entry.name}" if relative else entry.name
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    if entry.name != "__pycache__":
                        folders.add(path)
                        todo.append(path)
                elif stat.S_ISREG(st.st_mode):
                    files[path] = st
                else:
                    forbidden.append(path)
    return Walk(files, folders, forbidden)


def layout_problem(found: Walk, manifest: Manifest) -> str | None:
    """A symlink or other non-file, a file or folder no pinned wheel installs, a file missing."""
    if found.forbidden:
        return f"{sorted(found.forbidden)[0]} is a symlink or special file, which no wheel installs"
    unexpected = sorted(set(found.files) - set(manifest.files))
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        return f"{unexpected[0]} is not installed by any wheel the lock pins{more}"
    extra = sorted(found.folders - manifest.folders())
    if extra:
        return f"folder {extra[0]} is not made by any wheel the lock pins"
    missing = sorted(p for p, sha in manifest.files.items() if sha is not None and p not in found.files)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return f"{missing[0]} is missing{more}"
    return None


def content_problem(site: Path, found: Walk, manifest: Manifest) -> str | None:
    """The first file (in path order) whose sha256 is not its wheel's. Reads every byte."""
    checked = sorted(p for p in found.files if manifest.files.get(p) is not None)
    with ThreadPoolExecutor(max_workers=min(HASH_THREADS, os.cpu_count() or 1)) as pool:
        hashes = pool.map(lambda p: file_sha256(site / p), checked, chunksize=32)
        for path, sha in zip(checked, hashes):
            if sha != manifest.files[path]:
                return f"{path} differs from the file its wheel installs (sha256 {sha[:12]}, wheel {str(manifest.files[path])[:12]})"
    return None
