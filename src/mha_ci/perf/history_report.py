"""The reports of `mha-ci perf history`: history.json, history.md, overview.png, index.html and
one small plot per shape (shapes/<key>.png).

Every number shown is a field of history.json, which holds the series with the commit of each
version, so a reader can trace any point to the baseline file at that commit. Marks: K where the
shape's code objects changed, C where src/mha/configs changed between the measured commits, T
where the Triton version changed (mha_ci.perf.history).
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from mha_ci.perf.history import History, Series, artifact_name
from mha_ci.perf.report import PASS_TITLES, figure_png, pyplot

LETTERS = {"kernel": "K", "config": "C", "toolchain": "T"}
MARK_COLOURS = {"kernel": "#d62828", "config": "#1d3557", "toolchain": "#f4a261"}
TOP_MOVERS = 20
OVERVIEW_LINES = 10


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} %"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _marks(h: History, s: Series) -> list[str]:
    """"K at 1a2b3c4d5e6f (2026-11-30)" for each marked point."""
    return [f"{LETTERS[m]} at {h.versions[p.version].sha[:12]} ({h.versions[p.version].date[:10]})"
            for p in s.points for m in p.marks]


def shape_figure(h: History, s: Series):
    """The shape's values over the versions with the noise band, marks as vertical lines."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.0, 1.8), dpi=80)
    valued = [p for p in s.points if p.value_us is not None]
    xs = [p.version for p in valued]
    ys = [p.value_us for p in valued]
    ax.plot(xs, ys, marker="o", markersize=3, color="black", linewidth=1)
    banded = [p for p in valued if p.noise_pct is not None]
    if banded:
        ax.fill_between([p.version for p in banded], [p.value_us * (1 - p.noise_pct / 100) for p in banded],  # type: ignore[operator]
                        [p.value_us * (1 + p.noise_pct / 100) for p in banded], color="#9a9a9a", alpha=0.35,  # type: ignore[operator]
                        linewidth=0)
    for p in s.points:
        for i, m in enumerate(p.marks):
            ax.axvline(p.version - 0.5, color=MARK_COLOURS[m], linewidth=0.8, linestyle="--")
            # above the axes, side by side: inside, a letter crosses its own line and the series
            ax.annotate(LETTERS[m], (p.version - 0.5, 1.0), xycoords=("data", "axes fraction"),
                        xytext=(7 * i - 3.5 * (len(p.marks) - 1), 1), textcoords="offset points",
                        fontsize=7, color=MARK_COLOURS[m], ha="center", va="bottom")
    ax.set_xlim(-0.6, max(len(h.versions) - 0.4, 0.6))
    # version numbers, as in the page's list of versions: refreshes of one day share a date
    ax.set_xticks(range(len(h.versions)))
    ax.set_xticklabels([str(i) for i in range(len(h.versions))], fontsize=6)
    ax.tick_params(axis="y", labelsize=6)
    ax.set_ylabel("us", fontsize=7)
    fig.tight_layout()
    return fig


def shape_png(h: History, s: Series) -> bytes:
    return figure_png(shape_figure(h, s))


def overview_figure(h: History):
    """Each shape's value relative to its first, per version: the largest movers coloured and
    named, the rest grey."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    for rank, s in enumerate(h.series):
        first = s.first_us
        valued = [p for p in s.points if p.value_us is not None]
        if not first or len(valued) < 2:
            continue
        top = rank < OVERVIEW_LINES
        ax.plot([p.version for p in valued], [(p.value_us - first) / first * 100 for p in valued],  # type: ignore[operator]
                color=None if top else "#c8c8c8", linewidth=1.2 if top else 0.6,
                label=f"{s.key} ({_pct(s.move_pct)})" if top else None,
                zorder=3 + OVERVIEW_LINES - rank if top else 1)     # the largest move drawn last
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(h.versions)))
    ax.set_xticklabels([f"{v.date[:10]}\n{v.sha[:8]}" for v in h.versions], fontsize=6, rotation=45)
    ax.set_ylabel("% against the shape's first value")
    ax.set_title(f"{h.arch} {h.toolchain}: {len(h.series)} shapes over {len(h.versions)} baseline versions",
                 fontsize=10)
    if h.series:
        ax.legend(fontsize=6, loc="best", framealpha=0.8)
    fig.tight_layout()
    return fig


def overview_png(h: History) -> bytes:
    return figure_png(overview_figure(h))


def _lead(h: History) -> str:
    skipped = f"; {len(h.skipped)} version(s) skipped (not a perf document)" if h.skipped else ""
    return (f"{len(h.series)} shapes of `{h.path}` over {len(h.versions)} committed versions "
            f"({h.versions[0].sha[:12]} .. {h.versions[-1].sha[:12]}, history of {h.rev}){skipped}.")


def markdown(h: History, top: int = TOP_MOVERS) -> str:
    """A pull-request comment: the largest movers, first value against last, with their marks."""
    lines = [f"# Perf history: {h.arch} {h.toolchain}", "", _lead(h), "",
             "Marks: K the shape's code objects changed, C src/mha/configs changed, T the Triton version changed.",
             "", f"## Top movers ({min(top, len(h.series))} of {len(h.series)})", "",
             "| shape | pass | first us | last us | move | versions | marks |", "|---|---|---|---|---|---|---|"]
    for s in h.series[:top]:
        marks = "; ".join(_marks(h, s)) or "-"
        lines.append(f"| `{s.key}` | {s.pass_} | {_us(s.first_us)} | {_us(s.last_us)} | {_pct(s.move_pct)} | "
                     f"{len(s.points)} | {marks} |")
    lines += ["", f"Every point, with its commit: history.json of the `{artifact_name(h.arch)}` artifact.", ""]
    return "\n".join(lines)


def _png_name(key: str) -> str:
    return f"shapes/{key}.png"


_SORT_JS = """document.querySelectorAll('th').forEach((th, i) => th.addEventListener('click', () => {
  const body = th.closest('table').tBodies[0], up = th.dataset.up !== '1';
  const val = r => { const t = r.cells[i].dataset.v ?? r.cells[i].textContent; const n = parseFloat(t);
                     return isNaN(n) ? t : n; };
  [...body.rows].sort((a, b) => { const x = val(a), y = val(b); return (x > y ? 1 : x < y ? -1 : 0) * (up ? 1 : -1); })
    .forEach(r => body.appendChild(r));
  th.dataset.up = up ? '1' : '0';
}));"""


def html_page(h: History) -> str:
    esc = html.escape
    rows = []
    for s in h.series:
        size = abs(s.move_pct) if s.move_pct is not None else -1
        marks = "<br>".join(esc(m) for m in _marks(h, s)) or "-"
        rows.append(f'<tr id="{esc(s.key)}"><td>{esc(s.key)}</td><td>{s.pass_}</td><td>{_us(s.first_us)}</td>'
                    f'<td>{_us(s.last_us)}</td><td data-v="{size:.4f}">{_pct(s.move_pct)}</td>'
                    f'<td>{len(s.points)}</td><td>{marks}</td>'
                    f'<td><img loading="lazy" alt="{esc(s.key)}" src="{esc(_png_name(s.key))}"></td></tr>')
    versions = "".join(f"<li><code>{v.sha[:12]}</code> {esc(v.date)}: {esc(v.subject)} (measured "
                       f"<code>{esc((v.measured_commit or '?')[:12])}</code>, triton {esc(str(v.triton))})</li>"
                       for v in h.versions)
    skipped = "".join(f"<li><code>{s['sha'][:12]}</code>: {esc(str(s['reason']))}</li>" for s in h.skipped)
    passes = ", ".join(PASS_TITLES[p] for p in sorted({s.pass_ for s in h.series}))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mha-ci perf history {esc(h.arch)} {esc(h.toolchain)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right;vertical-align:middle}}
th{{cursor:pointer;background:#f3f3f3}}td:first-child{{text-align:left;font-family:monospace}}
td:nth-child(7){{text-align:left;font-size:11px}}</style></head><body>
<h1>Perf history: {esc(h.arch)} {esc(h.toolchain)}</h1>
<p>{esc(_lead(h))} Passes: {esc(passes)}.</p>
<p>Value: trimmed mean; band: max(noise, between-run noise). Marks: K the shape's code objects changed,
C src/mha/configs changed between the measured commits, T the Triton version changed; a plot's x axis
is the number of the version in the list at the bottom. Click a column heading to sort; largest move first.</p>
<img alt="every shape against its first value" src="overview.png">
<table><thead><tr><th>shape</th><th>pass</th><th>first us</th><th>last us</th><th>move</th><th>versions</th>
<th>marks</th><th>series</th></tr></thead><tbody>
{chr(10).join(rows)}
</tbody></table>
<h2>Versions</h2><ol start="0">{versions}</ol>
{f"<h2>Skipped versions</h2><ul>{skipped}</ul>" if skipped else ""}
<script>{_SORT_JS}</script>
</body></html>
"""


def write_all(h: History, out_dir: Path) -> dict[str, Path]:
    """history.json, history.md, overview.png, index.html and shapes/<key>.png in out_dir."""
    out_dir = Path(out_dir)
    (out_dir / "shapes").mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "history.json", "md": out_dir / "history.md", "png": out_dir / "overview.png",
             "html": out_dir / "index.html"}
    paths["json"].write_text(json.dumps(h.to_dict(), indent=1) + "\n")
    paths["md"].write_text(markdown(h))
    paths["png"].write_bytes(overview_png(h))
    for s in h.series:
        (out_dir / _png_name(s.key)).write_bytes(shape_png(h, s))
    paths["html"].write_text(html_page(h))
    return paths
