"""mha-ci perf: workload shapes, measurements, the gate, calibration and baselines.

    mha-ci perf shapes    [--subset pr|full] [--shape GLOB ...] [--out DIR] [--format text|json]
    mha-ci perf measure   [--toolchain T] [--arch A] [--subset pr|full] [--executor E] [--out D]
                          [--kernel mha|sdpa] [--shape GLOB ...] [--repeat N] [--interleave T2 [--chunks N]]
                          [--against REF] [--no-numerics] [--accept-less-accurate GLOB ...]
    mha-ci perf compare   BASE CAND [--format text|md|json] [--out D] [--cross-toolchain]
                          [--accuracy FILE | --no-numerics]
                          [--accept-less-accurate GLOB ...]
    mha-ci perf calibrate A B [--planted P] [--format md|json] [--out D]
    mha-ci perf accuracy  MEASUREMENT.json [--check]
    mha-ci perf merge     CHUNK.json ... --out FILE
    mha-ci perf combine   RUN.json RUN.json ... --out FILE
    mha-ci perf refresh   [--arch A] [--toolchain T ...] [--executor E] [--out D] [--always]
                          [--measurement T=FILE ... [--checksums T=FILE ...] [--durations NAME=FILE ...]
                           [--date YYYY-MM-DD]]
    mha-ci perf history   --arch A --toolchain T [--shape GLOB ...] [--pass fwd|bwd] [--rev REF] --out D
    mha-ci perf bisect    --good REF --bad REF --arch A --toolchain T --shape GLOB ... --out D (commands/bisect.py)

Exit codes: compare/measure --interleave/--against 1 when the gate fails (a regression, a missing,
failed, NaN or non-positive measurement, two documents that must not be compared, or a shape whose
numerics are wrong, nondeterministic, less accurate and not accepted, or required and missing); calibrate 1 when the gate misses a bar of perf.yaml's `calibration`
(or the runs must not be compared); 2 bad files or options; 3 no device or a pin mismatch.
"""
from __future__ import annotations

from dataclasses import replace

import argparse
import datetime as dt
import json
import os
import sys
from collections import Counter
from pathlib import Path

from mha_ci.cache import cache_root
from mha_ci.git import commit_or_none
from mha_ci.commands.options import (add_executor_option, add_pins_option, check_pins_option, check_target,
                                     local_devices)
from mha_ci.errors import ConfigError, EnvironmentProblem, ExitCode
from mha_ci.executors import make_executor
from mha_ci.files import publish, refuse_special_outputs
from mha_ci.model.loader import load_pipeline
from mha_ci.baselines import accuracy_baseline
from mha_ci.perf import accuracy, calibrate, history_report, report
from mha_ci.perf.base_checkout import materialise, resolve, unchanged_host
from mha_ci.perf.combine import combine
from mha_ci.perf.compare import compare
from mha_ci.perf.config import against_policy, calibration_bars, gate_policy, method
from mha_ci.perf.document import SUBSETS, load_perf, merge_perf, write_json
from mha_ci.perf.history import history
from mha_ci.perf.measure import (measure_against, measure_interleaved, measure_lockstep, measure_repeated,
                                 write_input_files, write_inputs)
from mha_ci.perf.request import PerfRequest, perf_request, selected_workloads
from mha_ci.perf.workloads import shapes_document
from mha_ci.refresh.core import refresh
from mha_ci.refresh.measured_code import code_mismatch
from mha_ci.refresh.measurers import measured_here

# What perf.report and perf.history_report write: one report each, replaced as a whole.
COMPARE_FILES = ("compare.json", "compare.md", "compare.txt", "compare.png", "compare.html")
HISTORY_FILES = ("history.json", "history.md", "overview.png", "index.html")


def register(sub):
    """Add `perf` and its subcommands; returns its subcommand table (cli.py adds `perf bisect` there)."""
    perf = sub.add_parser("perf", help="perf workloads, measurement and gate",
                          description="Measure the workload shapes and gate them against stored baselines.")
    cmds = perf.add_subparsers(dest="perf_command", required=True, parser_class=type(perf))

    p = cmds.add_parser("shapes", help="list the workload shapes; write shapes.json + method.json for the payload")
    p.add_argument("--subset", choices=SUBSETS, default="full",
                   help="pr: the pull-request subset (perf.yaml subset); full: every workload shape (default)")
    p.add_argument("--shape", action="append", metavar="GLOB", help="only keys matching (repeatable)")
    p.add_argument("--out", type=Path, help="folder to write shapes.json and method.json into")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    p.set_defaults(handler=cmd_shapes)

    p = cmds.add_parser("measure", help="time the shapes in a toolchain through an executor")
    p.add_argument("--toolchain", help="toolchain (default: the golden one)")
    p.add_argument("--arch", help="arch (default: the one whose device this machine has)")
    p.add_argument("--subset", choices=SUBSETS, default="pr",
                   help="pr (default): the pull-request subset of perf.yaml; full: every workload shape")
    add_executor_option(p)
    p.add_argument("--out", type=Path, help="output folder (default: <root>/out/perf)")
    p.add_argument("--kernel", choices=("mha", "sdpa"), default="mha",
                   help="sdpa: time torch SDPA instead (harness sanity check, not a kernel measurement)")
    p.add_argument("--shape", action="append", metavar="GLOB",
                   help="only the subset's keys matching GLOB (repeatable; `mha-ci perf shapes` lists them)")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure N times, each in its own process, and combine (median, between-run noise)")
    p.add_argument("--interleave", metavar="T2",
                   help="also measure toolchain T2 on the same GPU, taking turns shape by shape (ABBA)")
    p.add_argument("--chunks", type=int, default=None,
                   help="with --interleave: alternate N strided chunks, one process each, instead of shapes")
    p.add_argument("--against", metavar="REF",
                   help="also measure the kernel (src/mha) of git REF, same toolchain and GPU, taking turns "
                        "shape by shape with the working tree, and gate the working tree against it")
    p.add_argument("--no-numerics", dest="numerics", action="store_false",
                   help="time only: skip each shape's output digests and float64-reference errors (the "
                        "numerics --against judges bit by bit; on by default for the mha kernel on a GPU)")
    _add_accept_less_accurate(p)
    add_pins_option(p)
    p.set_defaults(handler=cmd_measure)

    p = cmds.add_parser("compare", help="classify every shape of CAND against BASE (exit 1 on regression)")
    p.add_argument("baseline", type=Path, help="the mha-ci.perf/1 document to judge against (BASE)")
    p.add_argument("candidate", type=Path, help="the mha-ci.perf/1 document judged (CAND)")
    p.add_argument("--format", choices=("text", "md", "json"), default="text",
                   help="what stdout gets (default text)")
    p.add_argument("--out", type=Path, help="also write compare.{json,md,txt,png,html} here")
    p.add_argument("--cross-toolchain", action="store_true", help="compare two toolchains on purpose")
    numbers = p.add_mutually_exclusive_group()
    numbers.add_argument("--accuracy", type=Path, metavar="FILE",
                         help="judge CAND's numerics against this accuracy baseline "
                              "(perf_baselines/<arch>/accuracy/<toolchain>.json), as the perf job does")
    numbers.add_argument("--no-numerics", dest="numerics", action="store_false",
                         help="judge timings only: ignore both documents' numerics")
    _add_accept_less_accurate(p)
    p.set_defaults(handler=cmd_compare)

    p = cmds.add_parser("calibrate", help="A/A (and a planted run): noise, smallest slowdown caught, false-regression and catch rates held to perf.yaml's calibration bars")
    p.add_argument("runs", type=Path, nargs="+", metavar="A B",
                   help="A/A pairs of mha-ci.perf/1 runs of one build: A B [A2 B2 ...], judged as one sample "
                        "(for --against runs: perf-base.json perf-head.json of each)")
    p.add_argument("--planted", type=Path, help="a third run of the same build with MHA_PERF_PLANT_SLOWDOWN")
    p.add_argument("--planted-base", type=Path,
                   help="what the planted run is judged against (default: A): the base side of the same "
                        "interleaved run, for calibrating --against or --interleave")
    p.add_argument("--scaled-plant", type=float, metavar="PCT",
                   help="also judge every pair's B with each time multiplied by 1 + PCT/100 against its A: a "
                        "slowdown that realises exactly PCT under the pairs' real noise (held to the catch bar)")
    p.add_argument("--min-us", type=float, default=0.0, help="judge only shapes of at least this many us in A")
    p.add_argument("--floor-pct", type=float, default=None,
                   help="the gate's floor to calibrate (default: perf.yaml's; --against-floor: its --against floor)")
    p.add_argument("--against-floor", action="store_true",
                   help="calibrate the floor `perf measure --against` judges with (perf.yaml against.floor_pct)")
    p.add_argument("--format", choices=("md", "json"), default="md", help="what stdout gets (default md)")
    p.add_argument("--out", type=Path, help="also write calibrate.{json,md,png} here")
    p.set_defaults(handler=cmd_calibrate)

    p = cmds.add_parser("merge", help="join chunk documents (payload --chunk I/N) of one toolchain")
    p.add_argument("chunks", type=Path, nargs="+", help="mha-ci.perf/1 chunk documents of one toolchain")
    p.add_argument("--out", type=Path, required=True, help="the merged document (a file)")
    p.set_defaults(handler=cmd_merge)

    p = cmds.add_parser("combine", help="one baseline from several runs of one build, with the between-run noise")
    p.add_argument("runs", type=Path, nargs="+", help="mha-ci.perf/1 runs (ideally from different machines or days)")
    p.add_argument("--out", type=Path, required=True, help="the combined document (a file)")
    p.set_defaults(handler=cmd_combine)

    p = cmds.add_parser("accuracy", help="store a measurement's numerics as the accuracy baseline of its arch and "
                                         "toolchain (perf_baselines/<arch>/accuracy/<toolchain>.json)")
    p.add_argument("measurement", type=Path,
                   help="a mha-ci.perf/1 measurement with numerics for every pull-request subset shape "
                        "(`mha-ci perf measure --subset pr` on a GPU); the nightly refresh stores it by itself")
    p.add_argument("--check", action="store_true", help="only say whether it would change the stored one (exit 1)")
    p.set_defaults(handler=cmd_accuracy)

    p = cmds.add_parser("refresh", help="measure the full set and propose new baselines on a branch (mha_ci.refresh)",
                        description="Measure every workload shape (the full set; a baseline covers all of them) "
                                    "from a working tree that is HEAD's, and propose new baselines on a branch.")
    p.add_argument("--arch", help="arch (default: the one whose device this machine has)")
    p.add_argument("--toolchain", action="append", help="toolchain (repeatable; default: all)")
    add_executor_option(p)
    p.add_argument("--out", type=Path, help="output folder (default: <root>/out/refresh)")
    p.add_argument("--always", action="store_true", help="make the branch even when nothing moved")
    # Documents measured already (by `perf measure`, or copied from a GPU machine): no measuring.
    p.add_argument("--measurement", action="append", default=[], metavar="TOOLCHAIN=FILE",
                   help="refresh from this mha-ci.perf/1 document measured on --arch with that toolchain instead "
                        "of measuring (one per toolchain; needs --arch). Naming a toolchain again adds a "
                        "re-measurement of the same commit: it stands in for the shapes the earlier "
                        "documents had stalled or too noisy (refresh.remeasure_rounds)")
    p.add_argument("--checksums", action="append", default=[], metavar="TOOLCHAIN=FILE",
                   help="with --measurement: mha-ci.codeobj/1 document to store as "
                        "perf_baselines/code_objects/TOOLCHAIN.json")
    p.add_argument("--durations", action="append", default=[], metavar="NAME=FILE",
                   help="with --measurement: test-durations document to store as perf_baselines/test_durations/NAME")
    p.add_argument("--date", type=_date, default=None, help="YYYY-MM-DD of the branch name (default: today, UTC)")
    add_pins_option(p)
    p.set_defaults(handler=cmd_refresh)

    p = cmds.add_parser("history", help="each shape's series over the stored baseline's git history (no GPU)")
    p.add_argument("--arch", required=True, help="arch of the stored baseline (perf_baselines/<arch>/)")
    p.add_argument("--toolchain", required=True, help="toolchain of the stored baseline (<arch>/<toolchain>.json)")
    p.add_argument("--shape", action="append", metavar="GLOB", help="only keys matching (repeatable)")
    p.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), help="only this pass's shapes")
    p.add_argument("--rev", default="HEAD", help="read the history of this commit (default: HEAD)")
    p.add_argument("--out", type=Path, required=True,
                   help="folder for index.html, history.md, history.json, overview.png, shapes/*.png")
    p.set_defaults(handler=cmd_history)

    return cmds


def _add_accept_less_accurate(p) -> None:
    p.add_argument("--accept-less-accurate", action="append", default=[], metavar="GLOB",
                   help="shape keys matching GLOB (fnmatch, repeatable) may be less accurate than the base "
                        "(rms_rel error beyond perf.yaml numerics.less_accurate_factor) without failing the "
                        "gate: a precision trade made on purpose; the reports list them as accepted")


# handlers ----------------------------------------------------------------------------------

def cmd_shapes(args) -> int:
    pipeline = load_pipeline(args.root)
    workloads = selected_workloads(pipeline, args.subset, args.shape)
    if args.out:
        gate = gate_policy(pipeline.perf)
        shapes, meth = write_input_files(args.out, workloads, "custom" if args.shape else args.subset,
                                         method(pipeline.perf, gate))
        print(f"wrote {shapes} ({len(workloads)} shapes) and {meth}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(shapes_document(workloads, args.subset), indent=1))
        return ExitCode.OK
    for w in workloads:
        print(f"{w.key:<68} {w.shape.pass_:<4} {w.bucket:<16} {','.join(w.tags):<20} {w.shape.flops / 1e12:8.3f} TFLOP")
    passes = Counter(w.shape.pass_ for w in workloads)
    buckets = Counter((w.shape.pass_, w.bucket, w.shape.layout) for w in workloads)
    tags = Counter(t for w in workloads for t in w.tags)
    print(f"{len(workloads)} shapes ({args.subset}): " + ", ".join(f"{p} {passes[p]}" for p in sorted(passes))
          + "; by pass/bucket/layout: "
          + ", ".join(f"{p}/{b}/{l} {n}" for (p, b, l), n in sorted(buckets.items()))
          + "; by source: " + ", ".join(f"{t} {n}" for t, n in sorted(tags.items())))
    return ExitCode.OK


def cmd_measure(args) -> int:
    check_pins_option(args)
    pipeline = load_pipeline(args.root)
    check_target(pipeline, args.arch, [args.toolchain] if args.toolchain else ())
    toolchain = args.toolchain or _golden(pipeline)
    arch = args.arch or _local_arch(pipeline)
    out_dir = (args.out or args.root / "out" / "perf").resolve()
    request = perf_request(pipeline, arch=arch, toolchains=(toolchain, *([args.interleave] if args.interleave else [])),
                           subset=args.subset, keys=args.shape, kernel=args.kernel, repeat=args.repeat,
                           numerics=args.numerics, out_dir=out_dir,
                           executor=make_executor(args.executor, args.root, pin_mode=args.pins))
    if args.against:
        return _measure_against(args, request)
    rel = f"perf-{arch}-{toolchain}" + (f"-vs-{args.interleave}" if args.interleave else "")
    inputs = write_inputs(request, rel)
    print(f"mha-ci perf: {inputs.count} shapes ({args.subset}) on {arch}, toolchain {toolchain}"
          + (f" interleaved with {args.interleave} " + (f"in {args.chunks} chunks" if args.chunks else "per shape")
             if args.interleave else ""),
          file=sys.stderr)
    if not args.interleave:
        measure_repeated(request, inputs)
        print(f"mha-ci perf: wrote {out_dir / rel / 'perf.json'}", file=sys.stderr)
        return ExitCode.OK
    if args.repeat != 1:
        raise ConfigError("--repeat is not supported with --interleave (one interleaved run per call)", key="--repeat")
    if args.chunks is None:
        docs = measure_lockstep(request, inputs)
    elif args.chunks < 1:
        raise ConfigError("--chunks must be at least 1", key="--chunks")
    else:
        docs = measure_interleaved(request, inputs, args.chunks)
    return _report(compare(docs[toolchain], docs[args.interleave], request.gate,
                           cross_toolchain=True, accept_less_accurate=args.accept_less_accurate), out_dir / rel)


def _report(comparison, folder: Path) -> int:
    """An interleaved measurement's verdict: the reports in `folder`, the text on stdout."""
    _write_compare(comparison, folder)
    print(report.text(comparison), end="")
    print(f"mha-ci perf: reports in {folder}", file=sys.stderr)
    return ExitCode.GATE_FAILED if comparison.gate_failed else ExitCode.OK


def _measure_against(args, request: PerfRequest) -> int:
    """`measure --against REF`: base (REF's kernel) and head (the working tree's) interleaved."""
    for option, value in (("--interleave", args.interleave), ("--chunks", args.chunks)):
        if value is not None:
            raise ConfigError(f"{option} and --against are two different comparisons; pass one", key=option)
    if args.repeat != 1:
        raise ConfigError("--repeat is not supported with --against (one interleaved run per call)", key="--repeat")
    sha = resolve(args.root, args.against)
    arch, toolchain, out_dir = request.arch, request.toolchain, request.out_dir
    rel = f"perf-{arch}-{toolchain}-against-{sha[:12]}"
    inputs = write_inputs(request, rel)
    base_root = out_dir / rel / "base-checkout"
    materialise(args.root, sha, base_root)
    # One venv (or image) for both sides: the toolchain is the same, only the kernel differs.
    assert request.executor is not None
    executors = (make_executor(args.executor, base_root, cache=cache_root(args.root), pin_mode=args.pins),
                 request.executor)
    head = os.environ.get("MHA_CI_COMMIT") or commit_or_none(args.root)
    print(f"mha-ci perf: {inputs.count} shapes ({args.subset}) on {arch}, toolchain {toolchain}: the kernel of "
          f"{args.against} ({sha[:12]}) and of the working tree, taking turns per shape", file=sys.stderr)
    docs = measure_against(request, inputs, executors, (sha, head))
    # --no-numerics asked for timing only: the gate then judges no numerics rather than missing ones.
    policy = request.against_gate
    if not request.records_numerics:
        policy = replace(policy, require_numerics=False)
    return _report(compare(docs["base"], docs["head"], policy, accept_less_accurate=args.accept_less_accurate,
                           unchanged_host=unchanged_host(base_root, args.root)),
                   out_dir / rel)


def cmd_compare(args) -> int:
    if args.out:
        refuse_special_outputs(args.out, COMPARE_FILES)
    baseline, candidate = load_perf(args.baseline), load_perf(args.candidate)
    if args.accuracy:
        baseline = accuracy.with_accuracy(baseline, load_perf(args.accuracy))
    if not args.numerics:
        baseline, candidate = accuracy.without_numerics(baseline), accuracy.without_numerics(candidate)
    comparison = compare(baseline, candidate, gate_policy(load_pipeline(args.root).perf),
                         cross_toolchain=args.cross_toolchain, accept_less_accurate=args.accept_less_accurate)
    if args.format == "json":
        print(json.dumps(comparison.to_dict(), indent=1))
    elif args.format == "md":
        print(report.markdown(comparison), end="")
    else:
        print(report.text(comparison), end="")
    if args.out:
        _write_compare(comparison, args.out)
        print(f"mha-ci perf: reports in {args.out}", file=sys.stderr)
    if comparison.refused:
        print(f"mha-ci perf: refused: {comparison.refused}", file=sys.stderr)
    return ExitCode.GATE_FAILED if comparison.gate_failed else ExitCode.OK


def _write_compare(comparison, folder: Path) -> None:
    publish(folder, COMPARE_FILES, lambda staging: report.write_all(comparison, staging))


def cmd_calibrate(args) -> int:
    spec = load_pipeline(args.root).perf
    planted = load_perf(args.planted) if args.planted else None
    if planted is not None and not any(e.get("planted_pct") for e in planted["results"]):
        raise ConfigError("no shape of this run was planted: measure it with MHA_PERF_PLANT_SLOWDOWN=<pct> "
                          "(and MHA_PERF_PLANT_KEYS=<glob,...> to plant only some shapes)", file=str(args.planted))
    if args.planted_base and planted is None:
        raise ConfigError("--planted-base needs --planted", key="--planted-base")
    if args.min_us < 0:
        raise ConfigError("--min-us must not be negative", key="--min-us")
    policy = gate_policy(spec)
    if args.against_floor:
        policy = against_policy(policy, spec)
    if args.floor_pct is not None:
        if not args.floor_pct > 0:
            raise ConfigError("--floor-pct must be above 0", key="--floor-pct")
        policy = replace(policy, floor_pct=args.floor_pct)
    if len(args.runs) % 2:
        raise ConfigError(f"A/A runs come in pairs (A B [A2 B2 ...]); {len(args.runs)} given", key="runs")
    if args.scaled_plant is not None and not 0 < args.scaled_plant <= 100:
        raise ConfigError("--scaled-plant must be above 0 and at most 100 (%)", key="--scaled-plant")
    docs = [load_perf(path) for path in args.runs]
    result = calibrate.calibrate_pairs(list(zip(docs[::2], docs[1::2])), policy, planted=planted,
                                       bars=calibration_bars(spec), min_us=args.min_us,
                                       planted_base=load_perf(args.planted_base) if args.planted_base else None,
                                       scaled_pct=args.scaled_plant)
    text = calibrate.markdown(result)
    print(json.dumps(result, indent=1) if args.format == "json" else text, end="" if args.format == "md" else "\n")
    if args.out:
        def write(staging: Path) -> None:
            write_json(staging / "calibrate.json", result)
            (staging / "calibrate.md").write_text(text)
            if "verdict" in result:
                (staging / "calibrate.png").write_bytes(calibrate.plot_png(result))
        publish(args.out, ("calibrate.json", "calibrate.md", "calibrate.png"), write)
    if "refused" in result and len(result) == 1:
        return ExitCode.GATE_FAILED
    # A bar of pipelines/perf.yaml (calibration) missed: the gate is not calibrated here.
    return ExitCode.OK if result["verdict"]["met"] else ExitCode.GATE_FAILED


def cmd_combine(args) -> int:
    policy = gate_policy(load_pipeline(args.root).perf)
    doc = combine([load_perf(p) for p in args.runs], names=[str(p) for p in args.runs],
                  max_noise_pct=policy.invalid_noise_pct, may_be_unordered=frozenset(policy.may_be_unordered))
    write_json(args.out, doc)
    noisy = sorted((r["stats"]["between_run_noise_pct"] or 0.0, r["key"]) for r in doc["results"] if r.get("stats"))[-5:]
    print(f"mha-ci perf: {len(doc['results'])} shapes from {len(args.runs)} runs -> {args.out}; "
          "largest between-run noise: " + ", ".join(f"{k} {n:.1f} %" for n, k in reversed(noisy)), file=sys.stderr)
    return ExitCode.OK


def cmd_accuracy(args) -> int:
    """Arch and toolchain come from the measurement's provenance, checked against the pipeline."""
    pipeline = load_pipeline(args.root)
    measurement = load_perf(args.measurement)
    prov = measurement["provenance"]
    arch, toolchain = prov.get("arch"), prov.get("toolchain")
    if arch not in pipeline.archs or toolchain not in pipeline.toolchains:
        raise ConfigError(f"the measurement is of arch {arch!r} and toolchain {toolchain!r}; the pipeline knows "
                          f"archs {', '.join(pipeline.archs)} and toolchains {', '.join(pipeline.toolchains)}",
                          file=str(args.measurement))
    keys = [w.key for w in selected_workloads(pipeline, "pr")]
    doc = accuracy.accuracy_document(measurement, keys)
    target = args.root / accuracy_baseline(arch, toolchain)
    old = load_perf(target) if target.is_file() else None
    moved = accuracy.changed(old, doc)
    what = f"{accuracy_baseline(arch, toolchain)}: {len(keys)} shapes, " + ("changed" if moved else "unchanged")
    if args.check:
        print(f"mha-ci perf: {what}", file=sys.stderr)
        return ExitCode.GATE_FAILED if moved else ExitCode.OK
    write_json(target, doc)
    print(f"mha-ci perf: wrote {what}", file=sys.stderr)
    return ExitCode.OK


def cmd_merge(args) -> int:
    merged = merge_perf([load_perf(p) for p in args.chunks])
    write_json(args.out, merged)
    print(f"mha-ci perf: {len(merged['results'])} shapes from {len(args.chunks)} chunks -> {args.out}", file=sys.stderr)
    return ExitCode.OK


def cmd_refresh(args) -> int:
    check_pins_option(args)
    pipeline = load_pipeline(args.root)
    check_target(pipeline, args.arch, args.toolchain)
    out_dir = (args.out or args.root / "out" / "refresh").resolve()
    if args.measurement:
        if args.toolchain:
            raise ConfigError("--toolchain goes without --measurement: each measurement names its toolchain",
                              key="--toolchain")
        if not args.arch:
            raise ConfigError("--measurement needs --arch: the arch the documents were measured on", key="--arch")
        measure_fn, remeasure_fn, toolchains, checksums_fn, durations_fn = _measured_files(args)
        request = perf_request(pipeline, arch=args.arch, toolchains=toolchains, out_dir=out_dir, executor=None)
        _refuse_other_code(args, request.arch)
    else:
        if args.checksums or args.durations:
            raise ConfigError("--checksums and --durations go with --measurement", key="--checksums")
        request = perf_request(pipeline, arch=args.arch or _local_arch(pipeline),
                               toolchains=args.toolchain or list(pipeline.toolchains), out_dir=out_dir,
                               executor=make_executor(args.executor, args.root, pin_mode=args.pins))
        measure_fn, remeasure_fn = measured_here(request, f"measure-{request.arch}")
        checksums_fn, durations_fn = None, None
    result = refresh(request, measure_fn, remeasure_fn=remeasure_fn, out_dir=out_dir,
                     checksums_fn=checksums_fn, durations_fn=durations_fn, today=args.date, always=args.always,
                     allow_unpinned=args.pins == "record")
    print(f"mha-ci perf refresh: {result.status}" + (f" on branch {result.branch}" if result.branch else "")
          + (f" ({result.commit}: {', '.join(result.files)})" if result.commit else ""), file=sys.stderr)
    print(f"mha-ci perf refresh: pull-request body: {out_dir / 'pr-body.md'}", file=sys.stderr)
    return ExitCode.OK


def cmd_history(args) -> int:
    refuse_special_outputs(args.out, HISTORY_FILES, ("shapes",))
    h = history(args.root, args.arch, args.toolchain, args.shape, args.pass_, args.rev)
    publish(args.out, HISTORY_FILES, lambda staging: history_report.write_all(h, staging), ("shapes",))
    paths = {"html": Path(args.out) / "index.html"}
    print(history_report.markdown(h), end="")
    print(f"mha-ci perf history: {len(h.series)} shapes over {len(h.versions)} versions"
          + (f" ({len(h.skipped)} skipped: not perf documents)" if h.skipped else "")
          + f"; page {paths['html']}", file=sys.stderr)
    return ExitCode.OK


def _refuse_other_code(args, arch: str) -> None:
    """A measurement file stands for HEAD's baseline only if it timed HEAD's code objects."""
    for name, path in _pairs(args.measurement, "--measurement"):
        why = code_mismatch(args.root, _read_json(path), name, arch)
        if why:
            raise ConfigError(f"not a measurement of HEAD's {arch} code: {why}", file=str(path), key="--measurement")


def _measured_files(args):
    """(measure_fn, remeasure_fn, toolchains, checksums_fn, durations_fn) over documents measured
    elsewhere: a toolchain's first document is its run, the later ones its re-measurements."""
    runs: dict[str, list[dict]] = {}
    for name, path in _pairs(args.measurement, "--measurement"):
        runs.setdefault(name, []).append(_read_json(path))
    checksums = {name: _read_json(path) for name, path in _single(_pairs(args.checksums, "--checksums"), "--checksums")}
    durations = {name: _read_json(path) for name, path in _single(_pairs(args.durations, "--durations"), "--durations")}

    def remeasure_fn(arch, toolchain, keys, round_):
        later = runs[toolchain.name][1:]
        return later[round_ - 1] if round_ <= len(later) else None

    return ((lambda arch, toolchain: runs[toolchain.name][0]), remeasure_fn, list(runs),
            (lambda toolchain: checksums.get(toolchain.name)) if checksums else None,
            (lambda arch: durations) if durations else None)


def _pairs(values: list[str], option: str) -> list[tuple[str, Path]]:
    found = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"{option} takes NAME=FILE, not {value!r}", key=option)
        found.append((name, Path(path)))
    return found


def _single(pairs: list[tuple[str, Path]], option: str) -> list[tuple[str, Path]]:
    """The pairs of an option that takes each name once (a second file would silently win)."""
    names = [name for name, _ in pairs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError(f"{option} names {', '.join(twice)} more than once", key=option)
    return pairs


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON: {exc.msg}", file=str(path), line=exc.lineno) from None


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a YYYY-MM-DD date: {text!r}") from None


def _golden(pipeline) -> str:
    return pipeline.toolchain_with_role("golden") or next(iter(pipeline.toolchains))


def _local_arch(pipeline) -> str:

    devices = local_devices()
    archs = [a.name for a in pipeline.archs.values() if a.device != "none" and a.device in devices]
    if len(archs) == 1:
        return archs[0]
    if not archs:
        raise EnvironmentProblem("no GPU on this machine for perf (pass --arch to name one, e.g. for --kernel sdpa "
                                 "on the interpreter arch's CPU)")
    raise ConfigError(f"this machine's GPU fits several archs ({', '.join(archs)}): pass --arch", key="--arch")
