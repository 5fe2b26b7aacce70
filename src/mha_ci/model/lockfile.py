"""Exact pins read from a toolchain lock file (containers/<toolchain>/requirements.lock).

Standard library only, so a payload inside a toolchain environment (which has no pydantic or
yaml) can read the same pins the orchestrating side validated.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

# `name==version \` opens each requirement; the `--hash=...` continuation lines follow it.
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-fA-F]{64})\b")


def normalise(name: str) -> str:
    """PEP 503 name normalisation, so `Typing_Extensions` and `typing-extensions` are one pin."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_sha256(path: Path) -> str:
    """The lock file's identity: names a toolchain environment (venvs/<toolchain>-<sha256[:12]>)
    and goes into every code-object record's toolchain ("lock_sha256")."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_pins(path: Path) -> dict[str, str]:
    """Normalised package name -> exact version, in file order; raises ValueError on a line that
    is neither a pin, a hash continuation, an option nor a comment (a loose `torch>=2` would make
    the toolchain unreproducible)."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = _PIN.match(line)
        if not match:
            raise ValueError(f"{path}:{number}: not an exact pin (name==version): {raw.strip()}")
        name = normalise(match.group(1))
        if name in pins:
            raise ValueError(f"{path}:{number}: '{name}' is pinned twice")
        pins[name] = match.group(2)
    return pins


def read_hashes(path: Path) -> dict[str, frozenset[str]]:
    """Normalised package name -> the sha256 (lower-case hex) of every file the lock allows for
    it (a pin may list one wheel per Python version). These pins, in the checkout, are what a
    toolchain environment in the cache is checked against (mha_ci.executors.wheel_manifest)."""
    hashes: dict[str, set[str]] = {}
    current: str | None = None
    for raw in Path(path).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        match = _PIN.match(line)
        if match:
            current = normalise(match.group(1))
            hashes.setdefault(current, set())
        if current is not None:
            hashes[current].update(h.lower() for h in _HASH.findall(line))
        if not line.endswith("\\"):
            current = None
    return {name: frozenset(found) for name, found in hashes.items()}
