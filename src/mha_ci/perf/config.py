"""pipelines/perf.yaml as the plain dataclasses the gate and the payload work on.

The file is loaded and checked with the other pipeline files (model.loader, schema in
model.perf_schema) into `Pipeline.perf`; these functions turn that spec into `GatePolicy`,
`Method` and `Bars` (standard library: the payload and the tests build them without pydantic).
"""
from __future__ import annotations

from dataclasses import replace

from mha_ci.model.perf_schema import PerfFile
from mha_ci.perf.calibrate import Bars
from mha_ci.perf.compare import GatePolicy
from mha_ci.perf.stats import Method


def gate_policy(spec: PerfFile) -> GatePolicy:
    """The gate against a stored baseline: numerics are judged where the candidate has them."""
    g, n = spec.gate, spec.numerics
    return GatePolicy(floor_pct=g.floor_pct, k=g.k, invalid_noise_pct=g.invalid_noise_pct,
                      stall_factor=g.stall_factor, stall_min_excess_us=g.stall_min_excess_us,
                      fail_on_stall=g.fail_on_stall, fail_on_invalid=g.fail_on_invalid,
                      max_invalid_pct=g.max_invalid_pct,
                      less_accurate_factor=n.less_accurate_factor, error_floor=n.error_floor,
                      require_numerics=False, may_be_unordered=tuple(sorted(n.may_be_unordered)))


def against_policy(gate: GatePolicy, spec: PerfFile) -> GatePolicy:
    """The gate of `perf measure --against`: `gate` (perf.yaml's), with the floor of its `against`
    section; both sides ran the payload that measures numerics, so a shape without them fails."""
    return replace(gate, floor_pct=spec.against.floor_pct, require_numerics=True)


def calibration_bars(spec: PerfFile) -> Bars:
    c = spec.calibration
    return Bars(**{name: value for name, value in (("max_false_regression_pct", c.max_false_regression_pct),
                                                    ("min_planted_catch_pct", c.min_planted_catch_pct))
                   if value is not None})


def method(spec: PerfFile, gate: GatePolicy) -> Method:
    """How each shape is timed. Its stall rule is the gate's (`gate`, built from the same spec):
    the payload flags exactly the stalls the gate and the refresh judge."""
    m = spec.measure
    return Method(warmup=m.warmup, dispatches=m.dispatches, reps=m.reps, trim_low_pct=m.trim_low_pct,
                  trim_high_pct=m.trim_high_pct, max_seconds_per_shape=m.max_seconds_per_shape,
                  min_dispatches=m.min_dispatches, l2_flush=m.l2_flush, seed=m.seed, relayout=m.relayout,
                  stall_factor=gate.stall_factor, stall_min_excess_us=gate.stall_min_excess_us)
