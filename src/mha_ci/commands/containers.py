"""mha-ci containers build|publish|tags [--all | --toolchain T ...] [--platform P ...]: the images
of containers/ (one per toolchain and platform of pipelines/toolchains.yaml that has a
Dockerfile), each named by its reference `<registry>/<toolchain>-<platform>:<content digest>`
(registry: $MHA_CI_REGISTRY, see mha_ci.containers.images).

  build    build images whose reference is not here (pulled instead if the registry has it)
  publish  push each image to the registry unless the registry already holds its reference
           (built first when missing); needs MHA_CI_REGISTRY
  tags     print each reference and whether it is here

Default selection: the CPU images (`make containers`); --platform cuda the sm90 images.
build --jobs N builds up to N images at once (default 1): an image build is mostly one process
unpacking, copying and committing layers, so two CPU images built together take little more than
the longer one alone (`make containers` uses 2; docs/ci-timings.md). Each image has its own
context folder and build lock, so concurrent builds share nothing but the read-only base image.
Exit 2 on a bad selection or registry, 3 when docker or the registry is unreachable or a
build fails.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time

from mha_ci.containers.engine import connect, ensure_image, in_registry, push
from mha_ci.containers.images import LOCAL_REGISTRY, ImageSpec, discover, registry
from mha_ci.errors import ConfigError, ExitCode, MhaCiError
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
        p.add_argument("--platform", action="append", choices=["cpu", "rocm", "cuda"],
                       help="only the images of this platform (repeatable)")
        if name == "build":
            p.add_argument("--force", action="store_true", help="rebuild even if the image exists")
            p.add_argument("--jobs", type=_positive, default=1, metavar="N",
                           help="build up to N images at once (default 1); each log line then "
                                "names its image")
        p.set_defaults(handler=handle)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


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

    if args.containers_command == "build" and args.jobs > 1 and len(specs) > 1:
        return _build_concurrently(specs, args.jobs, force=args.force)
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


def _build_concurrently(specs: list[ImageSpec], jobs: int, *, force: bool) -> int:
    """`build` of several images, up to `jobs` at a time, each in its own thread with its own
    docker client. Every build runs to its end even when another fails (a docker build cannot
    be stopped half-way from here without leaving it to dockerd); then the first failure in
    selection order is raised (its exit code is the command's) and the others are printed.
    Threads are daemons: Ctrl-C or SIGTERM ends the command at once (dockerd drops a build
    whose client went away), as it does with one build."""
    connect()   # an unreachable daemon fails once, before any thread starts
    out_lock, slots = threading.Lock(), threading.BoundedSemaphore(jobs)
    errors: dict[int, BaseException] = {}

    def say(line: str, stream=sys.stdout) -> None:
        with out_lock:   # one write per line: lines of concurrent builds never mix
            stream.write(line + "\n")
            stream.flush()

    def one(index: int, spec: ImageSpec) -> None:
        def log(line: str) -> None:   # docker's own lines already start with [build <name>]
            say(line if line.startswith("[build ") else f"[{spec.name}] {line}")

        with slots:
            try:
                t0 = time.monotonic()
                built = ensure_image(connect(), spec, force=force, log=log)
                what = "built" if built.built else ("pulled" if built.pulled else "up to date")
                say(f"{built.tag}\t{what}\t{time.monotonic() - t0:.1f} s\t{built.id}")
            except BaseException as e:   # re-raised in the main thread, in selection order
                errors[index] = e

    threads = [threading.Thread(target=one, args=(i, spec), name=f"build {spec.name}", daemon=True)
               for i, spec in enumerate(specs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.5)   # a short join keeps Ctrl-C and SIGTERM answered at once
    if not errors:
        return ExitCode.OK
    first = min(errors)
    for index in sorted(errors)[1:]:
        e = errors[index]
        text = str(e) if isinstance(e, MhaCiError) else f"{type(e).__name__}: {e}"
        say(f"mha-ci: also failed: {specs[index].name}: {text}", sys.stderr)
    raise errors[first]
