"""`python -m mha_ci.containers build|publish|tags [--all | --toolchain T ...] [--platform P ...]`:
the images of containers/ (one per toolchain and platform of pipelines/toolchains.yaml that has a
Dockerfile), each named by its reference `<registry>/<toolchain>-<platform>:<content digest>`
(registry: $MHA_CI_REGISTRY, see mha_ci.containers.images).

  build    build images whose reference is not here (pulled instead if the registry has it)
  publish  push each image to the registry unless the registry already holds its reference
           (built first when missing); needs MHA_CI_REGISTRY
  tags     print each reference and whether it is here

Default selection: the CPU images (`make containers`); --platform cuda the sm90 images.
Exit 2 on a bad selection or registry, 3 when docker or the registry is unreachable or a
build fails."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mha_ci.containers.images import LOCAL_REGISTRY, discover, registry
from mha_ci.errors import ConfigError, MhaCiError


def _selected(args) -> list:
    from mha_ci.model.loader import load_pipeline

    specs = discover(load_pipeline(args.root).toolchains.values())
    if not args.all and not args.toolchain:
        args.platform = args.platform or ["cpu"]
    if args.toolchain:
        specs = [s for s in specs if s.toolchain in args.toolchain]
    if args.platform:
        specs = [s for s in specs if s.platform in args.platform]
    return specs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mha_ci.containers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=Path.cwd(), help="checkout root (default: .)")
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("build", "build images whose reference is missing"),
                       ("publish", "push images the registry does not hold"),
                       ("tags", "print each image's reference and whether it exists")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--all", action="store_true",
                       help="every Dockerfile of every toolchain (default: the CPU images)")
        s.add_argument("--toolchain", action="append", help="e.g. triton-3.4 (repeatable)")
        s.add_argument("--platform", action="append", choices=["cpu", "rocm", "cuda"])
        if name == "build":
            s.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    args = p.parse_args(argv)

    from mha_ci.containers.engine import connect, ensure_image, in_registry, push
    try:
        specs = _selected(args)
        if not specs:
            print("no Dockerfile matches the selection", file=sys.stderr)
            return 2
        if args.command == "publish" and registry() == LOCAL_REGISTRY:
            raise ConfigError("publish needs MHA_CI_REGISTRY (e.g. ghcr.io/owner/repo)")
        if args.command == "tags":
            for spec in specs:   # computed without docker: what the plan job computes
                print(spec.reference())
            return 0
        client = connect()
        for spec in specs:
            t0 = time.monotonic()
            reference = spec.reference()
            if args.command == "publish" and in_registry(client, reference):
                print(f"{reference}\talready in the registry", flush=True)
                continue
            built = ensure_image(client, spec, force=getattr(args, "force", False))
            what = "built" if built.built else ("pulled" if built.pulled else "up to date")
            if args.command == "publish":
                push(client, reference)
                what += ", pushed"
            print(f"{built.tag}\t{what}\t{time.monotonic() - t0:.1f} s\t{built.id}", flush=True)
    except MhaCiError as e:
        print(f"error: {e}", file=sys.stderr)
        return int(e.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
