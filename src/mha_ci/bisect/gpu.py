"""One search step on the GPU: a build's kernel against good's, taking turns shape by shape on one
device (mha_ci.perf.measure.measure_against, the method of `perf measure --against`), judged by
`against_policy` (perf.yaml's gate with its `against` floor) on the bisected shapes only.

A step regressed when any bisected shape is a regression. Without one, a step with a bisected shape
the gate could not judge (a measurement missing, failed or too noisy, two documents that must not
be compared) is no verdict: StepUnjudged, and nothing is stored for it.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from mha_ci.bisect.search import Step
from mha_ci.files import write_atomic
from mha_ci.perf.base_checkout import materialise
from mha_ci.perf.compare import compare
from mha_ci.perf.measure import measure_against, write_inputs
from mha_ci.perf.request import PerfRequest

Measurer = Callable[[str], Step]      # a build's first commit -> its step against good


class StepUnjudged(Exception):
    """The comparison of one step gave no verdict."""


def step_of(commit: str, comparison, keys: list[str], seconds: float) -> Step:
    """The Step of a comparison (base: good, candidate: the build), or StepUnjudged."""
    verdicts = [v for v in comparison.shapes if v.key in set(keys)]
    shapes = {v.key: {"delta_pct": _round(v.delta_pct), "threshold_pct": _round(v.threshold_pct),
                      "status": v.status, "good_us": _round(v.baseline_us), "build_us": _round(v.candidate_us),
                      "reason": v.reason} for v in verdicts}
    if any(v.status == "regression" for v in verdicts):
        return Step(commit, True, shapes, round(seconds, 1))
    # Shapes outside the bisect do not count; any bisected shape the gate could not judge might
    # be the one that moved, so without a regression elsewhere there is no verdict.
    invalid = [f"{v.key}: {v.reason}" for v in verdicts if v.status == "invalid"]
    if comparison.refused or invalid or not verdicts:
        why = comparison.refused or "; ".join(invalid) or "none of the bisected shapes was measured"
        raise StepUnjudged(f"the step of {commit[:12]} could not be judged: {why}")
    return Step(commit, False, shapes, round(seconds, 1))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def measurer(request: PerfRequest, good: str, make_executor) -> Measurer:
    """The real Measurer: both sides materialised under OUT/checkouts (the working tree's harness,
    each commit's kernel package), measured into OUT/gpu/<commit> (OUT: request.out_dir; the
    request's keys are the bisected shapes). `make_executor(root)` gives the executor for a
    checkout folder."""
    root, out, keys = Path(request.pipeline.root), request.out_dir, list(request.keys)

    def measure(commit: str) -> Step:
        inputs = write_inputs(request, f"gpu/{commit[:12]}")
        sides = []
        for sha in (good, commit):
            checkout = out / "checkouts" / sha[:12]
            materialise(root, sha, checkout)
            sides.append(make_executor(checkout))
        started = time.monotonic()
        docs = measure_against(request, inputs, (sides[0], sides[1]), (good, commit))
        seconds = time.monotonic() - started
        comparison = compare(docs["base"], docs["head"], request.against_gate)
        write_atomic(out / inputs.rel / "compare.json", json.dumps(comparison.to_dict(), indent=1) + "\n")
        return step_of(commit, comparison, keys, seconds)
    return measure
