"""index.html of `mha-ci perf history`: one self-contained page (no external resources; it is
opened from an artifact or a checkout, often offline).

At the top the overview: the plot of the largest steps, their table, and every other shape in a
collapsed table, so hundreds of shapes stay readable. Below, every shape with its plot. A filter
by pass, bucket and free text hides rows of all tables; clicking a heading sorts its table.
"""
from __future__ import annotations

import html

from mha_ci.perf.history import History, Series
from mha_ci.perf.history_links import commit_html
from mha_ci.perf.history_steps import direction, moved
from mha_ci.perf.history_text import lead, marks_text, png_name, step_rule_text, top_steps, us
from mha_ci.perf.report import PASS_TITLES

esc = html.escape

SORT_JS = """document.querySelectorAll('th').forEach((th, i) => th.addEventListener('click', () => {
  const body = th.closest('table').tBodies[0], up = th.dataset.up !== '1';
  const val = r => { const t = r.cells[i].dataset.v ?? r.cells[i].textContent; const n = parseFloat(t);
                     return isNaN(n) ? t : n; };
  [...body.rows].sort((a, b) => { const x = val(a), y = val(b); return (x > y ? 1 : x < y ? -1 : 0) * (up ? 1 : -1); })
    .forEach(r => body.appendChild(r));
  th.dataset.up = up ? '1' : '0';
}));"""

# Every row of a shape carries data-pass, data-bucket and data-text (lower case); the count is
# of the table of every shape, which holds each shape once.
FILTER_JS = """(() => {
  const form = document.getElementById('filter'), count = document.getElementById('f-count');
  const apply = () => {
    const p = form.elements.pass.value, b = form.elements.bucket.value;
    const words = form.elements.text.value.trim().toLowerCase().split(/\\s+/).filter(w => w);
    document.querySelectorAll('tr[data-pass]').forEach(r => {
      r.hidden = !((!p || r.dataset.pass === p) && (!b || r.dataset.bucket === b)
                   && words.every(w => r.dataset.text.includes(w)));
    });
    const rows = [...document.querySelectorAll('#every tbody tr')];
    count.textContent = rows.filter(r => !r.hidden).length + ' of ' + rows.length + ' shapes shown';
  };
  form.addEventListener('input', apply);
  form.addEventListener('change', apply);
  form.addEventListener('submit', e => e.preventDefault());
  apply();
})();"""

STYLE = """body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;font-size:12px;margin:0.5em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;vertical-align:middle}
th{cursor:pointer;background:#f3f3f3}td.key{text-align:left;font-family:monospace}td.marks{text-align:left;font-size:11px}
.faster{color:#1a7f37;font-weight:bold}.slower{color:#cf222e;font-weight:bold}.flat,.unknown{color:#6e7781}
form{margin:1em 0;padding:0.5em;background:#f6f8fa;border:1px solid #ddd}form label{margin-right:1em}"""


def _moved_cell(delta_pct: float | None, text: str | None = None) -> str:
    """A move in words, coloured by its direction; sorted by its size."""
    size = abs(delta_pct) if delta_pct is not None else -1
    return f'<td class="{direction(delta_pct)}" data-v="{size:.4f}">{esc(text or moved(delta_pct))}</td>'


def _step_cells(h: History, s: Series) -> str:
    """The step's size and direction, and the version it happened at (with its commit)."""
    if s.step is None:
        return '<td class="flat" data-v="-1">no step</td><td>-</td>'
    v = h.versions[s.step.version]
    return (_moved_cell(s.step.delta_pct) +
            f'<td data-v="{s.step.version}">{commit_html(v.sha, h.link_template)} {esc(v.date[:10])}'
            f' ({us(s.step.before_us)} &rarr; {us(s.step.after_us)} us)</td>')


def _data(s: Series) -> str:
    words = " ".join((s.key, s.pass_, s.bucket or "")).lower()
    return f'data-pass="{esc(s.pass_)}" data-bucket="{esc(s.bucket or "")}" data-text="{esc(words)}"'


def _summary_row(h: History, s: Series) -> str:
    return (f'<tr {_data(s)}><td class="key"><a href="#{esc(s.key)}">{esc(s.key)}</a></td><td>{s.pass_}</td>'
            f'<td>{esc(s.bucket or "-")}</td>{_step_cells(h, s)}{_moved_cell(s.move_pct)}</tr>')


SUMMARY_HEAD = ("<thead><tr><th>shape</th><th>pass</th><th>bucket</th><th>step</th><th>at version</th>"
                "<th>first to last</th></tr></thead>")


def _shape_row(h: History, s: Series) -> str:
    marks = "<br>".join(esc(m) for m in marks_text(h, s)) or "-"
    return (f'<tr id="{esc(s.key)}" {_data(s)}><td class="key">{esc(s.key)}</td><td>{s.pass_}</td>'
            f'<td>{esc(s.bucket or "-")}</td><td>{us(s.first_us)}</td><td>{us(s.last_us)}</td>'
            f'{_moved_cell(s.move_pct)}{_step_cells(h, s)}<td>{len(s.points)}</td><td class="marks">{marks}</td>'
            f'<td><img loading="lazy" alt="{esc(s.key)}" src="{esc(png_name(s.key))}"></td></tr>')


def filter_form(h: History) -> str:
    """The filter's controls: one option per pass and bucket of the page."""
    def options(values: list[str], titles: dict[str, str]) -> str:
        return "".join(f'<option value="{esc(v)}">{esc(titles.get(v, v))}</option>' for v in values)
    passes = sorted({s.pass_ for s in h.series})
    buckets = sorted({s.bucket for s in h.series if s.bucket})
    return (f'<form id="filter"><label>pass <select name="pass"><option value="">all</option>'
            f'{options(passes, PASS_TITLES)}</select></label>'
            f'<label>bucket <select name="bucket"><option value="">all</option>{options(buckets, {})}</select></label>'
            f'<label>text <input name="text" type="search" placeholder="e.g. varlen dqk128"></label>'
            f'<span id="f-count"></span></form>')


def html_page(h: History) -> str:
    top, rest = top_steps(h)
    stepped = sum(1 for s in h.series if s.step)
    versions = "".join(f"<li>{commit_html(v.sha, h.link_template)} {esc(v.date)}: {esc(v.subject)} (measured "
                       f"{commit_html(v.measured_commit, h.link_template) if v.measured_commit else '?'}, "
                       f"triton {esc(str(v.triton))})</li>" for v in h.versions)
    skipped = "".join(f"<li>{commit_html(s['sha'], h.link_template)}: {esc(str(s['reason']))}</li>"
                      for s in h.skipped)
    passes = ", ".join(PASS_TITLES.get(p, p) for p in sorted({s.pass_ for s in h.series}))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mha-ci perf history {esc(h.arch)} {esc(h.toolchain)}</title>
<style>{STYLE}</style></head><body>
<h1>Perf history: {esc(h.arch)} {esc(h.toolchain)}</h1>
<p>{esc(lead(h))} Passes: {esc(passes)}. {stepped} of {len(h.series)} shapes stepped.</p>
<p>{esc(step_rule_text(h))} <span class="faster">Faster</span>: the time went down by that share;
<span class="slower">slower</span>: it went up. Value: trimmed mean; band: max(noise, between-run noise).
Marks: K the shape's code objects changed, C src/mha/configs changed between the measured commits,
T the Triton version changed. The plots' x axis is the date of each version's commit.
Click a column heading to sort.</p>
{filter_form(h)}
<h2>Overview: the {len(top)} largest steps</h2>
<img alt="the largest steps against each shape's first value" src="overview.png">
<table id="top">{SUMMARY_HEAD}<tbody>
{chr(10).join(_summary_row(h, s) for s in top)}
</tbody></table>
<details><summary>The other {len(rest)} shapes</summary>
<table id="rest">{SUMMARY_HEAD}<tbody>
{chr(10).join(_summary_row(h, s) for s in rest)}
</tbody></table></details>
<h2>Every shape</h2>
<table id="every"><thead><tr><th>shape</th><th>pass</th><th>bucket</th><th>first us</th><th>last us</th>
<th>first to last</th><th>step</th><th>at version</th><th>versions</th><th>marks</th><th>series</th></tr></thead><tbody>
{chr(10).join(_shape_row(h, s) for s in h.series)}
</tbody></table>
<h2>Versions</h2><ol start="0">{versions}</ol>
{f"<h2>Skipped versions</h2><ul>{skipped}</ul>" if skipped else ""}
<script>{SORT_JS}
{FILTER_JS}</script>
</body></html>
"""
