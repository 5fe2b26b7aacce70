"""Measure again the shapes a refresh run caught disturbed, instead of refusing the whole night.

A stall (one dispatch far above the shape's median) or a noisy shape says the machine was
disturbed while that shape ran, not that the build is slow. A full run stalls a few shapes, a
different few each time (docs/perf-method.md, "Noise between runs and machines"), so a refresh
that refused any stall would never store a baseline. So the refresh measures those
shapes again, in a new process, up to `refresh.remeasure_rounds` times (pipelines/perf.yaml),
and takes a shape's first undisturbed result. A shape disturbed in every round still refuses the
refresh. Nothing is hidden: the document's `selection.remeasured` names every shape taken from a
second run, what was wrong with the first, and the run it came from.

A re-measurement must time the same build the same way: same commit, one the comparability rule
accepts (mha_ci.perf.comparable), same method. Its other shapes, disturbed or not, are ignored.
"""
from __future__ import annotations

import copy

from mha_ci.errors import ConfigError
from mha_ci.perf import comparable
from mha_ci.perf.combine import method_core
from mha_ci.perf.stats import stall_from_summary

def disturbances(doc: dict, max_noise_pct: float, stall_factor: float, stall_min_excess_us: float) -> dict[str, str]:
    """Shape key -> why its result cannot go into a baseline (failed, stalled, too noisy)."""
    found: dict[str, str] = {}
    for entry in doc["results"]:
        key, stats = entry["key"], entry.get("stats")
        if stats is None:
            found[key] = f"failed to run: {entry.get('error')}"
            continue
        why = []
        stall = stats.get("stall") or stall_from_summary(stats, stall_factor, stall_min_excess_us)
        if stall:
            detail = f" ({stall.get('worst_us')} us, {stall.get('ratio')}x the median)" if isinstance(stall, dict) else ""
            why.append(f"stalled{detail}")
        if stats["noise_pct"] > max_noise_pct:
            why.append(f"noise {stats['noise_pct']:.1f} % > refresh.max_noise_pct {max_noise_pct:.1f} % "
                       "(pipelines/perf.yaml)")
        if why:
            found[key] = ", ".join(why)
    return found


def splice(doc: dict, again: dict, disturbed: dict[str, str], still: dict[str, str], run_name: str) -> dict:
    """`doc` with each of its `disturbed` shapes replaced by its result in `again`, unless that one
    is disturbed too (`still`, the disturbances of `again`). Raises ConfigError when `again` is not
    a measurement of the same build by the same method."""
    problem = _not_the_same_build(doc, again)
    if problem:
        raise ConfigError(f"{run_name} cannot stand in for shapes of the first run: {problem}")
    fresh = {e["key"]: e for e in again["results"]}
    out = copy.deepcopy(doc)
    notes = out.setdefault("selection", {}).setdefault("remeasured", {})
    for i, entry in enumerate(out["results"]):
        key = entry["key"]
        if key not in disturbed or key not in fresh or key in still:
            continue
        out["results"][i] = copy.deepcopy(fresh[key])
        notes[key] = {"first": disturbed[key], "taken_from": run_name,
                      "date": again["provenance"].get("date")}
    return out


def _not_the_same_build(doc: dict, again: dict) -> str | None:
    first, second = doc["provenance"], again["provenance"]
    if first.get("commit") != second.get("commit"):
        return f"commit {second.get('commit')!r}, the first run measured {first.get('commit')!r}"
    refused = comparable.refusal(first, second)
    if refused:
        return refused
    if method_core(doc.get("method") or {}) != method_core(again.get("method") or {}):
        return "measured with another method"
    return None
