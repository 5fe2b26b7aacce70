"""The refresh pull request's description (markdown), every number from the two JSON documents.

Order: what moved beyond its threshold first (what a reviewer must look at), then both
provenances (was it the same machine and toolchain?), then every shape old vs new with noise in
a collapsed section. GitHub refuses a pull-request body over 65536 characters, so the long table
is cut to fit and the last row says how many shapes were left out; every number stays in the
committed baseline JSON.

The forward and the backward pass are summarised and listed apart (a pass the refresh did not
measure gets no rows): a backward shape that moved must not hide among forward ones. Each row
says whether the shape ran the same code objects as the stored baseline (`code`: same, changed,
or - when either side did not record them): a shape that moved on the same code moved by noise
or by the machine, not by the kernel.

Each shape that moved gets a pointer to its history page (`mha-ci perf history`, uploaded by the
nightly workflow as an artifact) and the `mha-ci perf bisect` command line that would find the
commit between the stored baseline's measured commit and tonight's.
"""
from __future__ import annotations

from mha_ci.perf.compare import Comparison
from mha_ci.perf.history import artifact_name
from mha_ci.perf.report import PASS_TITLES, SAME_CODE
from mha_ci.perf.shapes import PASSES, pass_of_key

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


def _pass_order(key: str) -> tuple[int, str]:
    return PASSES.index(pass_of_key(key)), key


def _shape_rows(name: str, old: dict | None, new: dict, comparison: Comparison | None,
                only: set[str] | None = None) -> list[str]:
    """One row per shape of either document (or of `only`), forward shapes before backward ones."""
    verdicts = {v.key: v for v in comparison.shapes} if comparison else {}
    old_stats, new_stats = _stats(old), _stats(new)
    rows = []
    for key in sorted(set(old_stats) | set(new_stats) if only is None else only, key=_pass_order):
        o, n, v = old_stats.get(key, {}), new_stats.get(key, {}), verdicts.get(key)
        status = v.status if v else ("new shape" if key not in old_stats else "removed")
        rows.append(f"| {name} | `{key}` | {_us(o.get('trimmed_mean_us'))} | {_pct(o.get('noise_pct'))} | "
                    f"{_us(n.get('trimmed_mean_us'))} | {_pct(n.get('noise_pct'))} | "
                    f"{_pct(v.delta_pct if v else None, True)} | {_pct(v.threshold_pct if v else None)} | {status} | "
                    f"{SAME_CODE[v.same_code] if v else '-'} |")
    return rows


SHAPE_HEADER = ["| toolchain | shape | old us | old noise | new us | new noise | delta | threshold | status | same code |",
                "|---|---|---|---|---|---|---|---|---|---|"]


def _moved(c: Comparison | None, pass_: str) -> set[str]:
    """The keys of the pass's shapes that moved beyond their threshold."""
    return {v.key for v in (c.shapes if c else ()) if v.status in ("regression", "improvement")
            and v.pass_ == pass_}


def _where_moved(arch: str, measured: dict[str, dict], olds: dict[str, dict | None],
                 comparisons: dict[str, Comparison | None]) -> list[str]:
    """For each shape that moved: where its history is, and the bisect command between the
    commit the stored baseline measured (good) and the commit measured tonight (bad)."""
    lines = []
    for name, doc in measured.items():
        keys = sorted(set().union(*(_moved(comparisons[name], p) for p in PASSES)), key=_pass_order)
        if not keys:
            continue
        good = ((olds[name] or {}).get("provenance") or {}).get("commit") or "<stored baseline's commit>"
        bad = (doc.get("provenance") or {}).get("commit") or "<measured commit>"
        lines += [f"### {name}", ""]
        for key in keys:
            lines += [f"- `{key}`: history `{name}/index.html#{key}` of the `{artifact_name(arch)}` artifact; "
                      f"find the commit with `mha-ci perf bisect --good {good} --bad {bad} --arch {arch} "
                      f"--toolchain {name} --shape '{key}' --out out/bisect/{name}/{key}`"]
        lines.append("")
    if not lines:
        return []
    return ["", "## When and where it moved", "",
            f"The nightly run uploads each toolchain's history page as the `{artifact_name(arch)}` artifact "
            f"(`mha-ci perf history --arch {arch} --toolchain T --out DIR` makes it on any clone, no GPU). "
            "`mha-ci perf bisect` finds the commit: it skips, on the CPU, every commit whose code objects for the "
            "shape equal its neighbour's, and binary-searches the rest on a GPU (docs/bisect.md; `--cpu-only` "
            "does the CPU part anywhere).", ""] + lines


def pr_body(*, arch: str, date: str, branch: str | None, base_commit: str, measured: dict[str, dict],
            olds: dict[str, dict | None], comparisons: dict[str, Comparison | None], policy,
            other_files: list[str]) -> str:
    lines = [f"# Baseline refresh: {arch}, {date}", ""]
    lines.append(f"Re-measured by the nightly refresh on top of `{base_commit}`"
                 + (f"; the new baselines are on `{branch}`." if branch else "; nothing changed beyond noise."))
    lines += ["", f"A shape moved when its change exceeds max({policy.gate.floor_pct} %, "
              f"{policy.gate.k} x noise of both sides); every stored shape has noise at most "
              f"{policy.max_noise_pct} % (pipelines/perf.yaml).", "", "## Summary", "",
              "| toolchain | pass | shapes | regressions | improvements | new | removed |",
              "|---|---|---|---|---|---|---|"]
    for name, doc in measured.items():
        c, old = comparisons[name], olds[name]
        new_keys = {e["key"] for e in doc["results"]}
        old_keys = {e["key"] for e in (old or {}).get("results", ())}
        for p in PASSES:
            new_p = {k for k in new_keys if pass_of_key(k) == p}
            old_p = {k for k in old_keys if pass_of_key(k) == p}
            if not new_p and not old_p:
                continue
            statuses = [v.status for v in (c.shapes if c else ()) if v.pass_ == p]
            lines.append(f"| {name} | {p} | {len(new_p)} | {statuses.count('regression')} | "
                         f"{statuses.count('improvement')} | "
                         f"{len(new_p - old_p) if old else 'all (first baseline)'} | {len(old_p - new_p)} |")

    lines += ["", "## Shapes beyond their threshold", ""]
    moved = {p: [row for name, doc in measured.items()
                 for row in _shape_rows(name, olds[name], doc, comparisons[name], only=_moved(comparisons[name], p))]
             for p in PASSES}
    for p, rows in moved.items():
        if rows:
            lines += [f"### {PASS_TITLES[p]}", ""] + SHAPE_HEADER + rows + [""]
    if not any(moved.values()):
        lines.append("None.")
    lines += _where_moved(arch, measured, olds, comparisons)
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
                    f"see the JSON files of the commit | | | | | | | | |")
    return head + "\n".join(tail_open + kept + tail_close)
