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

from mha_ci.perf.compare import STATUSES, Comparison, ShapeVerdict
from mha_ci.perf.shapes import PASSES

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


def _fmt(value, digits=1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _delta(value) -> str:
    return "-" if value is None else f"{value:+.1f}"


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
        "delta %": _delta(v.delta_pct), "threshold %": _fmt(v.threshold_pct),
        "status": v.status + (" (stall)" if v.stall else ""),
        "same code": SAME_CODE[v.same_code],
        "source": ", ".join(v.tags) or "-",
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
    return lines


def _pass_lead(verdicts: list[ShapeVerdict]) -> list[str]:
    """The lines that open a pass's section: its tally, then what its identical-code shapes say."""
    same = same_code_line(verdicts)
    return [counts(verdicts)] + ([f"Same code: {same}"] if same else [])


def text(c: Comparison) -> str:
    out = _header(c) + ["", f"Tally: {tally_line(c)}"]
    for p, verdicts in by_pass(c.shapes).items():
        out += ["", f"{PASS_TITLES[p]}"] + [f"  {line}" for line in _pass_lead(verdicts)]
        for v in ordered(verdicts):
            out.append(f"{v.status:<11} {_delta(v.delta_pct):>8} % (thr {_fmt(v.threshold_pct)} %)  "
                       f"{_fmt(v.baseline_us):>9} -> {_fmt(v.candidate_us):>9} us  {v.key}"
                       + (f"  [{v.reason}]" if v.status == "invalid" else "")
                       + ("  STALL" if v.stall else "")
                       + ("  SAME CODE" if v.same_code else ""))
        stalls = _stall_lines(verdicts)
        if stalls:
            out += ["Stalls:"] + [f"  {line}" for line in stalls]
    return "\n".join(out) + "\n"


def _md_table(verdicts: list[ShapeVerdict]) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for v in verdicts:
        r = row(v)
        r["shape"] = f"`{r['shape']}`"
        lines.append("| " + " | ".join(r[c] for c in COLUMNS) + " |")
    return lines


def _noise_pair(v: ShapeVerdict) -> str:
    return f"{_fmt(v.noise_baseline_pct)} / {_fmt(v.noise_candidate_pct)}"


def _regression_table(verdicts: list[ShapeVerdict]) -> list[str]:
    lines = ["| " + " | ".join(REGRESSION_COLUMNS) + " |", "|" + "---|" * len(REGRESSION_COLUMNS)]
    for v in verdicts:
        r = row(v)
        lines.append(f"| `{v.key}` | **{r['delta %']}** | {r['status']} | {r['threshold %']} | {_noise_pair(v)} | "
                     f"{r['baseline us']} -> {r['candidate us']} | {r['same code']} | {r['bucket']} |")
    return lines


def verdict_line(c: Comparison) -> str:
    """The comparison's verdict in one line: PASS, or FAIL and why."""
    if not c.gate_failed:
        return f"PASS: {tally_line(c)}"
    return "FAIL: " + "; ".join(c.failures)


def markdown(c: Comparison) -> str:
    out = ["# Perf comparison", "", f"**{verdict_line(c)}**", "", f"**{tally_line(c)}**", ""]
    out += [f"- {line}" for line in _header(c)] + [""]
    for p, verdicts in by_pass(c.shapes).items():
        lead = _pass_lead(verdicts)
        out += [f"## {PASS_TITLES[p]}", "", f"**{lead[0]}**", ""]
        for line in lead[1:]:
            out += [line, ""]
        regressions = [v for v in ordered(verdicts) if v.status == "regression"]
        if regressions:
            out += [f"### {p}: regressions", ""] + _regression_table(regressions) + [""]
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
                    "</summary>", ""] + _md_table(others) + ["", "</details>", ""]
    return "\n".join(out)


def _moved(v: ShapeVerdict) -> dict:
    """What the summary shows of a regressed or improved shape (compare.json holds the rest)."""
    data = v.to_dict()
    shown = {name: data[name] for name in ("key", "delta_pct", "threshold_pct", "noise_baseline_pct",
                                           "noise_candidate_pct", "same_code", "bucket")}
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
            {"pass": p, "what": "find the first commit that moved them",
             "command": f"mha-ci perf bisect --good {shlex.quote(good)} --bad {shlex.quote(bad)} {target} "
                        f"--pass {p} {shapes} --out out/bisect-{arch}-{toolchain}-{p}"},
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


def _panel(ax, plt, verdicts: list[ShapeVerdict], title: str) -> None:
    """One pass's bars: delta % per shape, sorted, coloured by status, its thresholds as a band,
    stalls and identical-code shapes marked."""
    from matplotlib.patches import Patch  # optional, slow to import: plots only

    plotted = _plotted(verdicts)
    shown = [v for v, _, _ in plotted]
    deltas = [delta for _, delta, _ in plotted]
    xs = list(range(len(shown)))
    ax.bar(xs, deltas, color=[COLOURS[v.status] for v in shown], width=0.85)
    if shown:
        ax.step(xs, [t for _, _, t in plotted], where="mid", color="black", linewidth=0.7, linestyle="--")
        ax.step(xs, [-t for _, _, t in plotted], where="mid", color="black", linewidth=0.7, linestyle="--")
    stalled = [i for i, v in enumerate(shown) if v.stall]
    if stalled:
        ax.scatter(stalled, [deltas[i] for i in stalled], marker="v", color="black", zorder=3, s=18)
    same = [i for i, v in enumerate(shown) if v.same_code]
    if same:
        ax.scatter(same, [deltas[i] for i in same], marker="o", facecolors="none", edgecolors="#1d3557",
                   zorder=4, s=22, linewidths=0.9)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xlabel(f"shape (sorted by delta; {len(shown)} of {len(verdicts)} with both sides measured)")
    ax.set_ylabel("delta % (trimmed mean)")
    ax.set_title(title, fontsize=10)
    if len(shown) <= 40:
        ax.set_xticks(xs)
        ax.set_xticklabels([v.key for v in shown], rotation=90, fontsize=6)
    else:
        ax.set_xticks([])
    n = {s: sum(1 for v in verdicts if v.status == s) for s in STATUSES}
    handles = [Patch(color=COLOURS[s], label=f"{s} ({n[s]})") for s in STATUSES]
    handles.append(plt.Line2D([], [], color="black", linestyle="--", linewidth=0.7, label="+/- threshold"))
    if stalled:
        handles.append(plt.Line2D([], [], color="black", marker="v", linestyle="", label="stall"))
    if same:
        handles.append(plt.Line2D([], [], color="#1d3557", marker="o", markerfacecolor="none", linestyle="",
                                  label=f"identical code on both sides, A/A ({len(same)})"))
    ax.legend(handles=handles, fontsize=8, loc="best", framealpha=0.8)


def plot_png(c: Comparison) -> bytes:
    """One panel per pass the comparison holds (forward above backward), each as _panel draws it."""
    plt = pyplot()
    groups = by_pass(c.shapes)
    panels = [(f"{PASS_TITLES[p]}: {counts(vs)}", vs) for p, vs in groups.items()] or [(counts([]), [])]
    widest = max(len(_plotted(vs)) for _, vs in panels)
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, dpi=100,
                             figsize=(max(8.0, min(24.0, 0.06 * widest + 6)), 1.0 + 4.5 * len(panels)))
    for ax, (title, verdicts) in zip(axes[:, 0], panels):
        _panel(ax, plt, verdicts, title)
    if c.refused:
        fig.suptitle("REFUSED: not comparable", fontsize=11, color=COLOURS["regression"])
    fig.tight_layout()
    return figure_png(fig)


def _html_table(verdicts: list[ShapeVerdict]) -> str:
    esc = html.escape
    rows = []
    for v in ordered(verdicts):
        r = row(v)
        cells = "".join(f"<td>{esc(r[col])}</td>" for col in COLUMNS)
        css = v.status + (" same-code" if v.same_code else "")
        rows.append(f'<tr class="{css}" title="{esc(v.reason)}">{cells}</tr>')
    return (f"<table><tr>{''.join(f'<th>{esc(col)}</th>' for col in COLUMNS)}</tr>\n"
            + "\n".join(rows) + "\n</table>")


def html_page(c: Comparison, png: bytes) -> str:
    esc = html.escape
    head = "".join(f"<li>{esc(line)}</li>" for line in _header(c))
    sections = []
    for p, verdicts in by_pass(c.shapes).items():
        lead = _pass_lead(verdicts)
        stall = "".join(f"<li>{esc(line)}</li>" for line in _stall_lines(verdicts))
        sections.append(f'<section id="pass-{p}"><h2>{esc(PASS_TITLES[p])}</h2><p><b>{esc(lead[0])}</b></p>'
                        + "".join(f"<p>{esc(line)}</p>" for line in lead[1:])
                        + (f"<h3>Stalls</h3><ul>{stall}</ul>" if stall else "")
                        + _html_table(verdicts) + "</section>")
    status_col = COLUMNS.index("status") + 1
    colour_css = "".join(f"tr.{s} td:nth-child({status_col}){{color:{col};font-weight:bold}}"
                         for s, col in COLOURS.items())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mha-ci perf comparison</title>
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}td:first-child{{text-align:left;font-family:monospace}}
tr.same-code td{{background:#eef3fa}}
{colour_css}</style></head><body>
<h1>Perf comparison</h1><ul>{head}</ul>
<p><b>{esc(tally_line(c))}</b></p>
<img alt="delta per shape, one panel per pass" src="data:image/png;base64,{base64.b64encode(png).decode()}">
{chr(10).join(sections)}
</body></html>
"""


def write_all(c: Comparison, out_dir: Path) -> dict[str, Path]:
    """compare.json, compare.md, compare.txt, compare.png and compare.html in out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot_png(c)
    paths = {"json": out_dir / "compare.json", "md": out_dir / "compare.md", "text": out_dir / "compare.txt",
             "png": out_dir / "compare.png", "html": out_dir / "compare.html"}
    paths["json"].write_text(json.dumps(c.to_dict(), indent=1) + "\n")
    paths["md"].write_text(markdown(c))
    paths["text"].write_text(text(c))
    paths["png"].write_bytes(png)
    paths["html"].write_text(html_page(c, png))
    return paths
