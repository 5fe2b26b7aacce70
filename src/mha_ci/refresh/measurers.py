"""The measure and re-measure functions of a refresh that measures on this machine (the refresh
job, `mha-ci perf refresh` without --measurement), over mha_ci.perf.measure."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mha_ci.perf.measure import PayloadCall, run_payload, write_inputs
from mha_ci.perf.request import PerfRequest
from mha_ci.refresh.clean_tree import refuse_unclean
from mha_ci.refresh.core import MeasureFn, RemeasureFn


def measured_here(request: PerfRequest, rel_prefix: str) -> tuple[MeasureFn, RemeasureFn]:
    """(MeasureFn, RemeasureFn) for mha_ci.refresh: (Arch, Toolchain) -> the full set's perf
    document, and (Arch, Toolchain, keys, round) -> those shapes measured again in a new process,
    in their own folder beside the full run's. Refuses (exit 2) a working tree that is not HEAD's
    (mha_ci.refresh.clean_tree): the baseline would be stored as HEAD's measurement."""
    refuse_unclean(Path(request.pipeline.root))

    def measure(toolchain: str, rel: str, keys: list[str] | None, label: str) -> dict:
        asked = replace(request, keys=tuple(keys or ()))
        inputs = write_inputs(asked, rel)
        return run_payload(asked, inputs, PayloadCall(toolchain, log_prefix=f"refresh {request.arch} {toolchain}{label}"))

    def measure_fn(arch, toolchain) -> dict:
        return measure(toolchain.name, f"{rel_prefix}/{toolchain.name}", None, "")

    def remeasure_fn(arch, toolchain, keys: list[str], round_: int) -> dict:
        return measure(toolchain.name, f"{rel_prefix}/{toolchain.name}/remeasure-{round_}", keys,
                       f" re-measure {round_} ({len(keys)} shapes)")
    return measure_fn, remeasure_fn
