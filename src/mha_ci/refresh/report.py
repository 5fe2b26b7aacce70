"""The refresh pull request's description (markdown), every number from the two JSON documents.

Order: what moved beyond its threshold first (what a reviewer must look at), then both
provenances (was it the same machine and toolchain?), then every shape old vs new with noise in
a collapsed section. GitHub refuses a pull-request body over 65536 characters, so the long table
is cut to fit and the last row says how many shapes were left out; every number stays in the
committed baseline JSON.
"""
from __future__ import annotations

from mha_ci.perf.compare import Comparison

BODY_LIMIT = 60_000
PROVENANCE_ROWS = ("gpu", "arch", "driver", "toolchain", "versions", "executor", "image_digest", "commit", "date")


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.1f} %" if signed else f"{value:.1f} %"


def _provenance_value(prov: dict | None, name: str) -> str:
    if prov is None:
        return "(no baseline)"
    value = prov.get(name)
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items()))
    return "-" if value in (None, "") else str(value).replace("|", "/")


def _stats(doc: dict | None) -> dict[str, dict]:
    return {e["key"]: (e.get("stats") or {}) for e in (doc or {}).get("results", ())}


def _shape_rows(name: str, old: dict | None, new: dict, comparison: Comparison | None) -> list[str]:
    verdicts = {v.key: v for v in comparison.shapes} if comparison else {}
    old_stats, new_stats = _stats(old), _stats(new)
    rows = []
    for key in sorted(set(old_stats) | set(new_stats)):
        o, n, v = old_stats.get(key, {}), new_stats.get(key, {}), verdicts.get(key)
        status = v.status if v else ("new shape" if key not in old_stats else "removed")
        rows.append(f"| {name} | `{key}` | {_us(o.get('trimmed_mean_us'))} | {_pct(o.get('noise_pct'))} | "
                    f"{_us(n.get('trimmed_mean_us'))} | {_pct(n.get('noise_pct'))} | "
                    f"{_pct(v.delta_pct if v else None, True)} | {_pct(v.threshold_pct if v else None)} | {status} |")
    return rows


SHAPE_HEADER = ["| toolchain | shape | old us | old noise | new us | new noise | delta | threshold | status |",
                "|---|---|---|---|---|---|---|---|---|"]


def pr_body(*, arch: str, date: str, branch: str | None, base_commit: str, measured: dict[str, dict],
            olds: dict[str, dict | None], comparisons: dict[str, Comparison | None], policy,
            other_files: list[str]) -> str:
    lines = [f"# Baseline refresh: {arch}, {date}", ""]
    lines.append(f"Re-measured by the nightly refresh on top of `{base_commit}`"
                 + (f"; the new baselines are on `{branch}`." if branch else "; nothing changed beyond noise."))
    lines += ["", f"A shape moved when its change exceeds max({policy.gate.floor_pct} %, "
              f"{policy.gate.k} x noise of both sides); every stored shape has noise at most "
              f"{policy.max_noise_pct} % (pipelines/perf.yaml).", "", "## Summary", "",
              "| toolchain | shapes | regressions | improvements | new | removed |", "|---|---|---|---|---|---|"]
    for name, doc in measured.items():
        c, old = comparisons[name], olds[name]
        counts = c.summary if c else {}
        new_keys = {e["key"] for e in doc["results"]}
        old_keys = {e["key"] for e in (old or {}).get("results", ())}
        lines.append(f"| {name} | {len(new_keys)} | {counts.get('regression', 0)} | {counts.get('improvement', 0)} | "
                     f"{len(new_keys - old_keys) if old else 'all (first baseline)'} | {len(old_keys - new_keys)} |")

    lines += ["", "## Shapes beyond their threshold", ""]
    moved_rows = []
    for name, doc in measured.items():
        c = comparisons[name]
        if c is None:
            continue
        keys = {v.key for v in c.shapes if v.status in ("regression", "improvement")}
        moved_rows += [row for row in _shape_rows(name, olds[name], doc, c) if row.split("`")[1] in keys]
    lines += (SHAPE_HEADER + moved_rows) if moved_rows else ["None."]

    again = [(name, key, note) for name, doc in measured.items()
             for key, note in sorted(((doc.get("selection") or {}).get("remeasured") or {}).items())]
    if again:
        lines += ["", "## Shapes measured again", "",
                  "Disturbed in the first run, so measured again in a new process "
                  "(refresh.remeasure_rounds); the baseline holds the undisturbed result.", "",
                  "| toolchain | shape | first run | taken from |", "|---|---|---|---|"]
        lines += [f"| {name} | `{key}` | {note.get('first')} | {note.get('taken_from')} |" for name, key, note in again]

    lines += ["", "## Provenance", ""]
    for name, doc in measured.items():
        old_prov = (olds[name] or {}).get("provenance") if olds[name] else None
        lines += [f"### {name}", "", "| | old baseline | new measurement |", "|---|---|---|"]
        lines += [f"| {row} | {_provenance_value(old_prov, row)} | {_provenance_value(doc['provenance'], row)} |"
                  for row in PROVENANCE_ROWS]
        method = doc.get("method") or {}
        lines += ["", "Method: " + ", ".join(f"{k} {method[k]}" for k in ("warmup", "dispatches", "reps", "trim")
                                               if k in method), ""]
    if other_files:
        lines += ["## Other refreshed files", ""] + [f"- `{path}`" for path in other_files] + [""]

    head = "\n".join(lines)
    all_rows = [row for name, doc in measured.items() for row in _shape_rows(name, olds[name], doc, comparisons[name])]
    tail_open = ["", "<details><summary>Every shape, old vs new</summary>", ""] + SHAPE_HEADER
    tail_close = ["", "</details>", ""]
    budget = BODY_LIMIT - len(head) - sum(len(x) + 1 for x in tail_open + tail_close) - 200
    kept = []
    for row in all_rows:
        if budget - (len(row) + 1) < 0:
            break
        kept.append(row)
        budget -= len(row) + 1
    if len(kept) < len(all_rows):
        kept.append(f"| ... | {len(all_rows) - len(kept)} more shapes left out: GitHub limits a description's length; "
                    f"see the JSON files of the commit | | | | | | | |")
    return head + "\n".join(tail_open + kept + tail_close)
