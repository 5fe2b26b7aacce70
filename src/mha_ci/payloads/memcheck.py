"""Memcheck payload: launch every compiled kernel variant under compute-sanitizer.

    python -m mha_ci.payloads.memcheck run --target sm90=cuda:90:32 --shard I --shards N
        --tools memcheck,initcheck --report FILE --junit FILE --logs DIR [--timeout S]
    python -m mha_ci.payloads.memcheck child (--plant TOOL | --problems FILE --labels L1,L2,...)

File arguments are relative to $MHA_CI_OUT (see mha_ci.payloads).

`run` enumerates the variants the checksums job compiles for the arch
(mha_ci.checksums.variants.enumerate_variants), groups them by their problem point, takes this
shard's points (every N-th, in matrix order) and, for each tool:
1. runs the tool's planted fault (mha_ci.payloads.memcheck_plant) in a child under the
   sanitizer; the tool must report it, naming the planted kernel, or the shard cannot judge;
2. runs this shard's points in a child under the sanitizer (mha_ci.payloads.memcheck_problems
   sizes each so every tile loop ends in a partial tile). A report usually leaves the CUDA
   context unusable, so after a child that stopped early the rest of the points run in a new
   one: one fault does not hide the next.
A variant counts as covered when the kernel function it compiles was launched while its point
ran (the child records each launch by function name).

Exit: 0 every self-test reported its plant, every point ran clean and every variant was covered;
1 a report, a crash, a missed plant or an uncovered variant; 3 no sanitizer or no CUDA device;
4 no result.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from mha_ci.checksums.compile import CompileTarget
from mha_ci.checksums.variants import enumerate_variants, problem_matrix
from mha_ci.files import write_atomic
from mha_ci.payloads import (EXIT_ENVIRONMENT, EXIT_GATE_FAILED, EXIT_NO_RESULT, EXIT_OK, out_path, pincheck,
                             run_guarded, sanitizer)

REPORT_SCHEMA = "mha-ci.memcheck-shard/1"
# Children in a row that stopped before any point finished: the harness, not a kernel, is broken.
MAX_STALLED_CHILDREN = 2
OUTPUT_TAIL = 15
# The kernel of mha_ci.payloads.memcheck_plant whose report shows each tool able to fail.
PLANTED_KERNELS = {"memcheck": "memcheck_plant_read_past_end", "initcheck": "memcheck_plant_read_uninitialised"}


def _log(message: str) -> None:
    print(f"memcheck: {message}", flush=True)


# --- run (the shard) --------------------------------------------------------------------------

def _plan(target_arg: str) -> dict:
    """Every variant of the arch, grouped by the matrix point that selects it, in matrix order."""
    arch, _, spec = target_arg.partition("=")
    variants = enumerate_variants(arch, CompileTarget.parse(spec))
    grouped: dict[str, list[dict]] = {p.label: [] for p in problem_matrix()}
    for variant in variants:
        grouped[variant.key.rsplit("/", 1)[-1]].append({"key": variant.key, "function": variant.task.qualname})
    points = [{"label": p.label, "problem": p.describe(), "variants": grouped[p.label]}
              for p in problem_matrix() if grouped[p.label]]
    return {"arch": arch, "variants": len(variants), "points": points}


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # Every tensor its own cudaMalloc: a read past a tensor leaves its allocation.
    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run_child(binary: str, tool: str, child_args: list[str], log: Path, timeout: float) -> tuple[int | None, str]:
    cmd = [*sanitizer.command(binary, tool), sys.executable, "-m", "mha_ci.payloads.memcheck", "child", *child_args]
    try:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                              env=_child_env(), check=False)
        code: int | None = done.returncode
        text = done.stdout
    except subprocess.TimeoutExpired as exc:
        code = None
        text = (exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or "")
        text += f"\n(timed out after {timeout:.0f} s)\n"
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n{text}\n(exit {code})\n")
    return code, text


def _warm(points: list[dict], problems_file: str, processes: int, timeout: float, log: Path) -> float:
    """Compile every point's kernels into Triton's cache in parallel processes without the
    sanitizer, so the sanitized children (one process at a time) launch cached kernels. Its
    results judge nothing: a fault here shows again under the sanitizer."""
    started = time.monotonic()
    labels = [p["label"] for p in points]
    groups = [labels[i::processes] for i in range(processes) if labels[i::processes]]
    children = [subprocess.Popen([sys.executable, "-m", "mha_ci.payloads.memcheck", "child", "--problems",
                                  problems_file, "--labels", ",".join(group)], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, env=_child_env()) for group in groups]
    with log.open("w") as fh:
        for child in children:
            try:
                text, _ = child.communicate(timeout=max(1.0, timeout - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                child.kill()
                text, _ = child.communicate()
            fh.write(f"(warm-up child exit {child.returncode})\n{text}\n")
    return time.monotonic() - started


def _tail(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()][-OUTPUT_TAIL:]


def _self_test(binary: str, tool: str, log: Path, timeout: float) -> dict:
    started = time.monotonic()
    code, text = _run_child(binary, tool, ["--plant", tool], log, timeout)
    parsed = sanitizer.parse(text)
    section = next((s for s in parsed.sections if s.label == f"plant-{tool}"), None)
    # A memcheck report usually ends the child before its end marker: the name comes from here.
    expected = PLANTED_KERNELS.get(tool, "")
    reports = section.reports if section else []
    named = [r for r in reports if expected and r.kernel == expected]
    seen = code == sanitizer.ERROR_EXIT and bool(named)
    why = "" if seen else (
        f"the sanitizer's {tool} did not report the planted fault in {expected or 'the plant kernel'} "
        f"(exit {code}, {len(reports)} report(s), none naming it): a clean run would prove nothing")
    return {"tool": tool, "status": "seen" if seen else "missed", "why": why, "exit": code,
            "reports": [r.to_json() for r in reports[:3]], "seconds": round(time.monotonic() - started, 2),
            "tail": [] if seen else _tail(text)}


def _check_points(binary: str, tool: str, points: list[dict], problems_file: str, log: Path,
                  timeout: float) -> list[dict]:
    """Every point under `tool`; one result per point, in order."""
    results: dict[str, dict] = {}
    remaining = [p["label"] for p in points]
    stalled = 0
    while remaining:
        started = time.monotonic()
        code, text = _run_child(binary, tool, ["--problems", problems_file, "--labels", ",".join(remaining)], log,
                                timeout)
        parsed = sanitizer.parse(text)
        progressed = False
        for section in parsed.sections:
            if section.label not in remaining or section.label in results:
                continue
            if any(r["status"] != "clean" for label, r in results.items() if label in remaining):
                # After a report in this child: the sanitizer's print limit counts per process,
                # so a later problem's reports may be hidden; it runs again in a fresh child.
                break
            info = json.loads(section.info) if section.finished and section.info else {}
            status = "reported" if section.reports else ("clean" if section.finished else "crashed")
            results[section.label] = {
                "label": section.label, "tool": tool, "status": status,
                "reports": [r.to_json() for r in section.reports[:3]], "report_count": len(section.reports),
                "kernels": info.get("kernels", []), "seconds": info.get("seconds"),
                **({"tail": _tail(text)} if status == "crashed" else {})}
            progressed = True
        if parsed.outside:
            first = next((r for r in results.values() if r["status"] != "clean"), None)
            stray = {"label": "(between problems)", "tool": tool, "status": "reported",
                     "reports": [r.to_json() for r in parsed.outside[:3]], "report_count": len(parsed.outside),
                     "kernels": [], "near": first["label"] if first else None}
            results.setdefault(f"(outside-{len(results)})", stray)
        remaining = [label for label in remaining if label not in results]
        if code == 0 and remaining:
            raise RuntimeError(f"the child exited 0 without running {remaining[:3]}")
        if not remaining:
            break
        stalled = 0 if progressed else stalled + 1
        if stalled >= MAX_STALLED_CHILDREN:
            for label in remaining:
                results[label] = {"label": label, "tool": tool, "status": "not-run", "reports": [],
                                  "why": f"{stalled} children in a row stopped before any problem "
                                         f"(last exit {code}, {time.monotonic() - started:.0f} s)",
                                  "tail": _tail(text), "kernels": []}
            break
    return list(results.values())


def _covered(points: list[dict], results: list[dict]) -> tuple[int, list[str]]:
    """Variants whose function launched while their point ran clean or reported (under any tool)."""
    launched: dict[str, set[str]] = {}
    for result in results:
        launched.setdefault(result["label"], set()).update(result.get("kernels", []))
    covered, missing = 0, []
    for point in points:
        for variant in point["variants"]:
            if variant["function"] in launched.get(point["label"], set()):
                covered += 1
            else:
                missing.append(variant["key"])
    return covered, missing


def apply_known(results: list[dict], known: list[dict]) -> None:
    """Known findings (pipelines/known_failures.yaml, test ids `TOOL::PROBLEM`) as strict xfail:
    a known one that reported is "known"; one that ran clean is "fixed", a failure, so the entry
    cannot outlive its reason."""
    for result in results:
        test = f"{result['tool']}::{result['label']}"
        entry = next((k for k in known if fnmatch.fnmatchcase(test, k["test"])), None)
        if entry is None:
            continue
        if result["status"] == "reported":
            result["status"], result["known_reason"] = "known", entry["reason"]
        elif result["status"] == "clean":
            result["status"] = "fixed"
            result["why"] = (f"listed as a known finding ({entry['reason']}) but ran clean: "
                             "remove its entry from pipelines/known_failures.yaml")


def _junit(path: Path, suite: str, self_tests: list[dict], results: list[dict], missing: list[str]) -> None:
    root = ElementTree.Element("testsuites")
    cases = ElementTree.SubElement(root, "testsuite", name=suite)
    failures = 0

    def case(name: str, seconds, problem: str | None) -> None:
        nonlocal failures
        element = ElementTree.SubElement(cases, "testcase", classname=suite, name=name, time=str(seconds or 0))
        if problem:
            failures += 1
            ElementTree.SubElement(element, "failure", message=problem.splitlines()[0][:300]).text = problem

    for test in self_tests:
        case(f"{test['tool']}::self-test", test["seconds"], test["why"] or None)
    for result in results:
        case(f"{result['tool']}::{result['label']}", result.get("seconds"), _problem_text(result))
        if result["status"] == "known":
            ElementTree.SubElement(cases[-1], "skipped", type="pytest.xfail", message=result["known_reason"][:300])
    for key in missing:
        case(f"coverage::{key}", 0, f"{key}: its kernel was never launched while its problem ran")
    cases.set("tests", str(len(cases)))
    cases.set("failures", str(failures))
    path.parent.mkdir(parents=True, exist_ok=True)
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _problem_text(result: dict) -> str | None:
    if result["status"] in ("clean", "known"):
        return None
    if result["status"] == "reported":
        first = result["reports"][0]
        return (f"{result['report_count']} {result['tool']} report(s) in {first['kernel'] or 'a kernel'} "
                f"while {result['label']} ran: " + "\n".join(first["lines"]))
    return f"{result['label']}: {result['status']} under {result['tool']}: " + (result.get("why") or "") + "\n" + \
        "\n".join(result.get("tail", []))


def run(args) -> int:
    pins = pincheck.enforce_report()
    binary = sanitizer.find()
    if binary is None:
        print("memcheck: no compute-sanitizer (set MHA_CI_COMPUTE_SANITIZER, or put the CUDA toolkit's bin on PATH)",
              file=sys.stderr, flush=True)
        return EXIT_ENVIRONMENT
    import torch  # toolchain only: after the pin check
    if not torch.cuda.is_available():
        print("memcheck: no CUDA device here", file=sys.stderr, flush=True)
        return EXIT_ENVIRONMENT
    tools = [t for t in args.tools.split(",") if t]
    started = time.monotonic()
    plan = _plan(args.target)
    mine = plan["points"][args.shard - 1::args.shards]
    logs = out_path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    problems_file = logs / "problems.json"
    write_atomic(problems_file, json.dumps({p["label"]: p["problem"] for p in mine}, indent=1) + "\n")
    in_shard = sum(len(p["variants"]) for p in mine)
    _log(f"{plan['arch']}: {plan['variants']} variants in {len(plan['points'])} problems; shard {args.shard} of "
         f"{args.shards}: {len(mine)} problems, {in_shard} variants; tools {', '.join(tools)}; "
         f"{os.path.basename(binary)} {sanitizer.version(binary)}")
    warm_s = _warm(mine, str(problems_file), args.warm_processes, args.timeout, logs / "warm-up.log")
    _log(f"warm-up: {len(mine)} problems compiled in {warm_s:.0f} s ({args.warm_processes} processes, no sanitizer)")
    self_tests, results = [], []
    for tool in tools:
        log = logs / f"{tool}.log"
        log.unlink(missing_ok=True)
        test = _self_test(binary, tool, log, args.timeout)
        self_tests.append(test)
        _log(f"{tool}: self-test {test['status']} ({test['seconds']} s)")
        tool_started = time.monotonic()
        checked = _check_points(binary, tool, mine, str(problems_file), log, args.timeout)
        results += checked
        bad = [r for r in checked if r["status"] != "clean"]
        _log(f"{tool}: {len(checked) - len(bad)} of {len(checked)} problems clean in "
             f"{time.monotonic() - tool_started:.0f} s" + (f"; first: {_problem_text(bad[0])}" if bad else ""))
    apply_known(results, json.loads(out_path(args.known_failures).read_text()) if args.known_failures else [])
    covered, missing = _covered(mine, results)
    report = {"schema": REPORT_SCHEMA, "arch": plan["arch"], "shard": args.shard, "shards": args.shards,
              "tools": tools, "sanitizer": {"path": binary, "version": sanitizer.version(binary)},
              "variants_listed": plan["variants"], "problems_listed": len(plan["points"]),
              "variants_in_shard": in_shard, "variants_covered": covered, "uncovered": missing,
              "problems": len(mine), "self_tests": self_tests, "results": results,
              "versions": pins["versions"], "pins_checked": pins["pins_checked"],
              "pin_mismatches": pins["pin_mismatches"], "warm_s": round(warm_s, 2),
              "wall_s": round(time.monotonic() - started, 2)}
    path = out_path(args.report)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(report, indent=2, sort_keys=True) + "\n")
    _junit(out_path(args.junit), f"memcheck-{plan['arch']}", self_tests, results, missing)
    failed = [t for t in self_tests if t["status"] != "seen"] or \
        [r for r in results if r["status"] not in ("clean", "known")]
    if not mine:
        print("memcheck: this shard has no problems: nothing was judged", file=sys.stderr, flush=True)
        return EXIT_NO_RESULT
    return EXIT_GATE_FAILED if failed or missing else EXIT_OK


# --- child (under the sanitizer) --------------------------------------------------------------

def _record_launches(launched: list[str]) -> None:
    """Every @triton.jit launch appends its function's name (kernel[grid](...) goes through run)."""
    from triton.runtime.jit import JITFunction  # toolchain only: the child, after the pin check

    original = JITFunction.run

    def run(self, *args, **kwargs):
        launched.append(self.fn.__name__)
        return original(self, *args, **kwargs)

    JITFunction.run = run


def child(args) -> int:
    pincheck.enforce_report()
    if args.plant:
        from mha_ci.payloads import memcheck_plant  # toolchain only: defines Triton kernels at import

        label = f"plant-{args.plant}"
        print(sanitizer.begin_line(label), flush=True)
        name = memcheck_plant.run(args.plant)
        print(sanitizer.end_line(label, name), flush=True)
        return EXIT_OK
    from mha_ci.payloads.memcheck_problems import run_point  # toolchain only: imports torch and mha

    problems = json.loads(out_path(args.problems).read_text())
    launched: list[str] = []
    _record_launches(launched)
    for label in args.labels.split(","):
        launched.clear()
        print(sanitizer.begin_line(label), flush=True)
        started = time.monotonic()
        run_point(problems[label])
        info = {"kernels": sorted(set(launched)), "seconds": round(time.monotonic() - started, 2)}
        print(sanitizer.end_line(label, json.dumps(info, separators=(",", ":"))), flush=True)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_ci.payloads.memcheck")
    sub = parser.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("run")
    r.add_argument("--target", required=True, help="ARCH=BACKEND:ARCH:WARP (as the checksums payload)")
    r.add_argument("--shard", type=int, default=1)
    r.add_argument("--shards", type=int, default=1)
    r.add_argument("--tools", default="memcheck,initcheck")
    r.add_argument("--report", required=True)
    r.add_argument("--junit", required=True)
    r.add_argument("--logs", required=True, help="folder for the sanitizer logs")
    r.add_argument("--known-failures", default=None, help="JSON list of {test, reason}: TOOL::PROBLEM patterns")
    r.add_argument("--timeout", type=float, default=1800.0, help="seconds one child may take")
    r.add_argument("--warm-processes", type=int, default=min(8, os.cpu_count() or 1),
                   help="processes that compile the kernels before the sanitized runs")
    c = sub.add_parser("child")
    c.add_argument("--plant", default=None)
    c.add_argument("--problems", default=None)
    c.add_argument("--labels", default="")
    args = parser.parse_args(argv)
    if args.mode == "run" and not 1 <= args.shard <= args.shards:
        parser.error(f"--shard {args.shard} is not in 1..{args.shards}")
    return run_guarded("memcheck", lambda: run(args) if args.mode == "run" else child(args))


if __name__ == "__main__":
    sys.exit(main())
