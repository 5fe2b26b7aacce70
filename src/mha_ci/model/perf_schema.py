"""Schema of pipelines/perf.yaml (the perf method and gate) and pipelines/workloads.yaml (the
workload shapes): pydantic models, loaded with the other pipeline files by model.loader into
`Pipeline.perf` and `Pipeline.workloads`. mha_ci.perf.config turns them into the plain
dataclasses the gate and the payload work on (GatePolicy, Method, Bars).
"""
from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

PERF_FILE = "perf.yaml"
WORKLOADS_FILE = "workloads.yaml"

# Strict: YAML's `"3"` or `"yes"` is a typo or a trick, never a setting; an integer is still a
# number. Not a number or infinite (`.nan`, `.inf`) is refused for every float (allow_inf_nan).
Number = Annotated[float, Strict()]
Whole = Annotated[int, Strict()]
Flag = Annotated[bool, Strict()]
# The widest threshold the gate may judge a shape with, in percent: max(floor_pct, k x the noise
# of both sides at invalid_noise_pct). Above it a kernel a quarter slower reads "ok": the gate
# switched off, not tuned. perf.yaml's settings give 14.1 %.
MAX_THRESHOLD_PCT = 25.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# perf.yaml ---------------------------------------------------------------------------------

class GateSpec(_Strict):
    floor_pct: Number = Field(gt=0, le=MAX_THRESHOLD_PCT)
    k: Number = Field(ge=0)
    invalid_noise_pct: Number = Field(gt=0)
    stall_factor: Number = Field(gt=1, le=100)
    # A second: no dispatch of the workloads takes that long, so a larger floor hides every stall.
    stall_min_excess_us: Number = Field(ge=0, le=1e6, default=0.0)
    fail_on_stall: Flag = False
    fail_on_invalid: Flag = False
    # A percentage of the compared shapes; a gate blind to more than half of them cannot hold any
    # catch rate.
    max_invalid_pct: Number = Field(ge=0, le=50)

    @model_validator(mode="after")
    def _bounded_threshold(self) -> "GateSpec":
        widest = max(self.floor_pct, self.k * math.hypot(self.invalid_noise_pct, self.invalid_noise_pct))
        if widest > MAX_THRESHOLD_PCT:
            raise ValueError(f"the widest threshold a shape can be judged with, max(floor_pct, k x sqrt(2) x "
                             f"invalid_noise_pct) = {widest:.1f} %, is above {MAX_THRESHOLD_PCT:g} %: a shape "
                             "that much slower would read ok")
        return self


class RefreshSpec(_Strict):
    max_noise_pct: Number = Field(gt=0, le=MAX_THRESHOLD_PCT)
    history_runs: Whole = Field(default=5, ge=1)
    remeasure_rounds: Whole = Field(default=2, ge=0)


class MeasureSpec(_Strict):
    warmup: Whole = Field(ge=1)
    dispatches: Whole = Field(ge=5)
    # A single rep has no spread: noise would read 0 % and the gate would trust it blindly.
    reps: Whole = Field(ge=2)
    trim_low_pct: Number = Field(ge=0, lt=50)
    trim_high_pct: Number = Field(ge=0, lt=50)
    max_seconds_per_shape: Number = Field(gt=0)
    min_dispatches: Whole = Field(ge=5)
    l2_flush: Flag = False
    seed: Whole = 0
    relayout: Flag = False

    @model_validator(mode="after")
    def _consistent(self) -> "MeasureSpec":
        if self.min_dispatches > self.dispatches:
            raise ValueError(f"min_dispatches ({self.min_dispatches}) exceeds dispatches ({self.dispatches})")
        if self.trim_low_pct + self.trim_high_pct >= 90:
            raise ValueError("trim_low_pct + trim_high_pct must leave at least 10 % of the dispatches")
        return self


class CalibrationSpec(_Strict):
    # Unset: the bar of mha_ci.perf.calibrate.Bars (its one home).
    max_false_regression_pct: Number | None = Field(ge=0, le=100, default=None)
    min_planted_catch_pct: Number | None = Field(ge=0, le=100, default=None)


class SubsetSpec(_Strict):
    size: Whole = Field(ge=1)
    always: list[str] = []      # shape keys always in the pull-request subset


class AgainstSpec(_Strict):
    floor_pct: Number = Field(gt=0, le=MAX_THRESHOLD_PCT)
    # Fresh process pairs per A/B, the reps split between them (mha_ci.perf.rounds); each round
    # needs two reps of its own for a spread.
    rounds: Whole = Field(ge=1, le=6, default=1)


class NumericsSpec(_Strict):
    # How much larger a head's rms_rel error may be than the base's before the shape is "less
    # accurate" (mha_ci.perf.numerics). At 1 every reordering of a sum would fail; above 10 an
    # order of magnitude of precision could go unseen.
    less_accurate_factor: Number = Field(gt=1, le=10)
    # The smallest rms_rel a ratio is taken of, so an exact output divides by something; from
    # 1e-2 up it would hide the whole error of a bf16 result.
    error_floor: Number = Field(gt=0, lt=1e-2)
    # Outputs the gate lets differ from run to run on the same code when the kernel package
    # declares them added up in no fixed order (mha.launch.UNORDERED_OUTPUTS). The allowance is
    # the gate's, read from the judging checkout (--gate-from), not the declaration's: code under
    # test that declared more would only exempt what this list allows.
    may_be_unordered: list[Literal["out", "lse", "dq", "dk", "dv", "dsink"]] = Field(default_factory=list)


class PerfFile(_Strict):
    gate: GateSpec
    refresh: RefreshSpec
    measure: MeasureSpec
    subset: SubsetSpec
    against: AgainstSpec
    numerics: NumericsSpec
    calibration: CalibrationSpec = CalibrationSpec()

    @model_validator(mode="after")
    def _rounds_split_the_reps(self) -> "PerfFile":
        rounds, reps = self.against.rounds, self.measure.reps
        if reps % rounds or reps // rounds < 2:
            raise ValueError(f"against.rounds {rounds} must split measure.reps {reps} into rounds of at least 2 reps")
        return self


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
    sink: Flag = False
    window: Window = (-1, -1)

    @model_validator(mode="after")
    def _gqa(self) -> "ModelSpec":
        if self.hq % self.hk:
            raise ValueError(f"hq ({self.hq}) must be a multiple of hk ({self.hk})")
        return self


class ModelShapesSpec(_Strict):
    batch: Count
    seqlen: Count
    causal: list[Flag] = Field(min_length=1)
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
    decode_causal: Flag = True

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
    causal: Flag
    window: Window = (-1, -1)
    sink: Flag = False
    dropout_p: Number = Field(ge=0, lt=1, default=0.0)


class BackwardSpec(_Strict):
    # Source tags (mha_ci.perf.workloads.SOURCES) whose non-decode shapes also time the backward.
    sources: list[Literal["model_shapes", "bench", "test"]] = Field(min_length=1)


class WorkloadsFile(_Strict):
    # `model_shapes` is the source tag of docs/workloads.md; pydantic reserves "model_" by default.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, protected_namespaces=())

    dtype: Literal["bf16", "fp16", "fp32"] = "bf16"
    tensor_parallel: list[Count] = Field(min_length=1)
    models: list[ModelSpec] = Field(min_length=1)
    model_shapes: ModelShapesSpec
    bench: BenchSpec
    test_shapes: list[TestShapeSpec] = []
    backward: BackwardSpec | None = None
