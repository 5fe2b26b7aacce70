"""Schema of pipelines/perf.yaml (the perf method and gate) and pipelines/workloads.yaml (the
workload shapes): pydantic models, loaded with the other pipeline files by model.loader into
`Pipeline.perf` and `Pipeline.workloads`. mha_ci.perf.config turns them into the plain
dataclasses the gate and the payload work on (GatePolicy, Method, Bars).
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

PERF_FILE = "perf.yaml"
WORKLOADS_FILE = "workloads.yaml"


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
    # Unset: the bar of mha_ci.perf.calibrate.Bars (its one home).
    max_false_regression_pct: float | None = Field(ge=0, le=100, default=None)
    min_planted_catch_pct: float | None = Field(ge=0, le=100, default=None)


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
