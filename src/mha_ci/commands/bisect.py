"""mha-ci perf bisect: the first commit between --good and --bad that moved the shapes (mha_ci.bisect).

    mha-ci perf bisect --good REF --bad REF --arch A --toolchain T --shape GLOB [--shape GLOB ...]
                       [--pass fwd|bwd] --out DIR [--executor venv|docker|host] [--pins enforce|record]
                       [--cpu-only] [--jobs N]

Exit codes: 0 found (or, with --cpu-only, the builds listed); 1 no commit named (bad does not
regress against good on this machine, no code object of the shapes changed, or a step could not
be judged); 2 usage (a ref that names no commit, good not an ancestor of bad, no shape matched,
an --out holding a bisect with other arguments); 3 environment.
"""
from __future__ import annotations

from pathlib import Path

from mha_ci.bisect import code, gpu, session
from mha_ci.cache import cache_root
from mha_ci.commands.options import add_executor_option, add_pins_option, check_pins_option, check_target
from mha_ci.errors import ConfigError
from mha_ci.executors import make_executor
from mha_ci.model.loader import load_pipeline
from mha_ci.perf.request import perf_request, selected_workloads


def register(cmds) -> None:
    p = cmds.add_parser("bisect", help="the first commit between --good and --bad that moved the shapes "
                                       "(code objects on the CPU first, then a binary search on the GPU)")
    p.add_argument("--good", required=True, metavar="REF", help="a commit where the shapes were fine")
    p.add_argument("--bad", required=True, metavar="REF", help="a later commit (good is its ancestor) where they moved")
    p.add_argument("--arch", required=True, help="the arch the shapes are measured on (its GPU, for the GPU stage)")
    p.add_argument("--toolchain", required=True, help="the toolchain every commit is built and timed in")
    p.add_argument("--shape", action="append", required=True, metavar="GLOB",
                   help="workload shape keys to bisect, from the full set (repeatable; `mha-ci perf shapes` "
                        "lists them)")
    p.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), help="only this pass's shapes")
    p.add_argument("--out", type=Path, required=True,
                   help="folder for bisect.json (the resume state), report.{txt,md,json}, checkouts/, cpu/, gpu/")
    add_executor_option(p)
    p.add_argument("--cpu-only", action="store_true",
                   help="only the CPU stage: list the distinct builds and exit 0 (carry --out to the GPU host)")
    p.add_argument("--jobs", type=int, default=None, help="compile processes of the CPU stage (default: all CPUs)")
    add_pins_option(p)
    p.set_defaults(handler=cmd_bisect)


def cmd_bisect(args) -> int:
    check_pins_option(args)
    pipeline = load_pipeline(args.root)
    check_target(pipeline, args.arch, [args.toolchain])
    if pipeline.archs[args.arch].compile_target is None:
        raise ConfigError(f"arch '{args.arch}' has no compile target: its code objects cannot be compared",
                          key="--arch")
    if args.jobs is not None and args.jobs < 1:
        raise ConfigError("--jobs must be at least 1", key="--jobs")
    workloads = selected_workloads(pipeline, "full", args.shape)
    workloads = [w for w in workloads if args.pass_ in (None, w.shape.pass_)]
    if not workloads:
        raise ConfigError(f"no {args.pass_} shape matches {', '.join(args.shape)}", key="--pass")
    out = args.out.resolve()
    shapes = [w.shape for w in workloads]
    keys = tuple(w.key for w in workloads)

    def executor_for(checkout: Path):
        # One venv (or image) for every commit: the toolchain is the working tree's, only the kernel differs.
        return make_executor(args.executor, checkout, cache=cache_root(args.root), pin_mode=args.pins)

    # Every step measures the bisected shapes of the full set, without numerics (timing only).
    perf = perf_request(pipeline, arch=args.arch, toolchains=(args.toolchain,), subset="full", keys=keys,
                        numerics=False, out_dir=out, executor=None)
    request = session.Request(repo=args.root, good=args.good, bad=args.bad, arch=args.arch, toolchain=args.toolchain,
                              pass_=args.pass_, keys=keys, out=out, cpu_only=args.cpu_only)
    return session.run(
        request,
        code_objects=lambda: code.compiler(args.root, pipeline, args.arch, args.toolchain,
                                           code.compile_items(shapes, args.arch), executor_for, out, args.jobs),
        measurer=lambda good: gpu.measurer(perf, good, executor_for))
