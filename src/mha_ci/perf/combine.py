"""A baseline from several runs of one build, carrying how much a shape moves between runs.

Why: a stored baseline is judged against a candidate measured on another day, often on another
machine of the pool. A few shapes move between machines and processes by several per cent, far
beyond their within-run noise (docs/perf-method.md, "Noise between runs and machines"). The
within-run noise (spread of rep means in one process) cannot see that, so a single-run baseline
makes the gate call those shapes regressions.

`roll` does the same for the nightly refresh: the new run joins the last runs kept in the stored
baseline (a window of `refresh.history_runs`, pipelines/perf.yaml), so the spread keeps being
measured night after night instead of being reset to one run's view.

`combine` takes N >= 2 runs of one toolchain on one GPU model (ideally from different machines or days)
and writes one mha-ci.perf/1 document: per shape the median of the runs' trimmed means, and
`between_run_noise_pct`, the sample standard deviation of the runs' trimmed means in percent
of their mean. The gate (mha_ci.perf.compare) takes the larger of a baseline shape's within-run
and between-run noise. A run whose own noise on a shape is above `max_noise_pct` (the gate's
"too noisy to judge" level) was disturbed there and is left out of that shape.

Numerics (output digests and errors against a float64 reference, mha_ci.perf.numerics) ride
along: a combined shape carries the numerics of the run whose statistics it keeps (the run
nearest the median; a failed shape, the first run's), without `versus` (that compares one run
with another base, not the baseline with anything). Runs of one build on inputs of one seed must
give the same bits; when two of them digest an output differently the shape's numerics get an
`error` ("runs disagree: ..."), so the gate reads them as unmeasured rather than pick one side of
a nondeterministic kernel as the truth; outputs a run declares `unordered_outputs` (added up in
no fixed order by design, mha_ci.perf.numerics.declared_unordered) and perf.yaml allows
(numerics.may_be_unordered) are left out of that check.
`roll` carries the new run's numerics as they are: the older runs in the history may time other
code, whose bits may differ on purpose.
"""
from __future__ import annotations

import statistics

from mha_ci.errors import ConfigError
from mha_ci.perf import comparable
from mha_ci.perf.document import SCHEMA
from mha_ci.perf.numerics import declared_unordered

MIN_RUNS = 2
RUN_FACTS = ("date", "commit", "driver", "sm_clock_mhz", "pins_checked")


def _spread(values: list[float]) -> tuple[float, float | None]:
    """(median, sample standard deviation in % of the mean; None for a single value)."""
    between = 100.0 * statistics.stdev(values) / statistics.fmean(values) if len(values) >= 2 else None
    return statistics.median(values), None if between is None else round(between, 3)


def _run_record(name: str, provenance: dict) -> dict:
    return {"name": name, **{k: provenance.get(k) for k in RUN_FACTS}}


def _pinned_only_if_every_run_was(provenance: dict) -> None:
    """A baseline is pinned only when every run in it was: one unpinned run keeps it marked."""
    unpinned = [r["name"] for r in provenance["combined_runs"] if not r.get("pins_checked")]
    if unpinned:
        provenance["pins_checked"] = False
        provenance.setdefault("pin_mismatches", [])
        provenance["unpinned_runs"] = unpinned


def combine(docs: list[dict], names: list[str] | None = None, max_noise_pct: float = 5.0,
            may_be_unordered: frozenset[str] = frozenset()) -> dict:
    """One baseline document from `docs` (mha-ci.perf/1, same toolchain, GPU, kernel, method).
    `may_be_unordered` (perf.yaml numerics.may_be_unordered): the declared unordered outputs that
    may differ between runs."""
    names = names or [f"run {i + 1}" for i in range(len(docs))]
    if len(docs) < MIN_RUNS:
        raise ConfigError(f"combine needs at least {MIN_RUNS} runs, got {len(docs)}")
    first = docs[0]
    for name, doc in zip(names[1:], docs[1:]):
        why = comparable.refusal(first["provenance"], doc["provenance"])
        if why:
            raise ConfigError(f"{name} cannot be combined with {names[0]}: {why}")
        if method_core(doc["method"]) != method_core(first["method"]):
            raise ConfigError(f"{name} was measured with another method than {names[0]}")
    keys = [e["key"] for e in first["results"]]
    for name, doc in zip(names[1:], docs[1:]):
        if sorted(e["key"] for e in doc["results"]) != sorted(keys):
            raise ConfigError(f"{name} does not measure the same shapes as {names[0]}")
    by_key = [{e["key"]: e for e in doc["results"]} for doc in docs]
    results = [_combine_shape([runs[key] for runs in by_key], names, max_noise_pct, may_be_unordered)
               for key in keys]
    provenance = dict(first["provenance"])
    provenance["date"] = max(d["provenance"].get("date") or "" for d in docs)
    provenance["combined_runs"] = [_run_record(name, d["provenance"]) for name, d in zip(names, docs)]
    _pinned_only_if_every_run_was(provenance)
    selection = dict(first.get("selection") or {})
    selection.pop("interleave", None)
    selection["count"] = len(results)
    return {"schema": SCHEMA, "provenance": provenance, "method": first["method"], "selection": selection,
            "results": results}


def method_core(method: dict) -> tuple:
    """What runs must share to be combined; a document written before `relayout` existed held one layout."""
    return (*(method.get(k) for k in ("warmup", "dispatches", "reps", "trim_low_pct", "trim_high_pct",
                                      "l2_flush", "seed")), bool(method.get("relayout", False)))


def _combine_shape(entries: list[dict], names: list[str], max_noise_pct: float,
                   may_be_unordered: frozenset[str]) -> dict:
    ok = [e for e in entries if e.get("stats")]
    if len(ok) < len(entries):
        # One failed run makes the shape's baseline unknown, not quietly thinner.
        errors = "; ".join(e.get("error") or "?" for e in entries if not e.get("stats"))
        base = {k: v for k, v in entries[0].items() if k not in ("stats", "error")}
        base = _with_numerics(base, entries, names, may_be_unordered)
        return {**base, "stats": None, "error": f"failed in {len(entries) - len(ok)} of {len(entries)} runs: {errors}"[:500]}
    kept = [e for e in ok if e["stats"]["noise_pct"] <= max_noise_pct] or ok
    dropped = len(kept) < len(ok)
    values = [e["stats"]["trimmed_mean_us"] for e in kept]
    median, between = _spread(values)
    # Keep the other statistics (max, stall, rep means) of the run nearest the median.
    nearest = min(kept, key=lambda e: abs(e["stats"]["trimmed_mean_us"] - median))
    stats = dict(nearest["stats"])
    stats["trimmed_mean_us"] = round(median, 3)
    stats["noise_pct"] = round(statistics.median(e["stats"]["noise_pct"] for e in kept), 3)
    stats["between_run_noise_pct"] = between
    stats["run_trimmed_means_us"] = [round(v, 3) for v in values]
    if dropped:
        stats["runs_left_out"] = {name: e["stats"]["trimmed_mean_us"] for name, e in zip(names, entries) if e not in kept}
    kept_entry = _with_numerics({k: v for k, v in nearest.items() if k != "stats"}, entries, names,
                                may_be_unordered)
    return {**kept_entry, "stats": stats, "error": None}


def _with_numerics(entry: dict, entries: list[dict], names: list[str], may_be_unordered: frozenset[str]) -> dict:
    """`entry` (one run's record) with its numerics as a baseline holds them (module docstring)."""
    numerics = entry.get("numerics")
    if not isinstance(numerics, dict):
        return entry
    numerics = {k: v for k, v in numerics.items() if k != "versus"}
    disagreement = _disagreement(entries, names, may_be_unordered)
    if disagreement and numerics.get("error") is None:
        numerics["error"] = f"runs disagree: {disagreement}"[:500]
    return {**entry, "numerics": numerics}


def _disagreement(entries: list[dict], names: list[str], may_be_unordered: frozenset[str]) -> str | None:
    """Which runs digest an output of one seed differently, or None when they all agree."""
    first: dict[tuple, tuple[str, str]] = {}       # (seed, output) -> (run, sha256) first seen
    clashes = []
    for name, e in zip(names, entries):
        numerics = e.get("numerics")
        if not isinstance(numerics, dict) or numerics.get("error") is not None:
            continue
        outputs = numerics.get("outputs")
        by_design = (declared_unordered(numerics) or frozenset()) & may_be_unordered
        for output, digest in sorted(outputs.items() if isinstance(outputs, dict) else ()):
            if output in by_design:     # added up in no fixed order: other bits are no disagreement
                continue
            sha = digest.get("sha256") if isinstance(digest, dict) else None
            if not isinstance(sha, str):
                continue
            seen = first.setdefault((numerics.get("seed"), output), (name, sha))
            if seen[1] != sha:
                clashes.append(f"{output} of seed {numerics.get('seed')!r}: {seen[0]} and {name} differ")
    return "; ".join(clashes) or None


def roll(old: dict | None, new: dict, window: int, restart_keys: frozenset[str] = frozenset()) -> tuple[dict, str | None]:
    """The nightly refresh's baseline: the new full-set run joined to the stored baseline's
    history, per shape the last `window` runs' trimmed means (`run_trimmed_means_us`), their
    median as the value and their spread as `between_run_noise_pct`. Every other statistic is the
    new run's. Returns (baseline, why the history was dropped or None): a baseline that
    mha_ci.perf.comparable refuses to compare (another GPU, arch, kernel, toolchain or Triton
    release), or of another method, is not history of this one. Shapes in `restart_keys` start
    their history again with the new run (the caller's judgement: their old runs time other code).
    """
    if window < 1:
        raise ConfigError("history_runs must be at least 1")
    reset = None
    if old is None:
        reset = "no stored baseline"
    else:
        reset = comparable.refusal(old["provenance"], new["provenance"])
        if not reset and method_core(old["method"]) != method_core(new["method"]):
            reset = "the stored baseline was measured with another method"
    history_of = None if reset else old     # None whenever old is (reset then says so)
    history = {} if history_of is None else {e["key"]: e for e in history_of["results"] if e.get("stats")}
    results = []
    for entry in new["results"]:
        stats = entry.get("stats")
        if not stats:
            results.append(entry)
            continue
        past = {} if entry["key"] in restart_keys else history.get(entry["key"], {}).get("stats") or {}
        values = list(past.get("run_trimmed_means_us") or ([past["trimmed_mean_us"]] if past else []))
        values = (values + [stats["trimmed_mean_us"]])[-window:]
        merged = dict(stats)
        median, between = _spread(values)
        merged["run_trimmed_means_us"] = [round(v, 3) for v in values]
        merged["trimmed_mean_us"] = round(median, 3)
        merged["between_run_noise_pct"] = between
        results.append({**entry, "stats": merged})
    provenance = dict(new["provenance"])
    past_runs = [] if history_of is None else list(history_of["provenance"].get("combined_runs")
                                                   or [_run_record("baseline", history_of["provenance"])])
    provenance["combined_runs"] = (past_runs + [_run_record("refresh", new["provenance"])])[-window:]
    _pinned_only_if_every_run_was(provenance)
    selection = dict(new.get("selection") or {})
    selection["count"] = len(results)
    return ({"schema": SCHEMA, "provenance": provenance, "method": new["method"], "selection": selection,
             "results": results}, reset)
