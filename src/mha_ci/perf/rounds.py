"""A same-GPU A/B in rounds: each round a fresh pair of payload processes, both sides pooled.

Some shapes move between two processes by more than either process's own noise: on the H200 the
~150 us backward shapes with a sink (about ten short launches a dispatch) sat 0.8-1.7 % apart
between processes of the same code, with 0.05 % rep-to-rep noise inside each, and fresh memory
placements per rep did not remove it (docs/perf-method.md, "Between processes"). One process
per side turns that offset into a delta no number of reps can see, and the gate reads it as a
change. So the A/B runs `against.rounds` rounds (perf.yaml): every round is a new lockstep pair,
each with 1/rounds of the method's reps and time budget, the side that goes first alternating;
each side's reps are then pooled into one document whose noise, threshold and interval see the
spread between its processes. The timed work is the method's; a round adds a process start and
each shape's warm-up.

Numerics are captured in the first round only: the outputs of one code on one input are the
same in every process (the numerics payload checks that bit by bit across sides).
"""
from __future__ import annotations

from dataclasses import replace

from mha_ci.errors import ConfigError
from mha_ci.perf.stats import Method, shape_stats


def round_method(method: Method, rounds: int) -> Method:
    """The method of one round: its share of the reps and of the time budget per shape, so each
    round's dispatches per rep come out as the whole method's would."""
    if rounds < 1 or method.reps % rounds:
        raise ConfigError(f"{method.reps} reps do not split into {rounds} rounds", key="against.rounds")
    return replace(method, reps=method.reps // rounds, max_seconds_per_shape=method.max_seconds_per_shape / rounds)


def pool(docs: list[dict], dumps: list[dict], method: Method) -> dict:
    """One side's rounds as one mha-ci.perf/1 document: per shape the reps of every round (from the
    rounds' dispatch dumps), stats recomputed over all of them with the whole `method`. A shape
    that failed in any round, or launched other code objects in one round, is an error."""
    if not docs or len(docs) != len(dumps):
        raise ValueError("pool needs one document and one dispatch dump per round")
    reps_by_round = [{item["key"]: item["reps"] for item in dump["shapes"]} for dump in dumps]
    keys = [entry["key"] for entry in docs[0]["results"]]
    for i, doc in enumerate(docs[1:], 2):
        if [entry["key"] for entry in doc["results"]] != keys:
            raise ConfigError(f"round {i} measured other shapes than round 1")
    results = []
    for n, entry in enumerate(docs[0]["results"]):
        records = [doc["results"][n] for doc in docs]
        pooled = dict(entry)
        errors = [f"round {i}: {r['error']}" for i, r in enumerate(records, 1) if r.get("error")]
        codes = {tuple(sorted((r.get("code_objects") or {}).items())) for r in records}
        if not errors and len(codes) > 1:
            errors.append("launched other code objects in another round")
        missing = [i for i, by_key in enumerate(reps_by_round, 1) if entry["key"] not in by_key]
        if not errors and missing:
            errors.append(f"no dispatch times from round {', '.join(map(str, missing))}")
        if errors:
            pooled.update(stats=None, error="; ".join(errors)[:500])
        else:
            reps = [rep for by_key in reps_by_round for rep in by_key[entry["key"]]]
            pooled["stats"] = shape_stats(reps, method).to_dict()
            pooled["round_trimmed_means_us"] = [r["stats"]["trimmed_mean_us"] for r in records]
        results.append(pooled)
    selection = dict(docs[0].get("selection") or {})
    selection["rounds"] = len(docs)
    selection["rounds_interleave"] = [(doc.get("selection") or {}).get("interleave") for doc in docs]
    selection.pop("interleave", None)
    return {**docs[0], "method": method.to_dict(), "selection": selection, "results": results}
