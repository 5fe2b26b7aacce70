"""Reports of a perf comparison: plain text, a markdown table, a PNG plot, a static HTML page.

Every number shown is a field of the comparison JSON (`Comparison.to_dict()`), which in turn
comes from the two mha-ci.perf/1 documents; the shape key heads every row so a reader can
find it there. The layout of the table follows the reference study of docs/workloads.md
(M, N, K, d_v, HQ/HK, TP, layout, bucket, baseline, candidate, delta %, status, source tag).
"""
from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

from mha_ci.perf.compare import STATUSES, Comparison, ShapeVerdict

COLOURS = {"improvement": "#2a9d3f", "ok": "#9a9a9a", "regression": "#d62828", "invalid": "#f4a261"}
COLUMNS = ("shape", "M", "N", "K", "d_v", "HQ/HK", "TP", "layout", "bucket", "baseline us", "candidate us",
           "delta %", "threshold %", "status", "source")


def tally_line(c: Comparison) -> str:
    s = c.summary
    total = sum(s.values())
    words = {"improvement": "improvements", "regression": "regressions"}
    parts = [f"{s[k]} {words.get(k, k) if s[k] != 1 else k}" for k in STATUSES]
    return f"{', '.join(parts)} of {total} shapes"


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
        "source": ", ".join(v.tags) or "-",
    }


def ordered(c: Comparison) -> list[ShapeVerdict]:
    """Regressions first (worst first), then invalid, then the rest by delta, largest first."""
    rank = {"regression": 0, "invalid": 1, "ok": 2, "improvement": 3}
    return sorted(c.shapes, key=lambda v: (rank[v.status], -(v.delta_pct if v.delta_pct is not None else 0), v.key))


def _stall_lines(c: Comparison) -> list[str]:
    lines = []
    stalled = [(v, v.stall) for v in c.shapes if v.stall]     # c.stalled, each with its stall
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


def _side(p: dict) -> str:
    versions = p.get("versions") or {}
    return (f"{p.get('gpu') or p.get('arch')} ({p.get('arch')}), toolchain {p.get('toolchain')} "
            f"(torch {versions.get('torch')}, triton {versions.get('triton')}), kernel {p.get('kernel')}, "
            f"commit {(p.get('commit') or '?')[:12]}, {p.get('date')}"
            + (f", PLANTED +{p['planted_slowdown_pct']} %" if p.get("planted_slowdown_pct") else ""))


def _header(c: Comparison) -> list[str]:
    g = c.policy
    lines = [f"Baseline: {_side(c.baseline_provenance)}", f"Candidate: {_side(c.candidate_provenance)}",
             f"Gate: regression when delta > max({g.floor_pct:g} %, {g.k:g} x combined noise); "
             f"invalid when either side's noise > {g.invalid_noise_pct:g} %; "
             f"stall: a dispatch > {g.stall_factor:g} x median."]
    if c.cross_toolchain:
        lines.append("Cross-toolchain comparison (requested with --cross-toolchain).")
    if c.not_measured:
        lines.append(f"{c.not_measured} baseline shapes are outside the candidate's subset and were not compared.")
    if c.refused:
        lines.append(f"REFUSED: {c.refused}")
    lines += [f"NOTE: {note}" for note in c.notes]
    lines += [f"GATE FAILS: {why}" for why in c.failures if not why.startswith("refused: ")]
    return lines


def text(c: Comparison) -> str:
    out = _header(c) + ["", f"Tally: {tally_line(c)}", ""]
    for v in ordered(c):
        out.append(f"{v.status:<11} {_delta(v.delta_pct):>8} % (thr {_fmt(v.threshold_pct)} %)  "
                   f"{_fmt(v.baseline_us):>9} -> {_fmt(v.candidate_us):>9} us  {v.key}"
                   + (f"  [{v.reason}]" if v.status == "invalid" else "")
                   + ("  STALL" if v.stall else ""))
    stalls = _stall_lines(c)
    if stalls:
        out += ["", "Stalls:"] + [f"  {line}" for line in stalls]
    return "\n".join(out) + "\n"


def _md_table(verdicts: list[ShapeVerdict]) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for v in verdicts:
        r = row(v)
        r["shape"] = f"`{r['shape']}`"
        lines.append("| " + " | ".join(r[c] for c in COLUMNS) + " |")
    return lines


def markdown(c: Comparison) -> str:
    out = ["# Perf comparison", ""] + [f"- {line}" for line in _header(c)]
    out += ["", f"**{tally_line(c)}**", ""]
    regressions = [v for v in ordered(c) if v.status == "regression"]
    if regressions:
        out += ["## Regressions", ""] + _md_table(regressions) + [""]
    stalls = _stall_lines(c)
    if stalls:
        out += ["## Stalls", ""] + [f"- `{line.split(':', 1)[0]}`:{line.split(':', 1)[1]}" for line in stalls] + [""]
    invalid = [v for v in ordered(c) if v.status == "invalid"]
    if invalid:
        out += ["## Invalid (not judged)", ""] + [f"- `{v.key}`: {v.reason}" for v in invalid] + [""]
    out += ["## All shapes", ""] + _md_table(ordered(c)) + [""]
    return "\n".join(out)


def pyplot():
    """matplotlib.pyplot on the file-only backend (CI has no display); imported on first plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_png(fig) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    pyplot().close(fig)
    return buf.getvalue()


def _plotted(c: Comparison) -> list[tuple[ShapeVerdict, float, float]]:
    """(verdict, delta %, threshold %) of the shapes with both sides measured, sorted by delta.
    compare sets a shape's delta and threshold together, so requiring both drops no more shapes."""
    both = [(v, v.delta_pct, v.threshold_pct) for v in c.shapes
            if v.delta_pct is not None and v.threshold_pct is not None]
    return sorted(both, key=lambda item: item[1])


def plot_png(c: Comparison) -> bytes:
    """Delta % per shape, sorted, coloured by status, with each shape's threshold as a band."""
    from matplotlib.patches import Patch

    plt = pyplot()

    plotted = _plotted(c)
    verdicts = [v for v, _, _ in plotted]
    deltas = [delta for _, delta, _ in plotted]
    fig, ax = plt.subplots(figsize=(max(8.0, min(24.0, 0.06 * len(verdicts) + 6)), 5.0), dpi=100)
    xs = list(range(len(verdicts)))
    ax.bar(xs, deltas, color=[COLOURS[v.status] for v in verdicts], width=0.85)
    if verdicts:
        ax.step(xs, [t for _, _, t in plotted], where="mid", color="black", linewidth=0.7, linestyle="--")
        ax.step(xs, [-t for _, _, t in plotted], where="mid", color="black", linewidth=0.7, linestyle="--")
    stalled = [i for i, v in enumerate(verdicts) if v.stall]
    if stalled:
        ax.scatter(stalled, [deltas[i] for i in stalled], marker="v", color="black", zorder=3, s=18)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xlabel(f"shape (sorted by delta; {len(verdicts)} with both sides measured)")
    ax.set_ylabel("delta % (trimmed mean)")
    ax.set_title(tally_line(c) + (" - REFUSED" if c.refused else ""), fontsize=10)
    if len(verdicts) <= 40:
        ax.set_xticks(xs)
        ax.set_xticklabels([v.key for v in verdicts], rotation=90, fontsize=6)
    else:
        ax.set_xticks([])
    handles = [Patch(color=COLOURS[s], label=f"{s} ({c.summary[s]})") for s in STATUSES]
    handles.append(plt.Line2D([], [], color="black", linestyle="--", linewidth=0.7, label="+/- threshold"))
    if stalled:
        handles.append(plt.Line2D([], [], color="black", marker="v", linestyle="", label="stall"))
    ax.legend(handles=handles, fontsize=8, loc="best", framealpha=0.8)
    fig.tight_layout()
    return figure_png(fig)


def html_page(c: Comparison, png: bytes) -> str:
    esc = html.escape
    head = "".join(f"<li>{esc(line)}</li>" for line in _header(c))
    stall = "".join(f"<li>{esc(line)}</li>" for line in _stall_lines(c))
    rows = []
    for v in ordered(c):
        r = row(v)
        cells = "".join(f"<td>{esc(r[col])}</td>" for col in COLUMNS)
        rows.append(f'<tr class="{v.status}" title="{esc(v.reason)}">{cells}</tr>')
    colour_css = "".join(f"tr.{s} td:nth-child(14){{color:{col};font-weight:bold}}" for s, col in COLOURS.items())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mha-ci perf comparison</title>
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}td:first-child{{text-align:left;font-family:monospace}}
{colour_css}</style></head><body>
<h1>Perf comparison</h1><ul>{head}</ul>
<p><b>{esc(tally_line(c))}</b></p>
<img alt="delta per shape" src="data:image/png;base64,{base64.b64encode(png).decode()}">
{"<h2>Stalls</h2><ul>" + stall + "</ul>" if stall else ""}
<h2>Shapes</h2>
<table><tr>{"".join(f"<th>{esc(col)}</th>" for col in COLUMNS)}</tr>
{chr(10).join(rows)}
</table></body></html>
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
