"""The measuring steps `mha-ci perf`, the perf job and the refresh job share.

Measuring = write shapes.json and method.json into the run's out folder, run the payload
(`python -m mha_ci.payloads.perf`) through the executor, read back the mha-ci.perf/1 document.
The gate (mha_ci.perf.compare) and the job kinds (mha_ci.jobs.perf, mha_ci.jobs.refresh) take
it from there.

Interleaving two toolchains (`mha-ci perf measure --interleave T2`): one process cannot hold two
Triton versions, so two payload processes run at once and take turns shape by shape in ABBA
order (mha_ci.perf.lockstep): the machine's drift lands on both sides of every pair of shapes.
The older way, `--chunks N`, cuts the shapes into N strided chunks and runs the two toolchains'
processes one after another in ABBA chunk order (A1 B1 B2 A2 ...): it cancels only a linear
drift, and each chunk pays a process start; its chunks are merged back into one document.
Either way the two documents are compared with --cross-toolchain.

Numerics: every measurement of the mha kernel on a GPU also records, per shape, its outputs'
digests and errors against a float64 reference (mha_ci.payloads.numerics), unless the caller
turns it off. `--against` needs more: both sides keep their outputs, and a third payload run
(`python -m mha_ci.payloads.numerics`) compares them bit by bit; its verdicts join the head's
document as each result's `numerics.versus`, and the outputs are deleted (gigabytes per side).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from mha_ci.errors import ConfigError, EnvironmentProblem, ExitCode
from mha_ci.executors.base import PayloadRun
from mha_ci.model.pipeline import Pipeline
from mha_ci.perf import lockstep
from mha_ci.perf.combine import combine
from mha_ci.perf.config import gate_policy, method
from mha_ci.perf.document import check_subset, load_perf, merge_perf, write_json
from mha_ci.perf.workloads import Workload, filter_keys, generate, select_subset, shapes_document

# The full set is sized for ~10 minutes on an H200 (perf.yaml `measure`); the timeout leaves
# room for a slow first compile of every kernel variant.
PAYLOAD_TIMEOUT_S = 3600.0


def selected_workloads(pipeline: Pipeline, subset: str, keys: list[str] | None = None) -> list[Workload]:
    """The workloads of a subset name: "pr" or "full", optionally key-filtered."""
    check_subset(subset, "--subset")
    workloads = generate(pipeline.workloads)
    if subset == "pr":
        workloads = select_subset(workloads, pipeline.perf.subset.size, pipeline.perf.subset.always)
    if keys:
        workloads = filter_keys(workloads, keys)
        if not workloads:
            raise ConfigError(f"no workload shape matches {', '.join(keys)}", key="--shape")
    return workloads


def write_inputs(pipeline: Pipeline, folder: Path, subset: str, keys: list[str] | None = None) -> tuple[Path, Path, int]:
    """shapes.json and method.json for the payload; returns their paths and the shape count."""
    workloads = selected_workloads(pipeline, subset, keys)
    name = "custom" if keys else subset
    shapes = write_json(Path(folder) / "shapes.json", shapes_document(workloads, name))
    meth = write_json(Path(folder) / "method.json", method(pipeline.perf).to_dict())
    return shapes, meth, len(workloads)


def run_payload(executor, pipeline: Pipeline, toolchain: str, arch: str, out_dir: Path, rel: str, *, kernel: str = "mha",
                chunk: str | None = None, out_name: str = "perf.json", log_prefix: str = "perf",
                extra_args: tuple[str, ...] = (), extra_env: dict[str, str] | None = None,
                plant: bool = True, numerics: bool = False) -> dict:
    """Run the payload on out_dir/rel/{shapes,method}.json; returns the perf document. `plant`
    passes a planted slowdown (MHA_PERF_PLANT_*) of the environment on to it; `numerics` asks for
    each shape's numerics where the kernel and the device have them (numerics_apply)."""
    if toolchain not in pipeline.toolchains:
        raise ConfigError(f"unknown toolchain '{toolchain}'; known: {', '.join(pipeline.toolchains)}", key="--toolchain")
    if arch not in pipeline.archs:
        raise ConfigError(f"unknown arch '{arch}'; known: {', '.join(pipeline.archs)}", key="--arch")
    args = ["--shapes", f"{rel}/shapes.json", "--method", f"{rel}/method.json", "--out", f"{rel}/{out_name}",
            "--kernel", kernel, "--toolchain", toolchain, "--arch", arch, "--executor", executor.name,
            "--dump-dispatches", f"{rel}/{out_name.replace('.json', '')}.dispatches.json"]
    if chunk:
        args += ["--chunk", chunk]
    args += list(extra_args)
    if numerics and numerics_apply(pipeline, arch, kernel):
        args += ["--numerics"]
    if pipeline.archs[arch].compile_target is None:
        args += ["--device", "cpu"]
    names = ("MHA_PERF_PLANT_SLOWDOWN", "MHA_PERF_PLANT_KEYS", "MHA_CI_COMMIT") if plant else ("MHA_CI_COMMIT",)
    env = {k: os.environ[k] for k in names if k in os.environ}
    env.update(extra_env or {})
    result = executor.run(PayloadRun(module="perf", args=tuple(args), toolchain=pipeline.toolchains[toolchain].on(pipeline.archs[arch].platform),
                                     arch=pipeline.archs[arch], out_dir=out_dir, env=env,
                                     timeout_s=PAYLOAD_TIMEOUT_S, log_prefix=log_prefix))
    out = Path(out_dir) / rel / out_name
    if result.exit_code == ExitCode.ENVIRONMENT_ERROR:
        raise EnvironmentProblem(f"perf payload ({toolchain}, {arch}): environment problem; see its log")
    if result.timed_out or result.error or not out.is_file():
        why = "timed out" if result.timed_out else (result.error or f"exit {result.exit_code}, no {out.name}")
        raise EnvironmentProblem(f"perf payload ({toolchain}, {arch}) produced no result: {why}")
    doc = load_perf(out)
    if result.provenance.get("image_digest") and not doc["provenance"].get("image_digest"):
        doc["provenance"]["image_digest"] = result.provenance["image_digest"]
        write_json(out, doc)
    return doc


def numerics_apply(pipeline: Pipeline, arch: str, kernel: str) -> bool:
    """Whether a measurement records numerics: the mha kernel on a GPU. SDPA is the harness's
    sanity kernel, and a CPU arch runs the interpreter, whose float64 reference of a prefill
    shape would take longer than its timing."""
    return kernel == "mha" and arch in pipeline.archs and pipeline.archs[arch].compile_target is not None


def measure_repeated(executor, pipeline: Pipeline, toolchain: str, arch: str, out_dir: Path, rel: str, repeat: int,
                     kernel: str = "mha", log_prefix: str = "perf", numerics: bool = True) -> dict:
    """The payload `repeat` times, each its own process, combined (mha_ci.perf.combine) into
    out_dir/rel/perf.json: per shape the median run and the spread between runs. Some shapes move
    by several per cent from one process to the next while their within-run noise stays far
    smaller (docs/perf-method.md): one process can land on either side."""
    if repeat < 1:
        raise ConfigError("--repeat must be at least 1", key="--repeat")
    if repeat == 1:
        return run_payload(executor, pipeline, toolchain, arch, out_dir, rel, kernel=kernel, log_prefix=log_prefix,
                           numerics=numerics)
    runs = [run_payload(executor, pipeline, toolchain, arch, out_dir, rel, kernel=kernel,
                        out_name=f"perf-run{i}.json", log_prefix=f"{log_prefix} run {i}/{repeat}",
                        numerics=numerics)
            for i in range(1, repeat + 1)]
    doc = combine(runs, names=[f"run {i}" for i in range(1, repeat + 1)],
                  max_noise_pct=gate_policy(pipeline.perf).invalid_noise_pct)
    write_json(Path(out_dir) / rel / "perf.json", doc)
    return doc


def interleave_order(chunks: int, a: str, b: str) -> list[tuple[int, str]]:
    """ABBA order over chunks: (1, a), (1, b), (2, b), (2, a), (3, a), (3, b), ..."""
    order = []
    for i in range(1, chunks + 1):
        pair = (a, b) if i % 2 else (b, a)
        order += [(i, pair[0]), (i, pair[1])]
    return order


def measure_interleaved(executor, pipeline: Pipeline, toolchains: tuple[str, str], arch: str, out_dir: Path, rel: str,
                        chunks: int, kernel: str = "mha") -> dict[str, dict]:
    parts: dict[str, list[dict]] = {t: [] for t in toolchains}
    for index, toolchain in interleave_order(chunks, *toolchains):
        name = f"perf-{toolchain}-chunk{index}of{chunks}.json"
        parts[toolchain].append(run_payload(executor, pipeline, toolchain, arch, out_dir, rel, kernel=kernel,
                                            chunk=f"{index}/{chunks}", out_name=name,
                                            log_prefix=f"perf {toolchain} {index}/{chunks}"))
    merged = {}
    for toolchain, docs in parts.items():
        merged[toolchain] = merge_perf(docs)
        write_json(Path(out_dir) / rel / f"perf-{toolchain}.json", merged[toolchain])
    return merged


def measure_lockstep(executor, pipeline: Pipeline, toolchains: tuple[str, str], arch: str, out_dir: Path, rel: str,
                     kernel: str = "mha", numerics: bool = True) -> dict[str, dict]:
    """Both toolchains' payloads at once, taking turns per shape; {toolchain: perf document}."""
    if toolchains[0] == toolchains[1]:
        raise ConfigError("--interleave needs a second toolchain, not the same one twice", key="--interleave")
    return _take_turns([(toolchain, executor, toolchain, f"perf-{toolchain}.json", {}, ()) for toolchain in toolchains],
                       pipeline, arch, out_dir, rel, kernel, numerics=numerics)


def measure_against(executors: tuple, commits: tuple[str, str | None], pipeline: Pipeline, toolchain: str, arch: str,
                    out_dir: Path, rel: str, kernel: str = "mha", numerics: bool = True) -> dict[str, dict]:
    """The base commit's kernel and the working tree's, one toolchain, taking turns per shape on
    one device (mha_ci.perf.base_checkout says why); {"base": doc, "head": doc}. `executors` and
    `commits` are (base, head; None: not known); the base executor's root is the folder base_checkout wrote.
    With numerics, each head result also says how its outputs compare with the base's, bit by bit."""
    numerics = numerics and numerics_apply(pipeline, arch, kernel)
    saved = {name: f"{rel}/outputs/{name}" for name in ("base", "head")}
    sides = [(name, ex, toolchain, f"perf-{name}.json", {"MHA_CI_COMMIT": commit} if commit else {},
              ("--save-outputs", saved[name]) if numerics else ())
             for name, ex, commit in zip(("base", "head"), executors, commits)]
    for folder in saved.values():
        shutil.rmtree(Path(out_dir) / folder, ignore_errors=True)
    docs = _take_turns(sides, pipeline, arch, out_dir, rel, kernel, numerics=numerics)
    if numerics:
        try:
            attach_versus(executors[1], pipeline, toolchain, arch, out_dir, rel, saved, docs, commits[0])
        finally:
            shutil.rmtree(Path(out_dir) / rel / "outputs", ignore_errors=True)
    return docs


def attach_versus(executor, pipeline: Pipeline, toolchain: str, arch: str, out_dir: Path, rel: str,
                  saved: dict[str, str], docs: dict[str, dict], base_commit: str | None) -> None:
    """Compare the two sides' saved outputs (a payload run in the head's environment) and add each
    verdict to the head's result as `numerics.versus`; perf-head.json is written again."""
    versus_rel = f"{rel}/numerics-versus.json"
    result = executor.run(PayloadRun(module="numerics", args=("--base", saved["base"], "--head", saved["head"],
                                                                "--out", versus_rel),
                                     toolchain=pipeline.toolchains[toolchain].on(pipeline.archs[arch].platform),
                                     arch=pipeline.archs[arch], out_dir=out_dir, timeout_s=PAYLOAD_TIMEOUT_S,
                                     log_prefix="numerics base vs head"))
    path = Path(out_dir) / versus_rel
    if result.timed_out or result.error or not path.is_file():
        # The head's results keep no `versus`: the gate reports their numerics as unmeasured.
        why = "timed out" if result.timed_out else (result.error or f"exit {result.exit_code}, no {path.name}")
        print(f"mha-ci perf: comparing the outputs of base and head failed: {why}", file=sys.stderr)
        return
    versus = json.loads(path.read_text())
    for entry in docs["head"]["results"]:
        num = entry.get("numerics")
        if isinstance(num, dict) and entry["key"] in versus:
            num["versus"] = {"side": "base", "commit": base_commit, "outputs": versus[entry["key"]]}
    write_json(Path(out_dir) / rel / "perf-head.json", docs["head"])


def _take_turns(sides: list, pipeline: Pipeline, arch: str, out_dir: Path, rel: str, kernel: str,
                numerics: bool = True) -> dict[str, dict]:
    """Two payloads at once, roles a and b of one turn folder; sides are (name, executor,
    toolchain, out_name, extra_env, extra_args). The first failure stops the other side too."""
    folder = lockstep.prepare(Path(out_dir) / rel / "lockstep")
    with ThreadPoolExecutor(max_workers=2) as pool:
        # A planted slowdown is the change under test: it goes to the candidate (second) side only.
        futures = {name: pool.submit(run_payload, executor, pipeline, toolchain, arch, out_dir, rel,
                                     kernel=kernel, out_name=out_name, log_prefix=f"perf {name} ({role})",
                                     extra_args=("--lockstep", f"{rel}/lockstep:{role}", *more), extra_env=env,
                                     plant=i == 1, numerics=numerics)
                   for i, ((name, executor, toolchain, out_name, env, more), role)
                   in enumerate(zip(sides, lockstep.ROLES))}
        try:
            for future in as_completed(futures.values()):
                future.result()
            docs = {name: future.result() for name, future in futures.items()}
        except BaseException:
            # Ctrl-C or one side failing: both payloads quit at their next turn, then we re-raise.
            lockstep.stop(folder)
            raise
    for name, doc in docs.items():
        broken = ((doc.get("selection") or {}).get("interleave") or {}).get("broken")
        if broken:
            print(f"mha-ci perf: {name}: interleaving broke ({broken}); later shapes were measured alone",
                  file=sys.stderr)
    return docs


def refresh_measurers(executor, pipeline: Pipeline, out_dir: Path, rel_prefix: str):
    """(MeasureFn, RemeasureFn) for mha_ci.refresh: (Arch, Toolchain) -> the full set's perf
    document, and (Arch, Toolchain, keys, round) -> those shapes measured again in a new process,
    in their own folder beside the full run's."""
    def measure(arch, toolchain, rel: str, keys: list[str] | None, label: str) -> dict:
        write_inputs(pipeline, Path(out_dir) / rel, "full", keys)
        return run_payload(executor, pipeline, toolchain.name, arch.name, out_dir, rel,
                           log_prefix=f"refresh {arch.name} {toolchain.name}{label}", numerics=True)

    def measure_fn(arch, toolchain) -> dict:
        return measure(arch, toolchain, f"{rel_prefix}/{toolchain.name}", None, "")

    def remeasure_fn(arch, toolchain, keys: list[str], round_: int) -> dict:
        return measure(arch, toolchain, f"{rel_prefix}/{toolchain.name}/remeasure-{round_}", keys,
                       f" re-measure {round_} ({len(keys)} shapes)")
    return measure_fn, remeasure_fn
