"""Reading and writing `mha-ci.perf/1` documents (perf results and stored baselines).

Layout (DESIGN.md, fixed; fields beyond these are additions):
{
  "schema": "mha-ci.perf/1",
  "provenance": {"gpu", "arch", "driver", "toolchain", "versions": {...}, "executor",
                 "image_digest", "commit", "date", "sm_clock_mhz": {"start", "end"}, ...},
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
from pathlib import Path

from mha_ci.errors import ConfigError

SCHEMA = "mha-ci.perf/1"
SHAPES_SCHEMA = "mha-ci.perf-shapes/1"
DISPATCHES_SCHEMA = "mha-ci.perf-dispatches/1"
STATS_KEYS = ("trimmed_mean_us", "median_us", "max_us", "noise_pct", "reps", "dispatches")


def load_perf(path: Path) -> dict:
    """A checked mha-ci.perf/1 document; a wrong file is a usage error (exit 2) naming it."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("perf result not found", file=str(path)) from None
    except OSError as exc:      # a folder, no permission
        raise ConfigError(f"cannot read perf result: {exc.strerror or exc}", file=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"perf result is not UTF-8 text (byte {exc.start})", file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON: {exc.msg}", file=str(path), line=exc.lineno) from None
    problem = check_perf(doc)
    if problem:
        raise ConfigError(problem, file=str(path))
    return doc


def check_perf(doc: object) -> str | None:
    """Why `doc` is not a mha-ci.perf/1 document, or None."""
    if not isinstance(doc, dict):
        return "a perf document is a JSON object"
    if doc.get("schema") != SCHEMA:
        return f"schema is {doc.get('schema')!r}, expected {SCHEMA!r}"
    for part in ("provenance", "method"):
        if not isinstance(doc.get(part), dict):
            return f"missing object '{part}'"
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
        stats = entry.get("stats")
        if stats is None:
            if not entry.get("error"):
                return f"results[{i}] ({entry['key']}): no 'stats' and no 'error'"
            continue
        missing = [k for k in STATS_KEYS if k not in stats]
        if missing:
            return f"results[{i}] ({entry['key']}): stats lack {missing}"
    return None


def write_json(path: Path, doc: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
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
    from mha_ci.perf.shapes import parse_key
    from mha_ci.perf.stats import Method, shape_stats

    if dump.get("schema") != DISPATCHES_SCHEMA:
        raise ConfigError(f"not a {DISPATCHES_SCHEMA} document (schema {dump.get('schema')!r})")
    method = method or Method.from_dict(dump["method"])
    results = []
    for item in dump["shapes"]:
        entry = dict((shapes or {}).get(item["key"]) or {})
        if not entry:
            from mha_ci.perf.buckets import bucket_of

            shape = parse_key(item["key"])
            entry = {"shape": shape.to_dict(), "bucket": bucket_of(shape), "tags": []}
        entry.update(key=item["key"], stats=shape_stats(item["reps"], method).to_dict(), error=None)
        results.append(entry)
    return {"schema": SCHEMA, "provenance": dict(dump.get("provenance") or {}), "method": method.to_dict(),
            "selection": {"subset": "custom", "count": len(results)}, "results": results}
