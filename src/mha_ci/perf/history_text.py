"""The words and choices the history's page, comment and plots share: a version's time, a step
in words, the marks, which shapes the overview draws."""
from __future__ import annotations

from datetime import datetime, timezone

from mha_ci.perf.history import History, Series, Version
from mha_ci.perf.history_steps import moved

LETTERS = {"kernel": "K", "config": "C", "toolchain": "T"}
# faster green, slower red, everywhere a move is shown (page, plots)
DIRECTION_COLOURS = {"faster": "#1a7f37", "slower": "#cf222e", "flat": "#6e7781", "unknown": "#6e7781"}
# The overview draws this many shapes, the largest steps; with hundreds of shapes more lines are
# unreadable, so the page lists the rest instead.
OVERVIEW_LINES = 10


def when(v: Version) -> datetime:
    """The version's commit time as naive UTC: the x axis of every plot."""
    moment = datetime.fromisoformat(v.date)
    return moment.astimezone(timezone.utc).replace(tzinfo=None) if moment.tzinfo else moment


def step_text(h: History, s: Series) -> str:
    """'20.0 % slower at 1a2b3c4d5e6f (2026-11-30)', or 'no step'."""
    if s.step is None:
        return "no step"
    v = h.versions[s.step.version]
    return f"{moved(s.step.delta_pct)} at {v.sha[:12]} ({v.date[:10]})"


def us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def marks_text(h: History, s: Series) -> list[str]:
    """"K at 1a2b3c4d5e6f (2026-11-30)" for each marked point."""
    return [f"{LETTERS[m]} at {h.versions[p.version].sha[:12]} ({h.versions[p.version].date[:10]})"
            for p in s.points for m in p.marks]


def top_steps(h: History, n: int = OVERVIEW_LINES) -> tuple[list[Series], list[Series]]:
    """The n shapes with the largest steps (largest first) and every other shape (in page order)."""
    stepped = sorted((s for s in h.series if s.step), key=lambda s: (-s.step_size, s.key))[:n]
    chosen = {s.key for s in stepped}
    return stepped, [s for s in h.series if s.key not in chosen]


def lead(h: History) -> str:
    skipped = f"; {len(h.skipped)} version(s) skipped (not a perf document)" if h.skipped else ""
    return (f"{len(h.series)} shapes of `{h.path}` over {len(h.versions)} committed versions "
            f"({h.versions[0].sha[:12]} .. {h.versions[-1].sha[:12]}, history of {h.rev}){skipped}.")


def step_rule_text(h: History) -> str:
    r = h.step_rule
    return (f"A step: the version where the medians before and after differ by more than "
            f"max({r.floor_pct:g} %, {r.k:g} x hypot(noise before, noise after)) (gate of {r.source}).")


def png_name(key: str) -> str:
    return f"shapes/{key}.png"
