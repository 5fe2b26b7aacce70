"""Accuracy baselines: per arch, toolchain and shape of the pull-request subset, the numerics of a
measurement (output digests and errors against the float64 reference, mha_ci.payloads.numerics),
stored in perf_baselines/<arch>/accuracy/<toolchain>.json (mha_ci.baselines.accuracy_baseline).

The file is a mha-ci.perf/1 document of the subset's shapes, so each accuracy record sits beside
the code objects it came from (`numerics.code_objects`): a later run of the same code must give
the same bits, and other code must not be less accurate beyond perf.yaml's
`numerics.less_accurate_factor` (mha_ci.perf.numerics).

The gate reads it by folding each shape's stored numerics into the perf baseline it compares
with (`with_accuracy`): the timing and the numbers of a shape are judged in one table, while the
perf baseline keeps its own history (a baseline of several runs, restarted when code changes) and
the accuracy record is simply the latest, since the same code gives the same numbers.

A fixed set, not every shape: the float64 reference costs a few seconds per large shape, and
the pull-request subset already holds every bucket and layout (perf.yaml `subset`).
"""
from __future__ import annotations

import copy

from mha_ci.errors import ConfigError

# What a stored accuracy record keeps beyond the numerics: enough to read it as a perf result.
KEPT = ("key", "shape", "bucket", "kernel_bucket", "tags", "origins", "code_objects", "stats", "error", "numerics")


def problems(measurement: dict, keys: list[str]) -> list[str]:
    """Why `measurement` cannot become the accuracy baseline of `keys`; empty when it can."""
    by_key = {r["key"]: r for r in measurement["results"]}
    out = []
    for key in keys:
        record = by_key.get(key)
        num = (record or {}).get("numerics")
        if record is None:
            out.append(f"{key}: not measured")
        elif not isinstance(num, dict):
            out.append(f"{key}: measured without numerics")
        elif num.get("error"):
            out.append(f"{key}: numerics failed: {num['error']}")
        elif not (num.get("reference") or {}).get("errors"):
            out.append(f"{key}: no error against the reference")
    return out


def accuracy_document(measurement: dict, keys: list[str]) -> dict:
    """The accuracy baseline of `keys` from a measurement that recorded numerics for each of them;
    a ConfigError naming every shape it lacks otherwise (a partial baseline would leave those
    shapes unjudged without saying so)."""
    bad = problems(measurement, keys)
    if bad:
        raise ConfigError(f"{len(bad)} of {len(keys)} shape(s) cannot be stored: " + "; ".join(bad[:5])
                          + (f"; {len(bad) - 5} more" if len(bad) > 5 else ""), key="numerics")
    by_key = {r["key"]: r for r in measurement["results"]}
    results = [{k: v for k, v in by_key[key].items() if k in KEPT} for key in keys]
    for record in results:
        record["numerics"] = {k: v for k, v in record["numerics"].items() if k not in ("versus", "seconds")}
    return {"schema": measurement["schema"], "provenance": measurement["provenance"],
            "method": measurement["method"],
            "selection": {"subset": "pr", "count": len(results), "chunk": None, "keys": None},
            "results": results}


def numerics_of(doc: dict | None) -> dict[str, dict]:
    """{key: numerics} of a document, without the run's timing of the numerics."""
    if doc is None:
        return {}
    return {r["key"]: {k: v for k, v in r["numerics"].items() if k != "seconds"}
            for r in doc.get("results", []) if isinstance(r.get("numerics"), dict)}


def changed(old: dict | None, new: dict) -> bool:
    """Whether storing `new` changes any shape's numbers (a new run of the same code does not)."""
    return numerics_of(old) != numerics_of(new)


def with_accuracy(baseline: dict, accuracy: dict | None) -> dict:
    """A copy of the perf baseline in which each shape of the accuracy baseline carries its
    stored numerics (a shape's own numerics, if the perf baseline has any, give way)."""
    if accuracy is None:
        return baseline
    stored = numerics_of(accuracy)
    merged = copy.deepcopy(baseline)
    for record in merged["results"]:
        if record["key"] in stored:
            record["numerics"] = stored[record["key"]]
    return merged


def without_numerics(doc: dict) -> dict:
    """A copy of `doc` whose results carry no numerics: a comparison of timings only."""
    stripped = copy.deepcopy(doc)
    for record in stripped["results"]:
        record.pop("numerics", None)
    return stripped
