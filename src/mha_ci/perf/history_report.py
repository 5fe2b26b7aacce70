"""The reports of `mha-ci perf history`: history.json, history.md, overview.png, index.html and
one small plot per shape (shapes/<key>.png).

Every number shown is a field of history.json, which holds the series with the commit of each
version, so a reader can trace any point to the baseline file at that commit. Marks: K where the
shape's code objects changed, C where src/mha/configs changed between the measured commits, T
where the Triton version changed (mha_ci.perf.history). The page itself is mha_ci.perf.history_page.
"""
from __future__ import annotations

import json
from pathlib import Path

from mha_ci.files import write_atomic

from mha_ci.perf.history import History, Series, artifact_name
from mha_ci.perf.history_links import commit_markdown
from mha_ci.perf.history_page import html_page
from mha_ci.perf.report import figure_png, pyplot
from mha_ci.perf.history_steps import direction, moved
from mha_ci.perf.history_text import (DIRECTION_COLOURS, LETTERS, OVERVIEW_LINES, lead, marks_text, png_name,
                                      step_rule_text, step_text, top_steps, us, when)

MARK_COLOURS = {"kernel": "#d62828", "config": "#1d3557", "toolchain": "#f4a261"}
TOP_MOVERS = 20


def _date_axis(ax) -> None:
    import matplotlib.dates as mdates  # optional, slow to import: plots only
    locator = mdates.AutoDateLocator(minticks=2, maxticks=6)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


def shape_figure(h: History, s: Series):
    """The shape's values over the versions' dates with the noise band, marks as vertical lines
    between the two versions they compare, the step's after-stretch in its direction's colour."""
    plt = pyplot()
    import matplotlib.dates as mdates  # optional, slow to import: plots only
    fig, ax = plt.subplots(figsize=(4.0, 1.8), dpi=80)
    valued = [p for p in s.points if p.value_us is not None]
    xs = [when(h.versions[p.version]) for p in valued]
    ax.plot(xs, [p.value_us for p in valued], marker="o", markersize=3, color="black", linewidth=1)
    banded = [p for p in valued if p.noise_pct is not None]
    if banded:
        ax.fill_between([when(h.versions[p.version]) for p in banded],
                        [p.value_us * (1 - p.noise_pct / 100) for p in banded],  # type: ignore[operator]
                        [p.value_us * (1 + p.noise_pct / 100) for p in banded], color="#9a9a9a", alpha=0.35,  # type: ignore[operator]
                        linewidth=0)
    if s.step is not None:
        after = [p for p in valued if p.version >= s.step.version]
        ax.plot([when(h.versions[p.version]) for p in after], [s.step.after_us] * len(after), linewidth=2,
                color=DIRECTION_COLOURS[direction(s.step.delta_pct)], alpha=0.8)
    previous = None
    for p in s.points:
        if previous is not None:
            # halfway between the two versions the mark compares
            x = when(h.versions[previous.version]) + (when(h.versions[p.version]) - when(h.versions[previous.version])) / 2
            for i, m in enumerate(p.marks):
                ax.axvline(x, color=MARK_COLOURS[m], linewidth=0.8, linestyle="--")
                # above the axes, side by side: inside, a letter crosses its own line and the series
                ax.annotate(LETTERS[m], (mdates.date2num(x), 1.0), xycoords=("data", "axes fraction"),
                            xytext=(7 * i - 3.5 * (len(p.marks) - 1), 1), textcoords="offset points",
                            fontsize=7, color=MARK_COLOURS[m], ha="center", va="bottom")
        previous = p
    _date_axis(ax)
    ax.tick_params(axis="both", labelsize=6)
    ax.set_ylabel("us", fontsize=7)
    fig.tight_layout()
    return fig


def shape_png(h: History, s: Series) -> bytes:
    return figure_png(shape_figure(h, s))


def overview_figure(h: History, n: int = OVERVIEW_LINES):
    """The n largest steps, each shape's value relative to its first over the versions' dates;
    largest first in the legend, faster solid, slower dashed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    top, rest = top_steps(h, n)
    for rank, s in enumerate(top):
        first = s.first_us
        valued = [p for p in s.points if p.value_us is not None]
        ax.plot([when(h.versions[p.version]) for p in valued],
                [(p.value_us - first) / first * 100 for p in valued],  # type: ignore[operator]
                marker="o", markersize=2.5, linewidth=1.2,
                linestyle="-" if direction(s.step.delta_pct) == "faster" else "--",  # type: ignore[union-attr]
                label=f"{s.key} ({step_text(h, s)})", zorder=3 + n - rank)   # the largest step drawn last
    ax.axhline(0, color="black", linewidth=0.6)
    _date_axis(ax)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_ylabel("% against the shape's first value (down: faster)")
    stepped = sum(1 for s in h.series if s.step)
    ax.set_title(f"{h.arch} {h.toolchain}: the {len(top)} largest steps ({stepped} of {len(h.series)} shapes "
                 f"stepped, {len(h.versions)} baseline versions)", fontsize=10)
    if top:
        ax.legend(fontsize=6, loc="best", framealpha=0.8)
    else:
        ax.text(0.5, 0.5, "no shape stepped", transform=ax.transAxes, ha="center", color="#6e7781")
    fig.tight_layout()
    return fig


def overview_png(h: History) -> bytes:
    return figure_png(overview_figure(h))


def markdown(h: History, top: int = TOP_MOVERS) -> str:
    """A pull-request comment: the largest movers, first value against last, with step and marks."""
    lines = [f"# Perf history: {h.arch} {h.toolchain}", "", lead(h), "", step_rule_text(h),
             "Faster: the time went down. Marks: K the shape's code objects changed, C src/mha/configs changed, "
             "T the Triton version changed.",
             "", f"## Top movers ({min(top, len(h.series))} of {len(h.series)})", "",
             "| shape | pass | first us | last us | move | step | versions | marks |",
             "|---|---|---|---|---|---|---|---|"]
    for s in h.series[:top]:
        marks = "; ".join(marks_text(h, s)) or "-"
        step = "-" if s.step is None else \
            f"{moved(s.step.delta_pct)} at {commit_markdown(h.versions[s.step.version].sha, h.link_template)}"
        lines.append(f"| `{s.key}` | {s.pass_} | {us(s.first_us)} | {us(s.last_us)} | {moved(s.move_pct)} | "
                     f"{step} | {len(s.points)} | {marks} |")
    lines += ["", f"Every point, with its commit: history.json of the `{artifact_name(h.arch)}` artifact.", ""]
    return "\n".join(lines)


def write_all(h: History, out_dir: Path) -> dict[str, Path]:
    """history.json, history.md, overview.png, index.html and shapes/<key>.png in out_dir."""
    out_dir = Path(out_dir)
    (out_dir / "shapes").mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "history.json", "md": out_dir / "history.md", "png": out_dir / "overview.png",
             "html": out_dir / "index.html"}
    write_atomic(paths["json"], json.dumps(h.to_dict(), indent=1) + "\n")
    paths["md"].write_text(markdown(h))
    paths["png"].write_bytes(overview_png(h))
    for s in h.series:
        (out_dir / png_name(s.key)).write_bytes(shape_png(h, s))
    paths["html"].write_text(html_page(h))
    return paths
