"""The measuring steps `mha-ci perf`, the perf job and the refresh job share.

Measuring = write shapes.json and method.json into the run's out folder (`write_inputs`, which
returns the PayloadInputs every run of the payload takes), run the payload
(`python -m mha_ci.payloads.perf`) through the executor, read back the mha-ci.perf/1 document.
What is measured, where and how comes from one PerfRequest (mha_ci.perf.request).
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from mha_ci.errors import ConfigError, EnvironmentProblem, ExitCode
from mha_ci.executors.base import Executor, PayloadRun
from mha_ci.perf import lockstep
from mha_ci.perf.combine import combine
from mha_ci.perf.document import load_perf, merge_perf, write_json
from mha_ci.perf.request import PerfRequest
from mha_ci.perf.rounds import pool, round_method
from mha_ci.perf.stats import Method
from mha_ci.perf.workloads import Workload, shapes_document

# The full set is sized for ~10 minutes on an H200 (perf.yaml `measure`); the timeout leaves
# room for a slow first compile of every kernel variant.
PAYLOAD_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class PayloadInputs:
    """shapes.json and method.json of one measurement folder, out_dir/rel. Only write_inputs
    makes one, and every run of the payload takes one: no payload runs on inputs not written."""
    rel: str
    count: int


@dataclass(frozen=True)
class PayloadCall:
    """One payload process of a measurement: what it measures and where its document goes."""
    toolchain: str
    out_name: str = "perf.json"
    log_prefix: str = "perf"
    chunk: str | None = None                              # "I/N": one strided chunk of the shapes
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    plant: bool = True                     # pass a planted slowdown (MHA_PERF_PLANT_*) on to it
    executor: Executor | None = None       # another checkout's (a base kernel); default the request's
    precompile: bool = True                # on a GPU, compile the shapes' kernels on several processes first
    together: int = 1                      # payloads started at once (an A/B's two sides) sharing the CPUs


def write_input_files(folder: Path, workloads: list[Workload], selection: str, meth: Method) -> tuple[Path, Path]:
    """shapes.json and method.json in `folder` (also what `mha-ci perf shapes --out` writes)."""
    shapes = write_json(Path(folder) / "shapes.json", shapes_document(workloads, selection))
    return shapes, write_json(Path(folder) / "method.json", meth.to_dict())


def write_inputs(request: PerfRequest, rel: str) -> PayloadInputs:
    """The request's shapes and method, written into out_dir/rel for the payload."""
    workloads = request.workloads()
    write_input_files(request.out_dir / rel, workloads, request.selection, request.method)
    return PayloadInputs(rel=rel, count=len(workloads))


# Precompile processes per GPU payload: more stop paying, as each imports torch and starts a
# device context.
MAX_PRECOMPILE_WORKERS = 8


def precompile_workers(sides: int, cpus: int | None = None) -> int:
    """Processes each GPU payload compiles its shapes' kernels on before timing them
    (mha_ci.payloads.perf_precompile): this machine's CPUs shared by the payloads that start
    together; MHA_CI_PRECOMPILE_WORKERS sets it (0: compile while timing, one shape at a time)."""
    forced = os.environ.get("MHA_CI_PRECOMPILE_WORKERS")
    if forced is not None:
        try:
            return max(0, int(forced))
        except ValueError:
            raise ConfigError(f"MHA_CI_PRECOMPILE_WORKERS={forced!r}: expected a whole number") from None
    return max(1, min(MAX_PRECOMPILE_WORKERS, (cpus or os.cpu_count() or 1) // max(1, sides)))


def run_payload(request: PerfRequest, inputs: PayloadInputs, call: PayloadCall) -> dict:
    """Run the payload on the inputs' shapes.json and method.json; returns the perf document,
    written to out_dir/rel/<call.out_name>. Numerics are asked for where the request records them."""
    rel, arch = inputs.rel, request.pipeline.archs[request.arch]
    executor = call.executor or request.executor
    if executor is None:
        raise ValueError("run_payload needs an executor: the request's or the call's")
    args = ["--shapes", f"{rel}/shapes.json", "--method", f"{rel}/method.json", "--out", f"{rel}/{call.out_name}",
            "--kernel", request.kernel, "--toolchain", call.toolchain, "--arch", request.arch,
            "--executor", executor.name,
            "--dump-dispatches", f"{rel}/{call.out_name.replace('.json', '')}.dispatches.json"]
    if call.chunk:
        args += ["--chunk", call.chunk]
    args += list(call.extra_args)
    if request.records_numerics:
        args += ["--numerics"]
    if arch.compile_target is None:
        args += ["--device", "cpu"]
    elif call.precompile:
        args += ["--precompile-workers", str(precompile_workers(sides=call.together))]
    names = ("MHA_PERF_PLANT_SLOWDOWN", "MHA_PERF_PLANT_KEYS", "MHA_CI_COMMIT") if call.plant else ("MHA_CI_COMMIT",)
    env = {k: os.environ[k] for k in names if k in os.environ}
    env.update(call.extra_env)
    result = executor.run(PayloadRun(module="perf", args=tuple(args),
                                     toolchain=request.pipeline.toolchains[call.toolchain].on(arch.platform),
                                     arch=arch, out_dir=request.out_dir, env=env,
                                     timeout_s=PAYLOAD_TIMEOUT_S, log_prefix=call.log_prefix))
    out = request.out_dir / rel / call.out_name
    where = f"{call.toolchain}, {request.arch}"
    if result.exit_code == ExitCode.ENVIRONMENT_ERROR:
        raise EnvironmentProblem(f"perf payload ({where}): environment problem; see its log")
    if result.timed_out or result.error or not out.is_file():
        why = "timed out" if result.timed_out else (result.error or f"exit {result.exit_code}, no {out.name}")
        raise EnvironmentProblem(f"perf payload ({where}) produced no result: {why}")
    doc = load_perf(out)
    if result.provenance.get("image_digest") and not doc["provenance"].get("image_digest"):
        doc["provenance"]["image_digest"] = result.provenance["image_digest"]
        write_json(out, doc)
    return doc


def measure_repeated(request: PerfRequest, inputs: PayloadInputs, log_prefix: str = "perf") -> dict:
    """The payload request.repeat times, each its own process, combined (mha_ci.perf.combine) into
    out_dir/rel/perf.json: per shape the median run and the spread between runs. Some shapes move
    by several per cent from one process to the next while their within-run noise stays far
    smaller (docs/perf-method.md): one process can land on either side."""
    repeat = request.repeat
    if repeat == 1:
        return run_payload(request, inputs, PayloadCall(request.toolchain, log_prefix=log_prefix))
    runs = [run_payload(request, inputs, PayloadCall(request.toolchain, out_name=f"perf-run{i}.json",
                                                     log_prefix=f"{log_prefix} run {i}/{repeat}"))
            for i in range(1, repeat + 1)]
    doc = combine(runs, names=[f"run {i}" for i in range(1, repeat + 1)], max_noise_pct=request.gate.invalid_noise_pct,
                  may_be_unordered=frozenset(request.gate.may_be_unordered))
    write_json(request.out_dir / inputs.rel / "perf.json", doc)
    return doc


def interleave_order(chunks: int, a: str, b: str) -> list[tuple[int, str]]:
    """ABBA order over chunks: (1, a), (1, b), (2, b), (2, a), (3, a), (3, b), ..."""
    order = []
    for i in range(1, chunks + 1):
        pair = (a, b) if i % 2 else (b, a)
        order += [(i, pair[0]), (i, pair[1])]
    return order


def measure_interleaved(request: PerfRequest, inputs: PayloadInputs, chunks: int) -> dict[str, dict]:
    """The request's two toolchains in `chunks` strided chunks, ABBA order; {toolchain: merged document}."""
    # Chunk documents are merged: the chunked method records no numerics.
    request = replace(request, numerics=False)
    parts: dict[str, list[dict]] = {t: [] for t in request.toolchains}
    for index, toolchain in interleave_order(chunks, *request.toolchains):
        parts[toolchain].append(run_payload(request, inputs, PayloadCall(
            toolchain, chunk=f"{index}/{chunks}", out_name=f"perf-{toolchain}-chunk{index}of{chunks}.json",
            log_prefix=f"perf {toolchain} {index}/{chunks}")))
    merged = {}
    for toolchain, docs in parts.items():
        merged[toolchain] = merge_perf(docs)
        write_json(request.out_dir / inputs.rel / f"perf-{toolchain}.json", merged[toolchain])
    return merged


def measure_lockstep(request: PerfRequest, inputs: PayloadInputs) -> dict[str, dict]:
    """The request's two toolchains' payloads at once, taking turns per shape; {toolchain: perf document}."""
    first, second = request.toolchains
    if first == second:
        raise ConfigError("--interleave needs a second toolchain, not the same one twice", key="--interleave")
    return _take_turns(request, inputs, [(t, PayloadCall(t, out_name=f"perf-{t}.json")) for t in (first, second)])


def measure_against(request: PerfRequest, inputs: PayloadInputs, executors: tuple[Executor, Executor],
                    commits: tuple[str, str | None]) -> dict[str, dict]:
    """The base commit's kernel and the working tree's, the request's toolchain, taking turns per
    shape on one device (mha_ci.perf.base_checkout says why); {"base": doc, "head": doc}.
    `executors` and `commits` are (base, head; None: not known); the base executor's root is the
    folder base_checkout wrote. With numerics, each head result also says how its outputs compare
    with the base's, bit by bit. perf.yaml's `against.rounds` > 1 runs that many process pairs,
    the reps split between them, and pools each side (mha_ci.perf.rounds)."""
    numerics = request.records_numerics
    rel = inputs.rel
    saved = {name: f"{rel}/outputs/{name}" for name in ("base", "head")}

    def sides(keep_outputs: bool) -> list[tuple[str, PayloadCall]]:
        return [(name, PayloadCall(request.toolchain, out_name=f"perf-{name}.json", executor=ex,
                                   extra_env={"MHA_CI_COMMIT": commit} if commit else {},
                                   extra_args=("--save-outputs", saved[name]) if keep_outputs else ()))
                for name, ex, commit in zip(("base", "head"), executors, commits)]

    for folder in saved.values():
        shutil.rmtree(request.out_dir / folder, ignore_errors=True)
    rounds = request.pipeline.perf.against.rounds
    if rounds == 1:
        docs = _take_turns(request, inputs, sides(numerics))
    else:
        docs = _measure_rounds(request, inputs, rounds, sides)
    if numerics:
        try:
            attach_versus(request, inputs, executors[1], saved, docs, commits[0])
        finally:
            shutil.rmtree(request.out_dir / rel / "outputs", ignore_errors=True)
    return docs


def _measure_rounds(request: PerfRequest, inputs: PayloadInputs, rounds: int, sides) -> dict[str, dict]:
    """`rounds` lockstep pairs in out_dir/rel/round<i>, the first side alternating, each side's
    rounds pooled into out_dir/rel/perf-<side>.json; numerics from the first round only."""
    per_round = replace(request, method=round_method(request.method, rounds))
    runs: dict[str, list[dict]] = {"base": [], "head": []}
    dumps: dict[str, list[dict]] = {"base": [], "head": []}
    for i in range(1, rounds + 1):
        this = per_round if i == 1 else replace(per_round, numerics=False)
        round_inputs = write_inputs(this, f"{inputs.rel}/round{i}")
        print(f"mha-ci perf: round {i}/{rounds} ({'base' if i % 2 else 'head'} first)", file=sys.stderr)
        # Later rounds find the first round's kernels in Triton's cache: starting the precompile
        # workers again would cost their start-up (importing torch, a device context) for nothing.
        calls = [(name, replace(call, precompile=i == 1)) for name, call in sides(this.records_numerics)]
        docs = _take_turns(this, round_inputs, calls, swap=i % 2 == 0)
        for name, doc in docs.items():
            runs[name].append(doc)
            dumps[name].append(json.loads((request.out_dir / round_inputs.rel / f"perf-{name}.dispatches.json")
                                          .read_text()))
    pooled = {}
    for name in ("base", "head"):
        pooled[name] = pool(runs[name], dumps[name], request.method)
        write_json(request.out_dir / inputs.rel / f"perf-{name}.json", pooled[name])
    return pooled


def attach_versus(request: PerfRequest, inputs: PayloadInputs, executor: Executor, saved: dict[str, str],
                  docs: dict[str, dict], base_commit: str | None) -> None:
    """Compare the two sides' saved outputs (a payload run in the head's environment) and add each
    verdict to the head's result as `numerics.versus`; perf-head.json is written again."""
    versus_rel = f"{inputs.rel}/numerics-versus.json"
    arch = request.pipeline.archs[request.arch]
    result = executor.run(PayloadRun(module="numerics", args=("--base", saved["base"], "--head", saved["head"],
                                                                "--out", versus_rel),
                                     toolchain=request.pipeline.toolchains[request.toolchain].on(arch.platform),
                                     arch=arch, out_dir=request.out_dir, timeout_s=PAYLOAD_TIMEOUT_S,
                                     log_prefix="numerics base vs head"))
    path = request.out_dir / versus_rel
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
    write_json(request.out_dir / inputs.rel / "perf-head.json", docs["head"])


def _take_turns(request: PerfRequest, inputs: PayloadInputs, sides: list[tuple[str, PayloadCall]],
                swap: bool = False) -> dict[str, dict]:
    """Two payloads at once, roles a and b of one turn folder; sides are (name, call), the second
    the candidate; `swap` gives the candidate role a (it goes first). The first failure stops the
    other side too."""
    rel = inputs.rel
    folder = lockstep.prepare(request.out_dir / rel / "lockstep")
    roles = tuple(reversed(lockstep.ROLES)) if swap else lockstep.ROLES
    with ThreadPoolExecutor(max_workers=2) as threads:
        # A planted slowdown is the change under test: it goes to the candidate (second) side only.
        futures = {name: threads.submit(run_payload, request, inputs,
                                        replace(call, log_prefix=f"perf {name} ({role})", plant=i == 1, together=2,
                                                extra_args=("--lockstep", f"{rel}/lockstep:{role}", *call.extra_args)))
                   for i, ((name, call), role) in enumerate(zip(sides, roles))}
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
