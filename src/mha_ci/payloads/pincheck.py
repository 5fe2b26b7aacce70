"""Refuse to run in an environment whose packages are not the toolchain's pins.

The pins come from the toolchain's lock file (Toolchain.pins), handed over by the executor in
$MHA_CI_PINS (see mha_ci.payloads). Every pinned package is looked up through
importlib.metadata; a different or missing version ends the payload with exit 3, naming the
pin and what is installed. In "record" mode (the `host` toolchain, or `mha-ci run --executor
host --pins record` on a GPU host that cannot install the locks) nothing is refused: the versions
and every mismatch are recorded, and the result says it is unpinned. Torch-free on purpose: it must run before anything heavy is
imported, and in environments where torch itself is the wrong version.

Standalone: python -m mha_ci.payloads.pincheck [--toolchain NAME --pins JSON] [--record FILE]
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import re
import sys

from mha_ci.files import write_atomic
from mha_ci.payloads import EXIT_ENVIRONMENT, out_path

# Recorded even when not pinned, so results.json always says what the numbers came from.
ALWAYS_RECORDED = ("torch", "triton", "numpy", "pytest", "pytest-xdist")


class PinMismatch(Exception):
    pass


def normalise(name: str) -> str:
    """PEP 503 name normalisation: 'Typing_Extensions' and 'typing-extensions' are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def overlaid(name: str) -> list[tuple[str, str]]:
    """(version, folder) of the installs of `name` when two versions share one folder of the
    import path (one wheel unpacked over another), else []. Installs in different folders are
    not ambiguous: the import system and importlib.metadata both take the first on sys.path."""
    by_folder: dict[str, set[str]] = {}
    for dist in importlib.metadata.distributions(name=name):
        by_folder.setdefault(str(dist.locate_file("")), set()).add(dist.version)
    return [(version, folder) for folder, found in by_folder.items() if len(found) > 1 for version in sorted(found)]


def mismatches(toolchain: str, pins: dict[str, str]) -> list[str]:
    problems = []
    for name, pinned in sorted(pins.items()):
        found = installed_version(name)
        every = overlaid(name)
        if found is None:
            problems.append(f"toolchain {toolchain} pins {name}=={pinned} but the environment does not have {name}")
        elif every:
            # The metadata found first need not describe the module files Python imports.
            where = ", ".join(f"{version} in {path}" for version, path in every)
            problems.append(f"toolchain {toolchain} pins {name}=={pinned} but the environment has two versions of "
                            f"{name} unpacked into one folder ({where}); which one is imported cannot be told")
        elif found != pinned:
            problems.append(f"toolchain {toolchain} pins {name}=={pinned} but the environment has {name} {found}")
    return problems


def versions(pins: dict[str, str]) -> dict[str, str | None]:
    names = {normalise(n) for n in pins} | set(ALWAYS_RECORDED)
    recorded: dict[str, str | None] = {name: installed_version(name) for name in sorted(names)}
    recorded["python"] = platform.python_version()
    return recorded


def spec_from_environment() -> dict:
    raw = os.environ.get("MHA_CI_PINS")
    if raw is None:
        raise PinMismatch("MHA_CI_PINS is not set: payloads are started by an mha-ci executor, which passes the "
                          "toolchain's pins (run `mha-ci run`, or set MHA_CI_PINS as mha_ci.payloads describes)")
    try:
        spec = json.loads(raw)
        return {"toolchain": str(spec["toolchain"]), "mode": spec.get("mode", "enforce"),
                "pins": {normalise(k): str(v) for k, v in dict(spec["pins"]).items()}}
    except (ValueError, KeyError, TypeError) as exc:
        raise PinMismatch(f"MHA_CI_PINS is not valid ({exc!r}): {raw[:200]}") from None


def check(spec: dict) -> dict[str, str | None]:
    """The installed versions; raises PinMismatch (all mismatches in one message) when enforcing."""
    return report(spec)["versions"]


def report(spec: dict) -> dict:
    """What a result records about its environment: the installed versions, the pin mode, the
    mismatches (also in record mode) and `pins_checked`, true only when every pin matched."""
    if spec["mode"] not in ("enforce", "record"):
        raise PinMismatch(f"unknown pin mode {spec['mode']!r} (enforce | record)")
    problems = mismatches(spec["toolchain"], spec["pins"])
    if problems and spec["mode"] == "enforce":
        raise PinMismatch("\n".join(problems))
    return {"versions": versions(spec["pins"]), "pin_mode": spec["mode"], "pin_mismatches": problems,
            "pins_checked": not problems}


def enforce_report(collapse: bool = True) -> dict:
    """Called first by every payload: exits 3 on a mismatch when enforcing, with every mismatch
    (that list is the error). In record mode says once which pins the run does not hold: as one
    line with the count when `collapse` (the caller writes the list into its results, and every
    process of a run would print the same lines again), else in full. Returns `report()`."""
    try:
        found = report(spec_from_environment())
    except PinMismatch as exc:
        print(f"mha-ci pin check: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_ENVIRONMENT) from None
    if found["pin_mismatches"]:
        print(unpinned_notice(found["pin_mismatches"], collapse), file=sys.stderr, flush=True)
    return found


def unpinned_notice(problems: list[str], collapse: bool) -> str:
    head = "mha-ci pin check: UNPINNED run (pins recorded, not enforced)"
    if collapse:
        return (f"{head}: {len(problems)} pin mismatch{'es' if len(problems) != 1 else ''}; "
                f"the full list is pin_mismatches in this run's results")
    return f"{head}:\n  " + "\n  ".join(problems)


def enforce() -> dict[str, str | None]:
    """The installed versions, after enforce_report(). Its callers keep only the versions, so in
    record mode the mismatches are printed in full: the output is the only place they are."""
    return enforce_report(collapse=False)["versions"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_ci.payloads.pincheck")
    parser.add_argument("--toolchain", help="toolchain name (with --pins; default: from $MHA_CI_PINS)")
    parser.add_argument("--pins", help='JSON object {"name": "version"}')
    parser.add_argument("--mode", default="enforce", choices=("enforce", "record"))
    parser.add_argument("--record", help="write the installed versions as JSON to this file (relative to $MHA_CI_OUT)")
    args = parser.parse_args(argv)
    if args.pins is not None:
        os.environ["MHA_CI_PINS"] = json.dumps({"toolchain": args.toolchain or "unnamed", "mode": args.mode,
                                                "pins": json.loads(args.pins)})
    found = enforce()
    if args.record:
        path = out_path(args.record)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(found, indent=2, sort_keys=True) + "\n")
    print(json.dumps(found, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
