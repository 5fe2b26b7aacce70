"""`python -m mha_ci.containers build [--all | --toolchain T ...] [--platform P ...] [--force]`
and `python -m mha_ci.containers tags`: the images of containers/, built when their content
changed (the `make containers` target). Exit 3 when docker is unreachable or a build fails."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mha_ci.containers.images import discover
from mha_ci.errors import MhaCiError


def _selected(args) -> list:
    specs = discover(args.root / "containers")
    if not args.all and not args.toolchain:
        args.platform = args.platform or ["cpu"]
    if args.toolchain:
        specs = [s for s in specs if s.toolchain in args.toolchain]
    if args.platform:
        specs = [s for s in specs if s.platform in args.platform]
    return specs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mha_ci.containers", description=__doc__)
    p.add_argument("--root", type=Path, default=Path.cwd(), help="checkout root (default: .)")
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("build", "build images whose tag is missing"),
                       ("tags", "print each image's tag and whether it exists")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--all", action="store_true",
                       help="every Dockerfile of every toolchain (default: the CPU images)")
        s.add_argument("--toolchain", action="append", help="e.g. triton-3.4 (repeatable)")
        s.add_argument("--platform", action="append", choices=["cpu", "rocm", "cuda"])
        if name == "build":
            s.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    args = p.parse_args(argv)

    from mha_ci.containers.engine import connect, ensure_image, expected_tag
    try:
        specs = _selected(args)
        if not specs:
            print("no Dockerfile matches the selection", file=sys.stderr)
            return 2
        client = connect()
        for spec in specs:
            if args.command == "tags":
                try:
                    tag = expected_tag(client, spec)
                except MhaCiError as e:   # a missing base does not hide the other images
                    print(f"{spec.repository}\tunknown: {e}")
                    continue
                exists = bool(client.images.list(name=tag))
                print(f"{tag}\t{'present' if exists else 'missing'}")
                continue
            t0 = time.monotonic()
            built = ensure_image(client, spec, force=args.force)
            what = "built" if built.built else "up to date"
            print(f"{built.tag}\t{what}\t{time.monotonic() - t0:.1f} s\t{built.id}", flush=True)
    except MhaCiError as e:
        print(f"error: {e}", file=sys.stderr)
        return int(e.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
