"""Reading and writing `mha-ci.perf/1` documents (perf results and stored baselines).

Layout (docs/architecture.md, Stored formats, fixed; fields beyond these are additions):
{
  "schema": "mha-ci.perf/1",
  "provenance": {"gpu", "arch", "driver", "toolchain", "versions": {...}, "executor",
                 "image_digest", "commit", "dirty" (sha256 of the uncommitted change, null: clean), "date", "sm_clock_mhz": {"start", "end"}, ...},
  "method": {"warmup", "dispatches", "reps", "trim": [low, high], ...},
  "selection": {"subset": "pr" | "full" | "custom", "count": N},
  "results": [{"key", "shape", "bucket", "tags", "origins",
               "stats": {"trimmed_mean_us", "median_us", "max_us", "noise_pct", "reps",
                         "dispatches", "mean_us", "rep_means_us", "stall"},
               "error": null | "message"}]
}
A shape the payload could not run keeps its entry with "stats": null and "error" set, so a
failure is visible to the gate rather than a silently shorter list.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TypeGuard

from mha_ci.errors import ConfigError
from mha_ci.files import read_capped, unique_keys, write_atomic
from mha_ci.perf.buckets import bucket_of
from mha_ci.perf.shapes import parse_key
from mha_ci.perf.stats import Method, shape_stats

SCHEMA = "mha-ci.perf/1"
SHAPES_SCHEMA = "mha-ci.perf-shapes/1"
DISPATCHES_SCHEMA = "mha-ci.perf-dispatches/1"
# The subsets a measurement can be asked for (the one list every command and job checks against,
# check_subset), and what a document may record: "custom" is a --shape selection within one.
SUBSETS = ("pr", "full")
DOCUMENT_SUBSETS = (*SUBSETS, "custom")
# A full baseline with history is a few MB; a dispatch dump of the full set tens of MB.
MAX_PERF_BYTES = 256 * 2**20
STATS_KEYS = ("trimmed_mean_us", "median_us", "max_us", "noise_pct", "reps", "dispatches")


def check_subset(subset: object, key: str) -> str:
    """`subset` when it is one of SUBSETS, else a ConfigError naming where it came from (`key`)."""
    if subset not in SUBSETS:
        raise ConfigError(f"{key}: unknown subset {subset!r}; known: {', '.join(SUBSETS)}", key=key)
    return str(subset)


def load_perf(path: Path) -> dict:
    """A checked mha-ci.perf/1 document; a wrong file is a usage error (exit 2) naming it."""
    path = Path(path)
    if not path.exists():
        raise ConfigError("perf result not found", file=str(path))
    # A regular file of bounded size: a FIFO or a device would block or never end.
    return parse_perf(read_capped(path, "perf result", MAX_PERF_BYTES), str(path))


def parse_perf(data: bytes, source: str) -> dict:
    """The checked mha-ci.perf/1 document in `data` (a file's bytes, or a git version of one);
    anything else is a ConfigError naming `source`."""
    if len(data) > MAX_PERF_BYTES:
        raise ConfigError(f"perf result has more than the {MAX_PERF_BYTES} allowed bytes", file=source)
    try:
        doc = json.loads(data.decode(), parse_int=_float_sized_int, object_pairs_hook=_unique_keys)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"perf result is not UTF-8 text (byte {exc.start})", file=source) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON: {exc.msg}", file=source, line=exc.lineno) from None
    except (_OutOfRange, _DuplicateKey) as exc:
        raise ConfigError(str(exc), file=source) from None
    except RecursionError:
        raise ConfigError("perf result is nested too deep to be a perf document", file=source) from None
    problem = check_perf(doc)
    if problem:
        raise ConfigError(problem, file=source)
    return doc


class _OutOfRange(ValueError):
    pass


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """An object of the document: a repeated key is refused, so two readers of one file cannot
    see two different times."""
    return unique_keys(pairs, lambda key: _DuplicateKey(f"duplicate key {key!r} in one object"))


# Every number of a perf document is used as a float; a longer integer does not fit one (the gate
# would crash converting it), and Python refuses to parse one of over 4300 digits at all.
_MAX_INT_DIGITS = 308


def _float_sized_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > _MAX_INT_DIGITS:
        raise _OutOfRange(f"an integer of {digits} digits is out of range (at most {_MAX_INT_DIGITS})")
    return int(text)


def check_perf(doc: object) -> str | None:
    """Why `doc` is not a mha-ci.perf/1 document, or None.

    It checks the structure the gate and the reports read. A time or noise that is not a finite
    number passes: the gate reports it as a broken measurement of that shape (exit 1)."""
    if not isinstance(doc, dict):
        return "a perf document is a JSON object"
    if doc.get("schema") != SCHEMA:
        return f"schema is {doc.get('schema')!r}, expected {SCHEMA!r}"
    for part in ("provenance", "method"):
        if not isinstance(doc.get(part), dict):
            return f"missing object '{part}'"
    # Read as {package: release} wherever two documents are compared (mha_ci.perf.comparable).
    versions = doc["provenance"].get("versions")
    if versions is not None and not (isinstance(versions, dict)
                                     and all(v is None or isinstance(v, str) for v in versions.values())):
        return f"provenance.versions is {_brief(versions)}, expected an object of version strings"
    results = doc.get("results")
    if not isinstance(results, list):
        return "missing list 'results'"
    seen = set()
    for i, entry in enumerate(results):
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            return f"results[{i}] has no 'key'"
        if entry["key"] in seen:
            return f"results[{i}]: key {entry['key']} appears twice"
        seen.add(entry["key"])
        problem = _entry_problem(entry)
        if problem:
            return f"results[{i}] ({entry['key']}): {problem}"
    return _selection_problem(doc.get("selection"), len(results))


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _entry_problem(entry: dict) -> str | None:
    tags, origins = entry.get("tags") or [], entry.get("origins") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        return "tags is not a list of strings"
    if not isinstance(origins, list) or not all(isinstance(o, dict) for o in origins):
        return "origins is not a list of objects"
    if any(o.get("tp") is not None and not _is_count(o["tp"]) for o in origins):
        return "an origin's tp is not a whole number"
    stats = entry.get("stats")
    if stats is None:
        return None if entry.get("error") else "no 'stats' and no 'error'"
    if not isinstance(stats, dict):
        return "stats is not an object"
    missing = [k for k in STATS_KEYS if k not in stats]
    if missing:
        return f"stats lack {missing}"
    return _stall_problem(stats.get("stall"))


def _stall_problem(stall: object) -> str | None:
    """The reports print a stall's worst dispatch and its ratio to the median (mha_ci.perf.stats)."""
    if stall is None:
        return None
    if not isinstance(stall, dict):
        return f"stall is not an object or null: {stall!r:.40}"
    for name in ("worst_us", "ratio"):
        value = stall.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"stall's {name} is not a finite number: {value!r:.40}"
    for name in ("count", "rep", "index"):
        if stall.get(name) is not None and not _is_count(stall[name]):
            return f"stall's {name} is not a whole number or null: {stall.get(name)!r:.40}"
    return None


def _selection_problem(selection: object, results: int) -> str | None:
    """A document without `selection` is a full measurement (the gate expects every baseline shape).

    A selection that counts fewer shapes than the results hold contradicts itself: the gate could
    not tell which results were meant, so the document is refused rather than judged."""
    if selection is None:
        return None
    if not isinstance(selection, dict):
        return "selection is not an object"
    if selection.get("subset") not in DOCUMENT_SUBSETS:
        return f"selection subset {selection.get('subset')!r:.40} is not one of {', '.join(DOCUMENT_SUBSETS)}"
    count = selection.get("count")
    if not _is_count(count):
        return f"selection count {count!r:.40} is not a whole number"
    if count < results:
        return f"selection count {count} is below the {results} results the document holds"
    return None


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def write_json(path: Path, doc: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Whole or not at all: a document cut short (full disk) must not be read as a measurement.
    write_atomic(path, json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return path


def merge_perf(docs: list[dict]) -> dict:
    """One document from chunk documents of one toolchain (interleaved runs, `--chunk i/n`).

    Provenance is the first chunk's, with clocks spanning all chunks; the chunks must agree on
    GPU, toolchain, versions, kernel and method, or the merge is refused (ConfigError).
    """
    if not docs:
        raise ConfigError("nothing to merge")
    first = docs[0]
    same = ("gpu", "arch", "toolchain", "versions", "kernel", "planted_slowdown_pct")
    results, seen = [], set()
    for i, doc in enumerate(docs):
        for name in same:
            if doc["provenance"].get(name) != first["provenance"].get(name):
                raise ConfigError(f"chunk {i + 1} differs from chunk 1 in provenance '{name}': "
                                  f"{doc['provenance'].get(name)!r} vs {first['provenance'].get(name)!r}")
        if doc["method"] != first["method"]:
            raise ConfigError(f"chunk {i + 1} was measured with another method than chunk 1")
        for entry in doc["results"]:
            if entry["key"] in seen:
                raise ConfigError(f"shape {entry['key']} appears in two chunks")
            seen.add(entry["key"])
            results.append(entry)
    provenance = dict(first["provenance"])
    clocks = [d["provenance"].get("sm_clock_mhz") or {} for d in docs]
    provenance["sm_clock_mhz"] = {"start": clocks[0].get("start"), "end": clocks[-1].get("end")}
    provenance["chunks"] = len(docs)
    selection = dict(first.get("selection") or {})
    selection.pop("chunk", None)
    selection["count"] = len(results)
    return {"schema": SCHEMA, "provenance": provenance, "method": first["method"],
            "selection": selection, "results": results}


def perf_from_dump(dump: dict, shapes: dict[str, dict] | None = None, method=None) -> dict:
    """A mha-ci.perf/1 document recomputed from a `--dump-dispatches` file (same stats code as
    the payload; pass another `method` to re-analyse with a different trim or stall factor).
    `shapes` maps key -> the shapes.json entry, to carry shape, bucket and tags along."""
    if dump.get("schema") != DISPATCHES_SCHEMA:
        raise ConfigError(f"not a {DISPATCHES_SCHEMA} document (schema {dump.get('schema')!r})")
    method = method or Method.from_dict(dump["method"])
    results = []
    for item in dump["shapes"]:
        entry = dict((shapes or {}).get(item["key"]) or {})
        if not entry:
            shape = parse_key(item["key"])
            entry = {"shape": shape.to_dict(), "bucket": bucket_of(shape), "tags": []}
        entry.update(key=item["key"], stats=shape_stats(item["reps"], method).to_dict(), error=None)
        results.append(entry)
    return {"schema": SCHEMA, "provenance": dict(dump.get("provenance") or {}), "method": method.to_dict(),
            "selection": {"subset": "custom", "count": len(results)}, "results": results}
