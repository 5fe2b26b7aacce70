"""mha-ci containers build|publish|tags [--all | --toolchain T ...] [--platform P ...]: the images
of containers/ (one per toolchain and platform of pipelines/toolchains.yaml that has a
Dockerfile), each named by its reference `<registry>/<toolchain>-<platform>:<content digest>`
(registry: $MHA_CI_REGISTRY, see mha_ci.containers.images).

  build    build images whose reference is not here (pulled instead if the registry has it)
  publish  push each image to the registry unless the registry already holds its reference
           (built first when missing); needs MHA_CI_REGISTRY
  tags     print each reference and whether it is here

Default selection: the CPU images (`make containers`); --platform cuda the sm90 images.
Exit 2 on a bad selection or registry, 3 when docker or the registry is unreachable or a
build fails.
"""
from __future__ import annotations

import argparse
import time

from mha_ci.containers.engine import connect, ensure_image, in_registry, push
from mha_ci.containers.images import LOCAL_REGISTRY, ImageSpec, discover, registry
from mha_ci.errors import ConfigError, ExitCode
from mha_ci.model.loader import load_pipeline


def register(sub) -> None:
    containers = sub.add_parser("containers", help="build, publish or name the toolchain images",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmds = containers.add_subparsers(dest="containers_command", required=True, parser_class=type(containers))
    for name, text in (("build", "build images whose reference is missing"),
                       ("publish", "push images the registry does not hold"),
                       ("tags", "print each image's reference and whether it exists")):
        p = cmds.add_parser(name, help=text)
        p.add_argument("--all", action="store_true",
                       help="every Dockerfile of every toolchain (default: the CPU images)")
        p.add_argument("--toolchain", action="append", help="e.g. triton-3.4 (repeatable)")
        p.add_argument("--platform", action="append", choices=["cpu", "rocm", "cuda"])
        if name == "build":
            p.add_argument("--force", action="store_true", help="rebuild even if the image exists")
        p.set_defaults(handler=handle)


def selected(args) -> list[ImageSpec]:
    specs = discover(load_pipeline(args.root).toolchains.values())
    platforms = args.platform or ([] if args.all or args.toolchain else ["cpu"])
    if args.toolchain:
        specs = [s for s in specs if s.toolchain in args.toolchain]
    if platforms:
        specs = [s for s in specs if s.platform in platforms]
    return specs


def handle(args) -> int:
    specs = selected(args)
    if not specs:
        raise ConfigError("no Dockerfile matches the selection")
    if args.containers_command == "publish" and registry() == LOCAL_REGISTRY:
        raise ConfigError("publish needs MHA_CI_REGISTRY (e.g. ghcr.io/owner/repo)")
    if args.containers_command == "tags":
        for spec in specs:   # computed without docker: what the plan job computes
            print(spec.reference())
        return ExitCode.OK

    client = connect()
    for spec in specs:
        t0 = time.monotonic()
        reference = spec.reference()
        if args.containers_command == "publish" and in_registry(client, reference):
            print(f"{reference}\talready in the registry", flush=True)
            continue
        built = ensure_image(client, spec, force=getattr(args, "force", False))
        what = "built" if built.built else ("pulled" if built.pulled else "up to date")
        if args.containers_command == "publish":
            push(client, reference)
            what += ", pushed"
        print(f"{built.tag}\t{what}\t{time.monotonic() - t0:.1f} s\t{built.id}", flush=True)
    return ExitCode.OK
