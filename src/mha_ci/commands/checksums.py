"""mha-ci checksums compute | verify | update: code objects of every kernel variant.

    mha-ci checksums compute [--toolchain T] [--arch A] [--executor E] [--out D]
    mha-ci checksums verify  [...]   exit 1 on any added / removed / changed variant, compile
                                      error, nondeterministic compile, compile cache entry that
                                      a fresh compile contradicts, code object above its
                                      arch's limits (archs.yaml) or spill above its record
    mha-ci checksums update  [...]   rewrite perf_baselines/code_objects/<toolchain>.json
                                      (refused when a code object is above its arch's limits)

compute exits 1 on a compile error, a nondeterministic compile or a code object above its
arch's limits (shared memory / LDS per block, registers per thread: pipelines/archs.yaml); a
variant above the shared memory limit is refused before code generation (no ptxas run).
Every action exits 2, before compiling, on a stored file that cannot be read as
mha-ci.codeobj/1 (naming it), and on an --only that matches no variant (naming the closest keys).

--toolchain and --arch repeat (or take comma lists); default every toolchain of
pipelines/toolchains.yaml and every arch with a compile_target. `--toolchain host` records what
the interpreter running the payload has installed (use with `--executor host`, e.g. on the
H200, whose image has Triton 3.6). Files: <out>/code_objects/<toolchain>.json (fresh records),
<toolchain>.verify.txt / .verify.json (the comparison).

The compile cache is checked, not trusted (mha_ci.payloads.checksums): hits that claim a stored
code object for changed inputs are compiled again, with --only every hit is, else a random
share (--recheck) of them; the determinism sample is drawn at random too. The seed of both
draws is in the output (--seed repeats them).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mha_ci.checksums import verify as checksums_job
from mha_ci.commands.options import EXECUTORS
from mha_ci.errors import ConfigError, ExitCode
from mha_ci.executors import make_executor
from mha_ci.model.loader import load_pipeline
from mha_ci.model.types import Toolchain
from mha_ci.model.yaml_source import closest

ACTIONS = ("compute", "verify", "update")
HOST = "host"


def register(sub) -> None:
    p = sub.add_parser("checksums", help="compile every kernel variant ahead of time and check its code object",
                       description=__doc__.split("\n\n", 1)[0])
    p.add_argument("action", choices=ACTIONS,
                   help="compute: compile and record; verify: against perf_baselines/code_objects/; "
                        "update: rewrite those records")
    p.add_argument("--toolchain", action="append", default=None, help="toolchain name, or 'host' (repeatable)")
    p.add_argument("--arch", action="append", default=None, help="arch with a compile target (repeatable)")
    p.add_argument("--executor", choices=EXECUTORS, default=None,
                   help="where the compile runs (default: venv; host for --toolchain host)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: <root>/out)")
    p.add_argument("--jobs", type=int, default=None, help="compile processes (default: all cores)")
    p.add_argument("--only", default=None, help="only variants whose key contains this (development aid; "
                                                 "verify then compares only those)")
    p.add_argument("--no-cache", action="store_true", help="compile everything (no on-disk compile cache)")
    p.add_argument("--recheck", type=_share, default=None, metavar="SHARE",
                   help="share of the compile cache's hits compiled again and compared with their entries "
                        "(default 0.05, with --only 1; hits claiming a stored code object for changed inputs "
                        "always are)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the determinism sample and recheck draws (default: drawn, shown in the output)")
    p.add_argument("--platform", choices=("cpu", "cuda"), default="cpu",
                   help="toolchain environment that compiles (default cpu; cuda: the sm90 jobs' "
                        "image or venv, to compare its code objects with the cpu one's)")
    p.set_defaults(handler=handle)


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share between 0 and 1")
    return value


def _split(values: list[str] | None) -> list[str]:
    return [v.strip() for value in (values or []) for v in value.split(",") if v.strip()]


def host_toolchain(root: Path) -> Toolchain:
    return Toolchain(name=HOST, role="whatever the host has installed", lock=Path(root) / "no-lock",
                     container_dir=Path(root), pins={})


def resolve(pipeline, args) -> tuple[list[Toolchain], list]:
    names = _split(args.toolchain) or list(pipeline.toolchains)
    toolchains = []
    for name in names:
        if name == HOST:
            toolchains.append(host_toolchain(args.root))
        elif name in pipeline.toolchains:
            toolchains.append(pipeline.toolchains[name])
        else:
            raise ConfigError(f"unknown toolchain '{name}' (known: {', '.join([*pipeline.toolchains, HOST])})",
                              key="--toolchain", suggestion=closest(name, [*pipeline.toolchains, HOST]))
    compilable = {n: a for n, a in pipeline.archs.items() if a.compile_target is not None}
    arch_names = _split(args.arch) or list(compilable)
    archs = []
    for name in arch_names:
        if name not in compilable:
            raise ConfigError(f"arch '{name}' has no compile target (archs with one: {', '.join(compilable)})",
                              key="--arch", suggestion=closest(name, list(compilable)))
        archs.append(compilable[name])
    return toolchains, archs


def handle(args) -> int:
    pipeline = load_pipeline(args.root)
    toolchains, archs = resolve(pipeline, args)
    out_dir = (args.out if args.out is not None else args.root / "out").resolve()
    for toolchain in toolchains:        # every stored file before the first compile of any toolchain
        checksums_job.check_stored(args.root, toolchain.name)
    worst = ExitCode.OK
    for toolchain in toolchains:
        executor_name = args.executor or (HOST if toolchain.name == HOST else "venv")
        executor = make_executor(executor_name, args.root)
        # Compiling ahead of time needs no GPU: run where the CPU jobs run (the docker executor
        # then takes the CPU image, not the ROCm one of the first GPU arch).
        cpu_arch = next((a for a in pipeline.archs.values() if a.device == "none"), None)
        computed = checksums_job.compute(args.root, toolchain, archs, executor, out_dir, jobs=args.jobs,
                                         only=args.only, use_cache=not args.no_cache, job_arch=cpu_arch,
                                         platform=args.platform if toolchain.name != HOST else "cpu",
                                         recheck=args.recheck, seed=args.seed)
        stats = computed.codeobjs.stats or {}
        print(f"mha-ci: {toolchain.name}: {len(computed.codeobjs.records)} code objects -> {computed.path} "
              f"({stats.get('total_s', '?')} s; {stats.get('cached', '?')} cached, {stats.get('compiled', '?')} compiled)")
        verdict = checksums_job.judge(args.root, computed, archs, args.only)
        if args.action == "update":
            path, differences = checksums_job.update(args.root, computed, archs, args.only)
            changed = [d for d in differences if d.status != "note"]
            print(f"mha-ci: {toolchain.name}: wrote {path} ({len(changed)} variants differ from the previous file)")
            for d in changed:
                print(f"  {d.status:<8} {d.describe()}")
            continue
        checksums_job.write_verdict(out_dir, verdict)
        if args.action == "verify":
            print(verdict.table, end="")
            if verdict.failed:
                worst = max(worst, ExitCode.GATE_FAILED)
        else:   # compute: the records are the product; a compile error, nondeterminism or a
            # code object that cannot launch on its arch still fails
            if verdict.compile_errors or verdict.nondeterministic or verdict.cache_mismatches or verdict.over_limits:
                print(verdict.table, end="", file=sys.stderr)
                worst = max(worst, ExitCode.GATE_FAILED)
    return int(worst)
