"""What a perf measurement is asked to do: one frozen PerfRequest, made by `perf_request` from
the Pipeline and a command's or job's options.

`mha-ci perf measure`, `perf refresh`, `perf bisect`, `tune` and the perf and refresh jobs build
it the same way, and the measuring steps (mha_ci.perf.measure), the refresh and the GPU steps of
bisect and tune read their settings from it and nowhere else. The checks a measurement needs
(arch, toolchains, subset, repeat, kernel) happen here, once, before anything runs; the gate
(GatePolicy) and the method (Method) are built here, once, from pipelines/perf.yaml.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mha_ci.errors import ConfigError
from mha_ci.executors.base import Executor
from mha_ci.model.pipeline import Pipeline
from mha_ci.model.yaml_source import closest
from mha_ci.perf.compare import GatePolicy
from mha_ci.perf.config import against_policy, gate_policy, method
from mha_ci.perf.document import check_subset
from mha_ci.perf.stats import Method
from mha_ci.perf.workloads import Workload, filter_keys, generate, select_subset

KERNELS = ("mha", "sdpa")


@dataclass(frozen=True)
class PerfRequest:
    pipeline: Pipeline
    arch: str
    toolchains: tuple[str, ...]      # the measured toolchain first; --interleave's second
    subset: str                      # "pr" | "full"
    keys: tuple[str, ...]            # fnmatch patterns within the subset; empty: all of it
    kernel: str                      # "mha", or "sdpa" (the harness's sanity kernel)
    repeat: int                      # payload processes per measurement, combined
    numerics: bool                   # asked for; recorded where numerics_apply says so
    out_dir: Path                    # the folder the executor resolves payload paths against
    # Runs the payloads; None where nothing is measured here (documents measured elsewhere) or
    # where each side has its own (bisect: one per checked-out commit).
    executor: Executor | None
    gate: GatePolicy                 # the gate against a stored baseline
    method: Method                   # how each shape is timed (method.json)

    @property
    def toolchain(self) -> str:
        return self.toolchains[0]

    @property
    def against_gate(self) -> GatePolicy:
        """The gate of a same-GPU A/B (`--against`, `--perf-against`, bisect steps)."""
        return against_policy(self.gate, self.pipeline.perf)

    @property
    def records_numerics(self) -> bool:
        """Whether a measurement records numerics: asked for, the mha kernel, on a GPU. SDPA is the
        harness's sanity kernel, and a CPU arch runs the interpreter, whose float64 reference of a
        prefill shape would take longer than its timing."""
        return self.numerics and numerics_apply(self.pipeline, self.arch, self.kernel)

    def workloads(self) -> list[Workload]:
        """The shapes measured: the subset, narrowed by `keys`."""
        return selected_workloads(self.pipeline, self.subset, list(self.keys))

    @property
    def selection(self) -> str:
        """The subset name shapes.json records: "custom" for a key-narrowed selection."""
        return "custom" if self.keys else self.subset


def selected_workloads(pipeline: Pipeline, subset: str, keys: list[str] | None = None) -> list[Workload]:
    """The workloads of a subset ("pr" or "full", checked by the caller: perf_request or the
    option's choices), optionally narrowed to the keys matching `keys`."""
    workloads = generate(pipeline.workloads)
    if subset == "pr":
        workloads = select_subset(workloads, pipeline.perf.subset.size, pipeline.perf.subset.always)
    if keys:
        workloads = filter_keys(workloads, keys)
        if not workloads:
            raise ConfigError(f"no workload shape matches {', '.join(keys)}", key="--shape")
    return workloads


def numerics_apply(pipeline: Pipeline, arch: str, kernel: str) -> bool:
    return kernel == "mha" and arch in pipeline.archs and pipeline.archs[arch].compile_target is not None


def perf_request(pipeline: Pipeline, *, arch: str, toolchains: tuple[str, ...] | list[str], out_dir: Path,
                 executor: Executor | None, subset: str = "full", subset_key: str = "--subset",
                 keys: tuple[str, ...] | list[str] | None = None, kernel: str = "mha", repeat: int = 1,
                 numerics: bool = True) -> PerfRequest:
    """The one resolver: every option checked (a ConfigError naming the option, exit 2), the gate
    and the method built. `subset_key` names where the subset came from (an option or variable)."""
    if arch not in pipeline.archs:
        raise ConfigError(f"unknown arch '{arch}'; known: {', '.join(pipeline.archs)}", key="--arch",
                          suggestion=closest(arch, pipeline.archs))
    if not toolchains:
        raise ConfigError("no toolchain to measure", key="--toolchain")
    for name in toolchains:
        if name not in pipeline.toolchains:
            raise ConfigError(f"unknown toolchain '{name}'; known: {', '.join(pipeline.toolchains)}",
                              key="--toolchain", suggestion=closest(name, pipeline.toolchains))
    check_subset(subset, subset_key)
    if kernel not in KERNELS:
        raise ConfigError(f"unknown kernel '{kernel}'; known: {', '.join(KERNELS)}", key="--kernel")
    if repeat < 1:
        raise ConfigError("--repeat must be at least 1", key="--repeat")
    gate = gate_policy(pipeline.perf)
    return PerfRequest(pipeline=pipeline, arch=arch, toolchains=tuple(toolchains), subset=subset,
                       keys=tuple(keys or ()), kernel=kernel, repeat=repeat, numerics=numerics,
                       out_dir=Path(out_dir), executor=executor, gate=gate, method=method(pipeline.perf, gate))
