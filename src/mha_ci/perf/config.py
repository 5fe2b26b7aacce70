"""Schema and loading of pipelines/perf.yaml and pipelines/workloads.yaml.

Both go through mha_ci.model.yaml_source, so a misspelt key is a ConfigError (exit 2) naming
file, line, key and the closest valid key. What the rest of mha_ci.perf works on are the plain
dataclasses `GatePolicy` and `Method` (standard library; the payload and the tests build them
without pydantic).
"""
from __future__ import annotations

from dataclasses import replace

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

from mha_ci.errors import ConfigError
from mha_ci.model.yaml_source import closest, load_validated
from mha_ci.perf.calibrate import Bars
from mha_ci.perf.compare import GatePolicy
from mha_ci.perf.stats import Method

PERF_FILE = "pipelines/perf.yaml"
WORKLOADS_FILE = "pipelines/workloads.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# perf.yaml ---------------------------------------------------------------------------------

class GateSpec(_Strict):
    floor_pct: float = Field(gt=0)
    k: float = Field(ge=0)
    invalid_noise_pct: float = Field(gt=0)
    stall_factor: float = Field(gt=1)
    stall_min_excess_us: float = Field(ge=0, default=0.0)
    fail_on_stall: bool = False
    fail_on_invalid: bool = False
    # A percentage of the compared shapes; at 100 the share could never fail the gate.
    max_invalid_pct: float = Field(ge=0, lt=100)


class RefreshSpec(_Strict):
    max_noise_pct: float = Field(gt=0)
    history_runs: int = Field(default=5, ge=1)
    remeasure_rounds: int = Field(default=2, ge=0)


class MeasureSpec(_Strict):
    warmup: int = Field(ge=1)
    dispatches: int = Field(ge=5)
    # A single rep has no spread: noise would read 0 % and the gate would trust it blindly.
    reps: int = Field(ge=2)
    trim_low_pct: float = Field(ge=0, lt=50)
    trim_high_pct: float = Field(ge=0, lt=50)
    max_seconds_per_shape: float = Field(gt=0)
    min_dispatches: int = Field(ge=5)
    l2_flush: bool = False
    seed: int = 0

    @model_validator(mode="after")
    def _consistent(self) -> "MeasureSpec":
        if self.min_dispatches > self.dispatches:
            raise ValueError(f"min_dispatches ({self.min_dispatches}) exceeds dispatches ({self.dispatches})")
        if self.trim_low_pct + self.trim_high_pct >= 90:
            raise ValueError("trim_low_pct + trim_high_pct must leave at least 10 % of the dispatches")
        return self


class CalibrationSpec(_Strict):
    max_false_regression_pct: float = Field(ge=0, le=100, default=Bars.max_false_regression_pct)
    min_planted_catch_pct: float = Field(ge=0, le=100, default=Bars.min_planted_catch_pct)


class SubsetSpec(_Strict):
    size: int = Field(ge=1)
    always: list[str] = []      # shape keys always in the pull-request subset


class AgainstSpec(_Strict):
    floor_pct: float = Field(gt=0)


class PerfFile(_Strict):
    gate: GateSpec
    refresh: RefreshSpec
    measure: MeasureSpec
    subset: SubsetSpec
    against: AgainstSpec
    calibration: CalibrationSpec = CalibrationSpec()


# workloads.yaml ----------------------------------------------------------------------------

Layout = Literal["dense", "varlen"]
# A window side is -1 (unbounded, as flash-attn) or a number of keys; Strict: `true` is not 1.
WindowSide = Annotated[int, Strict(), Field(ge=-1)]
Window = tuple[WindowSide, WindowSide]
# A size, sequence length or TP degree: 0 would divide by zero when the shapes are made.
Count = Annotated[int, Strict(), Field(ge=1)]
# The head dims the kernel package runs (mha.validation.MIN_HEAD_DIM/MAX_HEAD_DIM; that module
# imports torch, which the orchestrating side has not, so the bounds are repeated here and a
# test holds them equal).
HEAD_DIM_RANGE = (8, 256)
HeadDim = Annotated[int, Strict(), Field(ge=HEAD_DIM_RANGE[0], le=HEAD_DIM_RANGE[1])]


class ModelSpec(_Strict):
    name: str = Field(min_length=1)
    hq: Count
    hk: Count
    dqk: HeadDim
    dv: HeadDim
    sink: bool = False
    window: Window = (-1, -1)

    @model_validator(mode="after")
    def _gqa(self) -> "ModelSpec":
        if self.hq % self.hk:
            raise ValueError(f"hq ({self.hq}) must be a multiple of hk ({self.hk})")
        return self


class ModelShapesSpec(_Strict):
    batch: Count
    seqlen: Count
    causal: list[bool] = Field(min_length=1)
    layouts: list[Layout] = Field(min_length=1)


class CrossAttentionSpec(_Strict):
    sq: Count
    sk: Count


class BenchSpec(_Strict):
    token_budget: Count
    concurrent_sequences: Count
    layout: Layout = "dense"
    prefill_seqlens: list[Count] = Field(min_length=1)
    prefill_extra_windows: list[Window] = []
    cross_attention: CrossAttentionSpec | None = None
    decode_seqlens_k: list[Count] = []
    decode_causal: bool = True

    @model_validator(mode="after")
    def _divides(self) -> "BenchSpec":
        for s in self.prefill_seqlens + ([self.cross_attention.sq] if self.cross_attention else []):
            if self.token_budget % s:
                raise ValueError(f"token_budget {self.token_budget} is not a multiple of sequence length {s}")
        return self


class TestShapeSpec(_Strict):
    layouts: list[Layout] = Field(min_length=1)
    batch: Count
    hq: Count
    hk: Count
    sq: Count
    sk: Count
    dqk: HeadDim
    dv: HeadDim
    causal: bool
    window: Window = (-1, -1)
    sink: bool = False
    dropout_p: float = Field(ge=0, lt=1, default=0.0)


class BackwardSpec(_Strict):
    # Source tags (mha_ci.perf.workloads.SOURCES) whose non-decode shapes also time the backward.
    sources: list[Literal["model_shapes", "bench", "test"]] = Field(min_length=1)


class WorkloadsFile(_Strict):
    # `model_shapes` is the source tag of docs/workloads.md; pydantic reserves "model_" by default.
    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    dtype: Literal["bf16", "fp16", "fp32"] = "bf16"
    tensor_parallel: list[Count] = Field(min_length=1)
    models: list[ModelSpec] = Field(min_length=1)
    model_shapes: ModelShapesSpec
    bench: BenchSpec
    test_shapes: list[TestShapeSpec] = []
    backward: BackwardSpec | None = None


# loading -----------------------------------------------------------------------------------

def load_perf_file(root: Path) -> PerfFile:
    return load_validated(PerfFile, Path(root) / PERF_FILE)


def load_workloads_file(root: Path) -> WorkloadsFile:
    return load_validated(WorkloadsFile, Path(root) / WORKLOADS_FILE)


def gate_policy(spec: PerfFile) -> GatePolicy:
    g = spec.gate
    return GatePolicy(floor_pct=g.floor_pct, k=g.k, invalid_noise_pct=g.invalid_noise_pct,
                      stall_factor=g.stall_factor, stall_min_excess_us=g.stall_min_excess_us,
                      fail_on_stall=g.fail_on_stall, fail_on_invalid=g.fail_on_invalid,
                      max_invalid_pct=g.max_invalid_pct)


def against_policy(spec: PerfFile) -> GatePolicy:
    """The gate of `perf measure --against`: perf.yaml's, with the floor of its `against` section."""
    return replace(gate_policy(spec), floor_pct=spec.against.floor_pct)


def calibration_bars(spec: PerfFile) -> Bars:
    c = spec.calibration
    return Bars(max_false_regression_pct=c.max_false_regression_pct, min_planted_catch_pct=c.min_planted_catch_pct)


def method(spec: PerfFile) -> Method:
    m = spec.measure
    return Method(warmup=m.warmup, dispatches=m.dispatches, reps=m.reps, trim_low_pct=m.trim_low_pct,
                  trim_high_pct=m.trim_high_pct, max_seconds_per_shape=m.max_seconds_per_shape,
                  min_dispatches=m.min_dispatches, l2_flush=m.l2_flush, seed=m.seed,
                  stall_factor=spec.gate.stall_factor, stall_min_excess_us=spec.gate.stall_min_excess_us)


def validate_perf_files(root: Path) -> tuple[PerfFile, WorkloadsFile]:
    """Validate both files and their cross-references (subset.always must name real shapes).

    Raises ConfigError (exit 2) on the first problem; the pipeline validator calls this.
    """
    from mha_ci.perf.workloads import generate

    perf = load_perf_file(root)
    workloads = load_workloads_file(root)
    keys = {w.key for w in generate(workloads)}
    for i, key in enumerate(perf.subset.always):
        if key not in keys:
            raise ConfigError(f"subset / always / {i}: '{key}' is not a workload shape key",
                              file=str(Path(root) / PERF_FILE), line=_line_of_always(root, i),
                              key="always", suggestion=closest(key, keys))
    return perf, workloads


def _line_of_always(root: Path, index: int) -> int | None:
    from mha_ci.model.yaml_source import line_of, load_yaml

    return line_of(load_yaml(Path(root) / PERF_FILE), ("subset", "always", index))


def _validate_file(path: Path, root: Path) -> None:
    # Either file is checked together with the other: perf.yaml's subset names workload keys.
    validate_perf_files(root)


def _register() -> None:
    from mha_ci.model import loader

    for filename in (Path(PERF_FILE).name, Path(WORKLOADS_FILE).name):
        loader.register_file_validator(filename, _validate_file)


_register()
