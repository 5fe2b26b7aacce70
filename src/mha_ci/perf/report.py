"""Reports of a perf comparison: plain text, a markdown table, a PNG plot, a static HTML page.

Every number shown is a field of the comparison JSON (`Comparison.to_dict()`), which in turn
comes from the two mha-ci.perf/1 documents; the shape key heads every row so a reader can
find it there. The layout of the table follows the reference study of docs/workloads.md
(M, N, K, d_v, HQ/HK, TP, layout, bucket, baseline, candidate, delta %, status, source tag).

The forward and the backward pass are reported apart (a section, a tally and a plot panel
each; a pass the comparison does not hold gets none): a backward regression must not hide
among forward rows, and the two passes have their own noise. A shape whose code objects are
identical on both sides (`same_code`) cannot have changed speed through the change under test,
so its delta is a free A/A sample of the comparison's noise; every form marks it.

Where a shape has a numerics verdict (mha_ci.perf.numerics), its class stands next to its perf
status in every table (with the worst output's error ratio and the largest ulp distance where
known), a numerics tally follows the perf tally, and less-accurate shapes accepted with
--accept-less-accurate are listed as accepted. A comparison without numerics reads as before.
"""
from __future__ import annotations

import base64
import html
import io
import json
import shlex
import statistics
from collections.abc import Iterable
from pathlib import Path

from mha_ci.files import write_atomic

from mha_ci.perf import numerics
from mha_ci.perf.compare import STATUSES, Comparison, ShapeVerdict
from mha_ci.perf.shapes import PASSES, Shape

COLOURS = {"improvement": "#2a9d3f", "ok": "#9a9a9a", "regression": "#d62828", "invalid": "#f4a261"}
COLUMNS = ("shape", "M", "N", "K", "d_v", "HQ/HK", "TP", "layout", "bucket", "baseline us", "candidate us",
           "delta %", "threshold %", "status", "same code", "source")
PASS_TITLES = {"fwd": "Forward (fwd)", "bwd": "Backward (bwd)"}
SAME_CODE = {True: "yes", False: "no", None: "-"}
# The regressions table of compare.md: delta and status first, the narrow columns a reader acts on.
# The shape key names the dimensions; the wide table of every other shape is folded below it.
REGRESSION_COLUMNS = ("shape", "delta %", "status", "threshold %", "noise % base / cand", "us base -> cand",
                      "same code", "bucket")
# Moved shapes a perf job keeps per pass and direction in results.json: the summary shows them
# without the artifact; the rest are counted there and listed in compare.md.
MAX_VERDICT_SHAPES = 200
# How many of the worst regressions the suggested repro and bisect commands name.
COMMAND_SHAPES = 3
TUNE_PASS = {"fwd": "forward", "bwd": "backward"}
# A chart draws every changed shape and this many others, those of largest |delta|.
WORST_SHAPES = 20
# The chart's axis is linear within +-LINEAR_PCT (the gate's floors and noise live there) and
# logarithmic beyond, so a +300 % bar does not flatten the threshold band.
LINEAR_PCT = 5.0


def by_pass(verdicts: Iterable[ShapeVerdict]) -> dict[str, list[ShapeVerdict]]:
    """The verdicts of each pass the comparison holds, forward first; an absent pass has no entry."""
    groups: dict[str, list[ShapeVerdict]] = {p: [] for p in PASSES}
    for v in verdicts:
        groups[v.pass_].append(v)
    return {p: vs for p, vs in groups.items() if vs}


def _tally(summary: dict[str, int]) -> str:
    """"1 improvement, 3 ok, 0 regressions, 0 invalid of 4 shapes" from a count per status."""
    words = {"improvement": "improvements", "regression": "regressions"}
    parts = [f"{summary[k]} {words.get(k, k) if summary[k] != 1 else k}" for k in STATUSES]
    return f"{', '.join(parts)} of {sum(summary.values())} shapes"


def counts(verdicts: list[ShapeVerdict]) -> str:
    """The tally of the given verdicts."""
    return _tally({s: sum(1 for v in verdicts if v.status == s) for s in STATUSES})


def tally_line(c: Comparison) -> str:
    """The tally of each pass, as the comparison JSON's summary_by_pass holds it:
    "fwd: ... of 4 shapes; bwd: ... of 3 shapes"."""
    by = c.summary_by_pass
    if not by:
        return _tally(c.summary)
    return "; ".join(f"{p}: {_tally(summary)}" for p, summary in by.items())


def same_code_line(verdicts: list[ShapeVerdict]) -> str | None:
    """How many shapes ran identical code objects on both sides and what their deltas say about
    the noise; None when no shape recorded its code objects on both sides."""
    known = [v for v in verdicts if v.same_code is not None]
    if not known:
        return None
    same = [v for v in known if v.same_code]
    line = f"{len(same)} of {len(verdicts)} shapes ran identical code objects on both sides"
    deltas = [abs(v.delta_pct) for v in same if v.delta_pct is not None]
    if deltas:
        beyond = sum(1 for v in same if v.status in ("regression", "improvement"))
        line += (f": their deltas are an A/A sample (median |delta| {statistics.median(deltas):.2f} %, "
                 f"max {max(deltas):.2f} %"
                 + (f", over the {len(deltas)} with a delta" if len(deltas) < len(same) else "")
                 + f"; {beyond} beyond threshold)")
    if len(known) < len(verdicts):
        line += f"; code objects unknown for {len(verdicts) - len(known)}"
    return line


def has_numerics(verdicts: Iterable[ShapeVerdict]) -> bool:
    """Whether the tables get a numerics column: some shape has a numerics verdict."""
    return any(v.numerics is not None for v in verdicts)


def with_numerics(columns: tuple[str, ...], verdicts: list[ShapeVerdict]) -> tuple[str, ...]:
    """`columns` with "numerics" right after "status" when some shape has a numerics verdict."""
    if not has_numerics(verdicts) or "status" not in columns:
        return columns
    at = columns.index("status") + 1
    return columns[:at] + ("numerics",) + columns[at:]


def numerics_cell(v: ShapeVerdict) -> str:
    """"less-accurate, accepted (dq x1.62; 12 ulp)": the class, whether accepted, the worst
    output's ratio (for a wrong shape, its max_abs over the tolerance) and the largest ulp."""
    n = v.numerics
    if n is None:
        return "-"
    detail = []
    if n.class_ == numerics.IDENTICAL:
        pass                            # the ratio of equal bits is 1: nothing to show
    elif n.worst_output and n.worst_ratio is not None:
        detail.append(f"{n.worst_output} x{n.worst_ratio:.2f}" + (" tol" if n.class_ == numerics.WRONG else ""))
        if n.base_error is not None and n.head_error is not None and n.class_ != numerics.WRONG:
            detail.append(f"rms_rel {n.base_error:.2e} -> {n.head_error:.2e}")
    elif n.worst_output:
        detail.append(n.worst_output)
    if n.max_ulp is not None:
        detail.append(f"{n.max_ulp} ulp")
    if n.class_ == numerics.REORDERED and n.reason.startswith("more accurate"):
        detail.append("more accurate")
    return n.class_ + (", accepted" if v.numerics_accepted else "") + (f" ({'; '.join(detail)})" if detail else "")


def numerics_line(c: Comparison) -> str | None:
    """"Numerics: 0 wrong, 0 nondeterministic, 1 less-accurate (1 accepted), ... of 4 shapes";
    None when no shape has a numerics verdict."""
    summary = c.numerics_summary
    if summary is None:
        return None
    parts = [f"{summary[k]} {k}" + (f" ({summary['accepted']} accepted)"
                                    if k == numerics.LESS_ACCURATE and summary["accepted"] else "")
             for k in numerics.CLASSES]
    judged = sum(summary[k] for k in numerics.CLASSES)
    return (f"Numerics: {', '.join(parts)} of {judged} shapes"
            + ("; required for every judged shape" if c.numerics_required else ""))


def accepted_lines(c: Comparison) -> list[str]:
    """One line per less-accurate shape that --accept-less-accurate accepted."""
    return [f"ACCEPTED less accurate: {v.key}: {v.numerics.reason}" for v in c.shapes
            if v.numerics_accepted and v.numerics is not None]


def numerics_problems(verdicts: Iterable[ShapeVerdict]) -> list[ShapeVerdict]:
    """The shapes whose numerics a reader must look at (not identical or reordered), worst class first."""
    rank = {name: i for i, name in enumerate(numerics.CLASSES)}
    shown = [v for v in verdicts if v.numerics is not None
             and v.numerics.class_ not in (numerics.IDENTICAL, numerics.REORDERED)]
    return sorted(shown, key=lambda v: (rank[v.numerics.class_] if v.numerics else 0, v.key))


def _fmt(value, digits=1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _delta(value) -> str:
    return "-" if value is None else f"{value:+.1f}"


def _delta_ci(v: ShapeVerdict) -> str:
    """"+4.1 (+3.2..+5.0)": the delta with its 95 % interval where the comparison has one."""
    if v.ci_pct is None:
        return _delta(v.delta_pct)
    return f"{_delta(v.delta_pct)} ({v.ci_pct[0]:+.1f}..{v.ci_pct[1]:+.1f})"


def _layout(shape: dict | None) -> str:
    if not shape:
        return "-"
    parts = [shape["layout"], "causal" if shape["causal"] else "non-causal"]
    if list(shape.get("window", [-1, -1])) != [-1, -1]:
        parts.append(f"window {shape['window'][0]}/{shape['window'][1]}")
    if shape.get("sink"):
        parts.append("sink")
    if shape.get("dropout_p"):
        parts.append(f"dropout {shape['dropout_p']}")
    return ", ".join(parts)


def row(v: ShapeVerdict) -> dict[str, str]:
    s = v.shape or {}
    return {
        "shape": v.key,
        "M": str(s.get("sq", "-")), "N": str(s.get("sk", "-")), "K": str(s.get("dqk", "-")),
        "d_v": str(s.get("dv", "-")),
        "HQ/HK": f"{s['hq']}/{s['hk']}" if s else "-",
        "TP": ",".join(str(t) for t in v.tp) or "-",
        "layout": _layout(v.shape),
        "bucket": v.bucket or "-",
        "baseline us": _fmt(v.baseline_us), "candidate us": _fmt(v.candidate_us),
        "delta %": _delta_ci(v), "threshold %": _fmt(v.threshold_pct),
        "status": v.status + (" (stall)" if v.stall else ""),
        "same code": SAME_CODE[v.same_code],
        "source": ", ".join(v.tags) or "-",
        "numerics": numerics_cell(v),
    }


def ordered(verdicts: Iterable[ShapeVerdict]) -> list[ShapeVerdict]:
    """Regressions first (worst first), then invalid, then the rest by delta, largest first."""
    rank = {"regression": 0, "invalid": 1, "ok": 2, "improvement": 3}
    return sorted(verdicts, key=lambda v: (rank[v.status], -(v.delta_pct if v.delta_pct is not None else 0), v.key))


def _stall_lines(verdicts: Iterable[ShapeVerdict]) -> list[str]:
    lines = []
    stalled = [(v, v.stall) for v in verdicts if v.stall]     # each stalled shape with its stall
    for v, stall in sorted(stalled, key=lambda pair: -pair[1]["worst_us"]):
        median = stall["worst_us"] / stall["ratio"] if stall["ratio"] else None
        count = stall["count"] if stall.get("count") is not None else "at least 1"
        where = (f"rep {stall['rep']}, dispatch {stall['index']}" if stall.get("rep") is not None
                 else "seen in max_us only")
        lines.append(f"{v.key}: {count} stalled dispatch(es), worst {_duration(stall['worst_us'])} "
                     f"against a {_duration(median)} median (x{stall['ratio']:.1f}; {where}); status {v.status}")
    return lines


def _duration(us) -> str:
    if us is None:
        return "-"
    return f"{us / 1e6:.2f} s" if us >= 1e5 else f"{us:.0f} us"


def commit_label(p: dict) -> str:
    """The measured commit, and the hash of the uncommitted change on top of it when there was
    one: "3407f29abd03+dirty:ab12cd34". Two working trees of one commit then read apart."""
    label = (p.get("commit") or "?")[:12]
    return label + (f"+dirty:{p['dirty'][:8]}" if p.get("dirty") else "")


def _pin_count(p: dict) -> int:
    return sum(1 for name in (p.get("versions") or {}) if name != "python")


def _side(p: dict, side: str) -> str:
    """One line per side: the toolchain's two versions that decide the code, how many pins were
    recorded and where compare.json holds them all (the full list is too long for a header)."""
    versions = p.get("versions") or {}
    return (f"{p.get('gpu') or p.get('arch')} ({p.get('arch')}), toolchain {p.get('toolchain')} "
            f"(torch {versions.get('torch')}, triton {versions.get('triton')}; {_pin_count(p)} pins in "
            f"compare.json {side}.versions), kernel {p.get('kernel')}, "
            f"commit {commit_label(p)}, {p.get('date')}"
            + (f", PLANTED +{p['planted_slowdown_pct']} %" if p.get("planted_slowdown_pct") else ""))


def _pin_name(mismatch: str) -> str:
    """'pkg' of pincheck's "toolchain t pins pkg==1 but ..."; the whole text when it is not one."""
    words = mismatch.split()
    return words[3].split("==")[0] if len(words) > 3 and words[2] == "pins" else mismatch


def _unpinned_line(p: dict, side: str) -> str:
    """An unpinned side in one line: how many pins differ, the first names, where the list is."""
    mismatches = list(p.get("pin_mismatches") or [])
    if not mismatches:
        return f"UNPINNED {side}: pins not checked"
    # the pins that decide the code and the inputs first, as comparable.unpinned_summary orders them
    first = ("torch", "triton", "numpy")
    names = sorted((_pin_name(m) for m in mismatches), key=lambda n: first.index(n) if n in first else len(first))
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (f"UNPINNED {side}: {len(mismatches)} of {_pin_count(p)} pins differ ({shown}); "
            f"full list: compare.json {side}.pin_mismatches")


def _notes(c: Comparison) -> list[str]:
    """The comparison's notes, an unpinned side's shortened to one line with a count."""
    sides = {"baseline": c.baseline_provenance, "candidate": c.candidate_provenance}
    out = []
    for note in c.notes:
        side = next((s for s in sides if note.startswith(f"UNPINNED {s}:")), None)
        out.append(_unpinned_line(sides[side], side) if side and "pin_mismatches" in sides[side] else note)
    return out


def _header(c: Comparison) -> list[str]:
    g = c.policy
    lines = [f"Baseline: {_side(c.baseline_provenance, 'baseline')}",
             f"Candidate: {_side(c.candidate_provenance, 'candidate')}",
             f"Gate: regression when delta > max({g.floor_pct:g} %, {g.k:g} x combined noise); "
             f"invalid when either side's noise > {g.invalid_noise_pct:g} %; "
             f"stall: a dispatch > {g.stall_factor:g} x median."]
    if c.cross_toolchain:
        lines.append("Cross-toolchain comparison (requested with --cross-toolchain).")
    if c.not_measured:
        lines.append(f"{c.not_measured} baseline shapes are outside the candidate's subset and were not compared.")
    if c.refused:
        lines.append(f"REFUSED: {c.refused}")
    lines += [f"NOTE: {note}" for note in _notes(c)]
    lines += [f"GATE FAILS: {why}" for why in c.failures if not why.startswith("refused: ")]
    return lines + accepted_lines(c)


def _pass_lead(verdicts: list[ShapeVerdict]) -> list[str]:
    """The lines that open a pass's section: its tally, then what its identical-code shapes say."""
    same = same_code_line(verdicts)
    return [counts(verdicts)] + ([f"Same code: {same}"] if same else [])


def text(c: Comparison) -> str:
    out = _header(c) + ["", f"Tally: {tally_line(c)}"]
    numerics_tally = numerics_line(c)
    if numerics_tally:
        out.append(numerics_tally)
    shown = has_numerics(c.shapes)
    for p, verdicts in by_pass(c.shapes).items():
        out += ["", f"{PASS_TITLES[p]}"] + [f"  {line}" for line in _pass_lead(verdicts)]
        for v in ordered(verdicts):
            out.append(f"{v.status:<11} " + (f"{numerics_cell(v):<36} " if shown else "")
                       + f"{_delta(v.delta_pct):>8} % (thr {_fmt(v.threshold_pct)} %"
                       + (f", 95 % CI {v.ci_pct[0]:+.1f}..{v.ci_pct[1]:+.1f}" if v.ci_pct else "") + ")  "
                       f"{_fmt(v.baseline_us):>9} -> {_fmt(v.candidate_us):>9} us  {v.key}"
                       + (f"  [{v.reason}]" if v.status == "invalid" else "")
                       + ("  STALL" if v.stall else "")
                       + ("  SAME CODE" if v.same_code else ""))
        stalls = _stall_lines(verdicts)
        if stalls:
            out += ["Stalls:"] + [f"  {line}" for line in stalls]
    return "\n".join(out) + "\n"


def _md_table(verdicts: list[ShapeVerdict], columns: tuple[str, ...] = COLUMNS) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for v in verdicts:
        r = row(v)
        r["shape"] = f"`{r['shape']}`"
        lines.append("| " + " | ".join(r[c] for c in columns) + " |")
    return lines


def _noise_pair(v: ShapeVerdict) -> str:
    return f"{_fmt(v.noise_baseline_pct)} / {_fmt(v.noise_candidate_pct)}"


def _regression_table(verdicts: list[ShapeVerdict], columns: tuple[str, ...] = REGRESSION_COLUMNS) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for v in verdicts:
        r = row(v) | {"shape": f"`{v.key}`", "noise % base / cand": _noise_pair(v),
                      "us base -> cand": f"{_fmt(v.baseline_us)} -> {_fmt(v.candidate_us)}"}
        r["delta %"] = f"**{r['delta %']}**"
        lines.append("| " + " | ".join(r[c] for c in columns) + " |")
    return lines


def verdict_line(c: Comparison) -> str:
    """The comparison's verdict in one line: PASS, or FAIL and why."""
    if not c.gate_failed:
        return f"PASS: {tally_line(c)}"
    return "FAIL: " + "; ".join(c.failures)


def markdown(c: Comparison) -> str:
    out = ["# Perf comparison", "", f"**{verdict_line(c)}**", "", f"**{tally_line(c)}**", ""]
    numerics_tally = numerics_line(c)
    if numerics_tally:
        out += [f"**{numerics_tally}**", ""]
    out += [f"- {line}" for line in _header(c)] + [""]
    columns, regression_columns = with_numerics(COLUMNS, list(c.shapes)), with_numerics(REGRESSION_COLUMNS,
                                                                                          list(c.shapes))
    for p, verdicts in by_pass(c.shapes).items():
        lead = _pass_lead(verdicts)
        out += [f"## {PASS_TITLES[p]}", "", f"**{lead[0]}**", ""]
        for line in lead[1:]:
            out += [line, ""]
        regressions = [v for v in ordered(verdicts) if v.status == "regression"]
        if regressions:
            out += [f"### {p}: regressions", ""] + _regression_table(regressions, regression_columns) + [""]
        problems = numerics_problems(verdicts)
        if problems:
            out += [f"### {p}: numerics", ""] + [f"- `{v.key}`: {numerics_cell(v)}: {v.numerics.reason}"
                                                 for v in problems if v.numerics is not None] + [""]
        stalls = _stall_lines(verdicts)
        if stalls:
            out += [f"### {p}: stalls", ""]
            out += [f"- `{line.split(':', 1)[0]}`:{line.split(':', 1)[1]}" for line in stalls] + [""]
        invalid = [v for v in ordered(verdicts) if v.status == "invalid"]
        if invalid:
            out += [f"### {p}: invalid (not judged)", ""] + [f"- `{v.key}`: {v.reason}" for v in invalid] + [""]
        others = [v for v in ordered(verdicts) if v.status != "regression"]
        if others:
            out += [f"### {p}: all other shapes", "",
                    f"<details><summary>{len(others)} shapes improved, ok or invalid"
                    "</summary>", ""] + _md_table(others, columns) + ["", "</details>", ""]
    return "\n".join(out)


def _moved(v: ShapeVerdict) -> dict:
    """What the summary shows of a regressed or improved shape (compare.json holds the rest)."""
    data = v.to_dict()
    shown = {name: data[name] for name in ("key", "delta_pct", "threshold_pct", "noise_baseline_pct",
                                           "noise_candidate_pct", "same_code", "bucket")}
    if "ci_pct" in data:
        shown["ci_pct"] = data["ci_pct"]
    return shown | {"stall": bool(v.stall)}


def next_steps(c: Comparison, arch: str, toolchain: str, compare_json: str) -> list[dict]:
    """The commands to run after a regression, per pass that has one, with their arguments filled
    in from the comparison: reproduce the worst shapes against the baseline's commit on one GPU,
    bisect between the two commits, tune the regressed buckets from compare.json."""
    good = c.baseline_provenance.get("commit") or "BASELINE_COMMIT"
    bad = c.candidate_provenance.get("commit") or "HEAD"
    steps = []
    for p, verdicts in by_pass(c.shapes).items():
        worst = [v for v in ordered(verdicts) if v.status == "regression"]
        if not worst:
            continue
        shapes = " ".join(f"--shape {shlex.quote(v.key)}" for v in worst[:COMMAND_SHAPES])
        buckets = " ".join(f"--bucket {shlex.quote(b)}" for b in dict.fromkeys(v.bucket for v in worst if v.bucket))
        target = f"--arch {shlex.quote(arch)} --toolchain {shlex.quote(toolchain)}"
        steps += [
            {"pass": p, "what": f"reproduce the worst {p} regressions: the baseline's kernel and this one, "
                                "taking turns shape by shape on one GPU",
             "command": f"mha-ci perf measure {target} --subset full --against {shlex.quote(good)} {shapes}"},
            # One commit on both sides: the change is the working tree's, with no range to bisect.
            *([] if good == bad else [
                {"pass": p, "what": "find the first commit that moved them",
                 "command": f"mha-ci perf bisect --good {shlex.quote(good)} --bad {shlex.quote(bad)} {target} "
                            f"--pass {p} {shapes} --out out/bisect-{arch}-{toolchain}-{p}"}]),
            {"pass": p, "what": f"search the regressed {p} buckets' knobs on the regressed shapes "
                                "(compare.json from the job's artifact)",
             "command": f"mha-ci tune {target} --pass {TUNE_PASS[p]} --from-report {shlex.quote(compare_json)}"
                        + (f" {buckets}" if buckets else "")},
        ]
    return steps


def verdict_details(c: Comparison, arch: str, toolchain: str, compare_json: str) -> dict:
    """What a perf job stores in results.json for the summary to lead with: the verdict, each
    pass's tally and its regressed and improved shapes (worst and best first, at most
    MAX_VERDICT_SHAPES of each, with their count), and the next commands."""
    passes = {}
    for p, verdicts in by_pass(c.shapes).items():
        regressed = [v for v in ordered(verdicts) if v.status == "regression"]
        improved = sorted((v for v in verdicts if v.status == "improvement"), key=lambda v: (v.delta_pct or 0, v.key))
        passes[p] = {"tally": counts(verdicts),
                     "regressions": {"count": len(regressed), "shapes": [_moved(v) for v in regressed[:MAX_VERDICT_SHAPES]]},
                     "improvements": {"count": len(improved), "shapes": [_moved(v) for v in improved[:MAX_VERDICT_SHAPES]]}}
    return {"verdict": verdict_line(c), "passes": passes, "report": compare_json.rsplit(".", 1)[0] + ".md",
            "next_steps": next_steps(c, arch, toolchain, compare_json)}


def pyplot():
    """matplotlib.pyplot on the file-only backend (CI has no display); imported on first plot."""
    import matplotlib  # optional, slow to import: plots only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional, slow to import: plots only

    return plt


def figure_png(fig) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    pyplot().close(fig)
    return buf.getvalue()


def _plotted(verdicts: Iterable[ShapeVerdict]) -> list[tuple[ShapeVerdict, float, float]]:
    """(verdict, delta %, threshold %) of the shapes with both sides measured, sorted by delta.
    compare sets a shape's delta and threshold together, so requiring both drops no more shapes."""
    both = [(v, v.delta_pct, v.threshold_pct) for v in verdicts
            if v.delta_pct is not None and v.threshold_pct is not None]
    return sorted(both, key=lambda item: item[1])


def chart_shapes(verdicts: list[ShapeVerdict], worst: int = WORST_SHAPES) -> tuple[list[ShapeVerdict], int]:
    """The shapes a pass's chart draws, largest delta first: every regressed or improved shape,
    then the `worst` others with the largest |delta|; and how many measured shapes are left out
    (the tables list them all). Hundreds of quiet bars would hide the few that moved."""
    plotted = [v for v, _, _ in _plotted(verdicts)]
    changed = [v for v in plotted if v.status in ("regression", "improvement")]
    rest = sorted((v for v in plotted if v.status not in ("regression", "improvement")),
                  key=lambda v: (-abs(v.delta_pct or 0.0), v.key))
    shown = sorted(changed + rest[:worst], key=lambda v: (-(v.delta_pct or 0.0), v.key))
    return shown, len(plotted) - len(shown)


def _panel(ax, plt, verdicts: list[ShapeVerdict], title: str, worst: int) -> dict:
    """One pass's horizontal bars: delta % per shape, largest on top, coloured by status, on a
    symmetric log axis (linear within LINEAR_PCT, so a +-1.5 % band stays as wide as a +300 %
    bar's decade), each shape's threshold as ticks, stalls and identical-code shapes marked, the
    changed bars labelled with their delta, the legend right of the axes. Returns the axes, the
    value labels, the keys drawn (top first) and how many measured shapes were left out."""
    from matplotlib.patches import Patch  # optional, slow to import: plots only

    shown, hidden = chart_shapes(verdicts, worst)
    deltas = [v.delta_pct or 0.0 for v in shown]
    ys = list(range(len(shown)))[::-1]          # the largest delta on top
    bars = ax.barh(ys, deltas, color=[COLOURS[v.status] for v in shown], height=0.75)
    labels = ax.bar_label(bars, labels=[f"{d:+.1f} %" if v.status in ("regression", "improvement") else ""
                                        for v, d in zip(shown, deltas)], padding=3, fontsize=8)
    thresholds = [v.threshold_pct or 0.0 for v in shown]
    ax.scatter(thresholds + [-t for t in thresholds], ys + ys, marker="|", color="black", s=60, linewidths=0.9,
               zorder=3)
    stalled = [i for i, v in enumerate(shown) if v.stall]
    if stalled:
        ax.scatter([deltas[i] for i in stalled], [ys[i] for i in stalled], marker="<", color="black", zorder=4, s=18)
    same = [i for i, v in enumerate(shown) if v.same_code]
    if same:
        ax.scatter([deltas[i] for i in same], [ys[i] for i in same], marker="o", facecolors="none",
                   edgecolors="#1d3557", zorder=4, s=22, linewidths=0.9)
    ax.axvline(0, color="black", linewidth=0.6)
    ax.set_xscale("symlog", linthresh=LINEAR_PCT, linscale=1.0)
    biggest = max([abs(d) for d in deltas] + thresholds + [LINEAR_PCT])
    limit = biggest * (3.0 if biggest > LINEAR_PCT else 1.6)     # room for the value labels on a log scale
    ax.set_xlim(-limit, limit)
    ticks = [t for t in (2, 5, 30, 100, 300, 1000, 3000, 10000) if t <= limit]   # spread evenly on this axis
    ax.set_xticks([-t for t in reversed(ticks)] + [0] + ticks,
                  [f"-{t:g} %" for t in reversed(ticks)] + ["0"] + [f"+{t:g} %" for t in ticks], fontsize=8)
    ax.grid(axis="x", color="#dddddd", linewidth=0.5)
    ax.set_axisbelow(True)
    ax.set_xlabel("delta % of the trimmed mean time, candidate over baseline "
                  f"(symmetric log axis, linear within +-{LINEAR_PCT:g} %)")
    ax.set_ylabel(f"{len(shown)} shapes drawn; {hidden} of {len(shown) + hidden} shapes hidden", fontsize=8)
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_yticks(ys)
    ax.set_yticklabels([v.key for v in shown], fontsize=7)
    ax.set_ylim(-0.7, len(shown) - 0.3)
    n = {s: sum(1 for v in verdicts if v.status == s) for s in STATUSES}
    handles = [Patch(color=COLOURS[s], label=f"{s} ({n[s]})") for s in STATUSES]
    handles.append(plt.Line2D([], [], color="black", marker="|", linestyle="", label="+/- threshold"))
    if stalled:
        handles.append(plt.Line2D([], [], color="black", marker="<", linestyle="", label="stall"))
    if same:
        handles.append(plt.Line2D([], [], color="#1d3557", marker="o", markerfacecolor="none", linestyle="",
                                  label=f"identical code, A/A ({len(same)})"))
    # outside the axes, opaque: inside, a legend lands on the bars it explains
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              framealpha=1.0)
    return {"axes": ax, "labels": list(labels), "shown": [v.key for v in shown], "hidden": hidden}


def plot_figure(c: Comparison, worst: int = WORST_SHAPES):
    """The figure, one panel per pass the comparison holds (forward above backward), and each
    panel's record as _panel returns it. The height follows the bars drawn."""
    plt = pyplot()
    groups = by_pass(c.shapes)
    panels = [(f"{PASS_TITLES[p]}: {counts(vs)}", vs) for p, vs in groups.items()] or [(counts([]), [])]
    rows = [len(chart_shapes(vs, worst)[0]) for _, vs in panels]
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, dpi=100, layout="constrained",
                             figsize=(12.0, sum(1.6 + 0.22 * max(r, 4) for r in rows)),
                             height_ratios=[1.6 + 0.22 * max(r, 4) for r in rows])
    drawn = [_panel(ax, plt, verdicts, title, worst) for ax, (title, verdicts) in zip(axes[:, 0], panels)]
    if c.refused:
        fig.suptitle("REFUSED: not comparable", fontsize=11, color=COLOURS["regression"])
    return fig, drawn


def plot_png(c: Comparison, worst: int = WORST_SHAPES) -> bytes:
    """plot_figure as PNG bytes."""
    return figure_png(plot_figure(c, worst)[0])


# What every column and abbreviation of the page means; each table header carries its line too.
GLOSSARY = {
    "shape": "the shape key: layout, batch b, query heads hq, key/value heads hk, query length sq, "
             "key length sk, head dims dqk and dv, causal c1/c0, and _bwd for the backward pass",
    "M": "query sequence length (sq)", "N": "key/value sequence length (sk)",
    "K": "query/key head dimension (dqk)", "d_v": "value head dimension (dv)",
    "HQ/HK": "query heads / key-value heads (HQ > HK: grouped-query attention)",
    "TP": "tensor-parallel degree(s) of the models the shape comes from (heads are split over TP GPUs)",
    "layout": "dense (padded batch) or varlen (packed sequences), causal mask, window, sink, dropout",
    "dtype": "element type of the inputs (bf16: bfloat16, fp16: float16, fp32: float32)",
    "bucket": "the kernel-config bucket the shape's launch parameters come from (src/mha/configs)",
    "us": "microseconds: the trimmed mean time of one dispatch (baseline us, candidate us)",
    "TFLOP/s": "10^12 matmul floating-point operations per second over the pairs the mask lets through, "
               "baseline / candidate",
    "delta %": "(candidate - baseline) / baseline x 100: positive is slower; in brackets its 95 % "
               "bootstrap interval from both sides' rep means, where both have enough reps",
    "threshold %": "the delta beyond which the shape regressed or improved: max(floor, k x combined noise)",
    "noise %": "each side's run-to-run noise of the trimmed mean, baseline / candidate",
    "status": "regression, improvement, ok (within threshold) or invalid (not judged: too noisy or not measured)",
    "same code": "yes: both sides launched identical compiled code objects, so the delta is noise only",
    "A/A": "a comparison of a thing with itself; its deltas measure the noise",
    "stall": "one dispatch took far longer than the median (a stall of the GPU or host)",
    "source": "where the shape was taken from (model_shapes, bench, test)",
    "numerics": "the outputs against the base's: identical (bitwise), reordered (bits differ, error within "
                "the factor of the base's; x: worst head/base rms_rel), less-accurate (beyond it), "
                "nondeterministic (same code, different bits), wrong (beyond tolerance; x: max_abs over "
                "tol_abs), unmeasured; ulp: largest distance in units of the last place",
    "fwd": "forward pass", "bwd": "backward pass (dQ, dK, dV)",
}
COLUMN_TERMS = {"baseline us": "us", "candidate us": "us", "TFLOP/s base / cand": "TFLOP/s",
                "noise % base / cand": "noise %"}


def _flops(v: ShapeVerdict) -> int | None:
    try:
        return Shape.from_dict(v.shape).flops if v.shape else None
    except (KeyError, TypeError, ValueError):
        return None


def _tflops(flops: int | None, us: float | None) -> str:
    return "-" if not flops or not us else f"{flops / (us * 1e-6) / 1e12:.1f}"


def html_columns(verdicts: list[ShapeVerdict]) -> tuple[str, ...]:
    """The table's columns: COLUMNS, with dtype, noise and TFLOP/s where some shape has them."""
    extra = {"dtype": any((v.shape or {}).get("dtype") for v in verdicts),
             "noise % base / cand": any(v.noise_baseline_pct is not None or v.noise_candidate_pct is not None
                                        for v in verdicts),
             "TFLOP/s base / cand": any(_flops(v) for v in verdicts)}
    after = {"layout": "dtype", "candidate us": "TFLOP/s base / cand", "threshold %": "noise % base / cand"}
    out: list[str] = []
    for col in COLUMNS:
        out.append(col)
        if col in after and extra[after[col]]:
            out.append(after[col])
    return with_numerics(tuple(out), verdicts)


def _html_row(v: ShapeVerdict) -> dict[str, str]:
    flops = _flops(v)
    return row(v) | {"dtype": (v.shape or {}).get("dtype") or "-", "noise % base / cand": _noise_pair(v),
                     "TFLOP/s base / cand": f"{_tflops(flops, v.baseline_us)} / {_tflops(flops, v.candidate_us)}"}


def _html_table(p: str, verdicts: list[ShapeVerdict], worst: int) -> str:
    """A pass's table, every shape; those the chart leaves out are rows of class `quiet`, hidden
    until the pass's "show all" box is ticked (plain CSS, so it works without the script)."""
    esc = html.escape
    columns = html_columns(verdicts)
    drawn = {v.key for v in chart_shapes(verdicts, worst)[0]}
    rows = []
    for v in ordered(verdicts):
        r = _html_row(v)
        cells = "".join(f'<td class="{_cell_class(v, col)}">{esc(r[col])}</td>' if _cell_class(v, col)
                        else f"<td>{esc(r[col])}</td>" for col in columns)
        css = v.status + (" same-code" if v.same_code else "") + ("" if v.key in drawn or v.delta_pct is None else " quiet")
        rows.append(f'<tr class="{css}" title="{esc(v.reason)}">{cells}</tr>')
    heads = "".join(f'<th data-sort="{i}" title="{esc(GLOSSARY[COLUMN_TERMS.get(col, col)])}">{esc(col)}</th>'
                    for i, col in enumerate(columns))
    return (f'<table id="table-{p}"><thead><tr>{heads}</tr></thead><tbody>\n' + "\n".join(rows)
            + "\n</tbody></table>")


def _cell_class(v: ShapeVerdict, column: str) -> str:
    """The CSS class of a cell: the status, and the numerics cell of a shape that fails on them."""
    if column == "status":
        return "status"
    if column == "numerics" and v.numerics is not None:
        red = v.numerics.class_ in (numerics.WRONG, numerics.NONDETERMINISTIC, numerics.UNMEASURED) or (
            v.numerics.class_ == numerics.LESS_ACCURATE and not v.numerics_accepted)
        return "numerics bad" if red else "numerics"
    return ""


# Sorts a table by the clicked header (numbers by value, the rest as text; a second click
# reverses) and keeps the rows holding the typed text. Inline: the page is one file, offline.
SCRIPT = """
function cellValue(row, i) {
  const text = row.cells[i].textContent.trim();
  const number = parseFloat(text.replace(/^\\+/, ''));
  return isNaN(number) ? text.toLowerCase() : number;
}
document.querySelectorAll('th[data-sort]').forEach(th => th.addEventListener('click', () => {
  const body = th.closest('table').tBodies[0];
  const i = Number(th.dataset.sort);
  const down = th.dataset.order !== 'asc';
  th.dataset.order = down ? 'asc' : 'desc';
  const rows = Array.from(body.rows).sort((a, b) => {
    const x = cellValue(a, i), y = cellValue(b, i);
    const order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === 'number' ? -1 : 1);
    return down ? order : -order;
  });
  rows.forEach(r => body.appendChild(r));
}));
document.querySelectorAll('input[data-table]').forEach(box => box.addEventListener('input', () => {
  const filter = box.value.toLowerCase();
  const table = document.getElementById(box.dataset.table);
  Array.from(table.tBodies[0].rows).forEach(r => {
    r.hidden = filter !== '' && !r.textContent.toLowerCase().includes(filter);
  });
}));
"""


def html_page(c: Comparison, png: bytes, worst: int = WORST_SHAPES) -> str:
    """The verdict, the tally and the chart first, then what was compared, then a section per
    pass: its lead lines, stalls and a table; last the glossary."""
    esc = html.escape
    head = "".join(f"<li>{esc(line)}</li>" for line in _header(c))
    sections, hidden_lines = [], []
    for p, verdicts in by_pass(c.shapes).items():
        lead = _pass_lead(verdicts)
        _, hidden = chart_shapes(verdicts, worst)
        measured = len(_plotted(verdicts))
        hidden_line = (f"{hidden} of {measured} {p} shapes hidden from the chart and the table "
                       f"(within threshold, smallest |delta|)")
        if hidden:
            hidden_lines.append(hidden_line)
        stall = "".join(f"<li>{esc(line)}</li>" for line in _stall_lines(verdicts))
        toggle = (f'<input type="checkbox" id="all-{p}" class="show-all"><label for="all-{p}">'
                  f"show all {len(verdicts)} {p} shapes ({esc(hidden_line)})</label>" if hidden else "")
        sections.append(f'<section id="pass-{p}"><h2>{esc(PASS_TITLES[p])}</h2><p><b>{esc(lead[0])}</b></p>'
                        + "".join(f"<p>{esc(line)}</p>" for line in lead[1:])
                        + (f"<h3>Stalls</h3><ul>{stall}</ul>" if stall else "")
                        + f'<p class="tools"><input type="search" data-table="table-{p}" '
                          f'placeholder="filter {p} rows" aria-label="filter the {p} table"> {toggle}</p>'
                        + _html_table(p, verdicts, worst) + "</section>")
    colour_css = "".join(f"tr.{s} td.status{{color:{col};font-weight:bold}}" for s, col in COLOURS.items())
    glossary = "".join(f"<dt>{esc(term)}</dt><dd>{esc(meaning)}</dd>" for term, meaning in GLOSSARY.items())
    verdict_class = "fail" if c.gate_failed else "pass"
    numerics_tally = numerics_line(c)
    numerics_html = f"<p><b>{esc(numerics_tally)}</b></p>\n" if numerics_tally else ""
    hidden_note = "".join(f"<p>{esc(line)}; tick \"show all\" below the pass's heading to list them.</p>"
                          for line in hidden_lines)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mha-ci perf comparison</title>
<style>body{{font-family:sans-serif;margin:1.5em;max-width:100%}}
img{{max-width:100%;height:auto}}
table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}td:first-child{{text-align:left;font-family:monospace}}
th{{cursor:pointer;background:#f4f4f4}}th[data-order=asc]::after{{content:" \\25B2"}}th[data-order=desc]::after{{content:" \\25BC"}}
tr.same-code td{{background:#eef3fa}}tr.quiet{{display:none}}
td.numerics.bad{{color:{COLOURS["regression"]};font-weight:bold}}
section:has(.show-all:checked) tr.quiet{{display:table-row}}
#verdict{{font-size:1.3em;font-weight:bold;padding:0.4em;border-left:6px solid}}
#verdict.fail{{border-color:{COLOURS["regression"]}}}#verdict.pass{{border-color:{COLOURS["improvement"]}}}
dt{{font-weight:bold;font-family:monospace}}dd{{margin:0 0 0.3em 2em}}
{colour_css}</style></head><body>
<h1>Perf comparison</h1>
<p id="verdict" class="{verdict_class}">{esc(verdict_line(c))}</p>
<p><b>{esc(tally_line(c))}</b></p>
{numerics_html}{hidden_note}
<img alt="delta per shape, one panel per pass" src="data:image/png;base64,{base64.b64encode(png).decode()}">
<h2>What was compared</h2><ul>{head}</ul>
{chr(10).join(sections)}
<h2>Abbreviations and columns</h2><dl>{glossary}</dl>
<script>{SCRIPT}</script>
</body></html>
"""
    return page


def write_all(c: Comparison, out_dir: Path) -> dict[str, Path]:
    """compare.json, compare.md, compare.txt, compare.png and compare.html in out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot_png(c)
    paths = {"json": out_dir / "compare.json", "md": out_dir / "compare.md", "text": out_dir / "compare.txt",
             "png": out_dir / "compare.png", "html": out_dir / "compare.html"}
    write_atomic(paths["json"], json.dumps(c.to_dict(), indent=1) + "\n")
    paths["md"].write_text(markdown(c))
    paths["text"].write_text(text(c))
    paths["png"].write_bytes(png)
    paths["html"].write_text(html_page(c, png))
    return paths
