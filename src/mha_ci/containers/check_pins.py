"""Build-end check inside an image: the installed versions equal the lock's pins, exactly.

Copied into the build context and run as the Dockerfile's last step, so an image whose
packages differ from the lock (a base image that brings its own Triton, a wheel that resolved
differently) fails to build instead of being tagged. Standard library only: it runs in the
image's Python before anything of mha_ci is there.

Usage: python check_pins.py LOCK [--only NAME ...]
"""
from __future__ import annotations

import re
import sys
from importlib import metadata

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)\s*(\\)?\s*$")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(lock_text: str) -> dict[str, str]:
    pins = {}
    for line in lock_text.splitlines():
        m = _PIN.match(line.strip())
        if m:
            pins[normalise(m.group(1))] = m.group(2)
    return pins


def mismatches(pins: dict[str, str], only: set[str] | None = None) -> list[str]:
    problems = []
    for name, wanted in sorted(pins.items()):
        if only and name not in only:
            continue
        try:
            got = metadata.version(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name}: pinned {wanted}, not installed")
            continue
        if got != wanted:
            problems.append(f"{name}: pinned {wanted}, installed {got}")
    return problems


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    lock, rest = argv[0], argv[1:]
    only = {normalise(n) for n in rest[1:]} if rest[:1] == ["--only"] else None
    with open(lock) as f:
        pins = read_pins(f.read())
    problems = mismatches(pins, only)
    for p in problems:
        print(f"pin mismatch: {p}", file=sys.stderr)
    checked = len(only) if only else len(pins)
    print(f"check_pins: {checked} pin(s) checked against {lock}, {len(problems)} mismatch(es)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
