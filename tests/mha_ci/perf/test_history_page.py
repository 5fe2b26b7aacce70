"""The history page's pure parts, on hand-made series (no git, no GPU): step detection, the
words for a move, the commit link template, the filter's markup and the overview's top N."""
from __future__ import annotations

import re

import pytest

from mha_ci.perf import history_report
from mha_ci.perf.history import History, Point, Series, Version
from mha_ci.perf.history_links import commit_html, template_of_url
from mha_ci.perf.history_page import html_page
from mha_ci.perf.history_steps import StepRule, direction, find_step, moved
from mha_ci.perf.history_text import top_steps

RULE = StepRule(floor_pct=3.0, k=2.0, source="test")


def pts(values: list[float], noise: float | None = 1.0) -> list[tuple[int, float, float | None]]:
    return [(i, v, noise) for i, v in enumerate(values)]


def test_a_clean_step_is_found_at_the_version_that_moved():
    """Splits next to the step see the same medians; only the step's leaves both stretches flat."""
    step = find_step(pts([100, 100, 100, 80, 80, 80]), RULE)
    assert step is not None and step.version == 3
    assert (step.before_us, step.after_us, step.delta_pct) == (100, 80, pytest.approx(-20.0))
    assert step.threshold_pct == 3.0                    # 2 x hypot(1, 1) = 2.8: the floor holds


def test_one_odd_version_is_not_a_step():
    assert find_step(pts([100, 100, 130, 100, 100]), RULE) is None


def test_a_move_within_the_threshold_is_not_a_step():
    assert find_step(pts([100, 102.5, 102.5]), RULE) is None           # under the 3 % floor
    # 8 % noise on both sides: threshold 2 x hypot(8, 8) = 22.6 %
    assert find_step(pts([100, 100, 120, 120], noise=8.0), RULE) is None
    assert find_step(pts([100, 100, 120, 120], noise=None), RULE) is not None   # no noise stored: the floor


def test_the_largest_of_two_steps_is_reported():
    step = find_step(pts([100, 100, 110, 110, 60, 60]), RULE)
    assert step is not None and step.version == 4 and step.delta_pct < 0


def test_a_step_is_not_put_late_by_a_short_after_stretch():
    """Split at the last version, the before median (14750) already counts the step's values and
    differs more from the last value than the true split's medians do; the step is still at 6."""
    step = find_step(pts([14080, 14750, 14750, 14788, 14788, 14788, 11357, 11357, 11223]), RULE)
    assert step is not None and step.version == 6
    assert (step.before_us, step.after_us) == (14769, 11357)


def test_one_value_has_no_step():
    assert find_step(pts([100]), RULE) is None
    assert find_step([], RULE) is None


@pytest.mark.parametrize("delta, words, way", [
    (-12.34, "12.3 % faster", "faster"),
    (4.0, "4.0 % slower", "slower"),
    (0.01, "no change", "flat"),
    (None, "-", "unknown"),
])
def test_moves_are_said_as_faster_or_slower(delta, words, way):
    assert moved(delta) == words and direction(delta) == way


@pytest.mark.parametrize("url, template", [
    ("https://github.com/acme/mha.git", "https://github.com/acme/mha/commit/{sha}"),
    ("https://github.com/acme/mha", "https://github.com/acme/mha/commit/{sha}"),
    ("git@github.com:acme/mha.git\n", "https://github.com/acme/mha/commit/{sha}"),
    ("ssh://git@github.com/acme/mha.git", "https://github.com/acme/mha/commit/{sha}"),
    ("https://gitlab.com/acme/mha.git", None),
    ("/srv/git/mha.git", None),
    ("https://github.com.evil.example/acme/mha", None),
])
def test_link_template_only_for_github(url, template):
    assert template_of_url(url) == template


def test_commit_as_link_or_as_text():
    sha = "0123456789abcdef" * 2 + "01234567"
    assert commit_html(sha, None) == "<code>0123456789ab</code>"
    assert commit_html(sha, "https://github.com/acme/mha/commit/{sha}") == \
        f'<a href="https://github.com/acme/mha/commit/{sha}"><code>0123456789ab</code></a>'


def synthetic(n_shapes: int, versions: int = 3) -> History:
    """n_shapes forward and backward shapes; shape i steps by i % (or not at all when i is 0)."""
    vs = [Version(sha=f"{i:040x}", date=f"2026-11-{20 + i}T12:00:00+00:00", subject=f"v{i}",
                  measured_commit=None, measured_date=None, triton="3.4.0", doc={}) for i in range(versions)]
    series = []
    for i in range(n_shapes):
        key = f"dense_b{i + 1}_hq8_hk8_sq128_sk128_dqk64_dv64_c0" + ("_bwd" if i % 2 else "")
        values = [100.0] + [100.0 + i] * (versions - 1)
        points = [Point(version=j, value_us=v, noise_pct=0.5, runs_us=[], code_objects=None, error=None)
                  for j, v in enumerate(values)]
        series.append(Series(key=key, points=points, bucket="d64" if i % 3 else "d128",
                             step=find_step([(p.version, p.value_us, p.noise_pct) for p in points], RULE)))
    return History(arch="sm90", toolchain="triton-3.4", path="perf_baselines/sm90/triton-3.4.json", rev="HEAD",
                   versions=vs, skipped=[], series=series, step_rule=RULE)


def test_overview_keeps_the_top_n_steps_and_lists_the_rest():
    h = synthetic(40)
    top, rest = top_steps(h, 5)
    assert [s.step_size for s in top] == pytest.approx([39, 38, 37, 36, 35])
    assert len(rest) == 35 and not {s.key for s in top} & {s.key for s in rest}
    fig = history_report.overview_figure(h, n=5)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    history_report.pyplot().close(fig)
    assert len(legend) == 5 and legend[0].startswith(top[0].key) and "slower" in legend[0]
    page = html_page(h)
    top_table = page.split('<table id="top">')[1].split("</table>")[0]
    rest_table = page.split('<details><summary>')[1].split("</details>")[0]
    assert top_table.count("<tr data-pass") == history_report.OVERVIEW_LINES
    assert rest_table.startswith(f"The other {40 - history_report.OVERVIEW_LINES} shapes")
    assert rest_table.count("<tr data-pass") == 40 - history_report.OVERVIEW_LINES


def test_filter_markup_is_in_the_page_and_self_contained():
    h = synthetic(6)
    page = html_page(h)
    form = page.split('<form id="filter">')[1].split("</form>")[0]
    assert re.findall(r'<select name="(\w+)">', form) == ["pass", "bucket"]
    assert re.findall(r'<option value="([^"]*)">', form) == ["", "bwd", "fwd", "", "d128", "d64"]
    assert '<input name="text" type="search"' in form
    every = page.split('<table id="every">')[1].split("</table>")[0]
    assert every.count("<tr id=") == 6
    assert '<tr id="dense_b2_hq8_hk8_sq128_sk128_dqk64_dv64_c0_bwd" data-pass="bwd" data-bucket="d64" ' \
           'data-text="dense_b2_hq8_hk8_sq128_sk128_dqk64_dv64_c0_bwd bwd d64">' in every
    script = page.split("<script>")[1].split("</script>")[0]
    assert "dataset.pass" in script and "dataset.bucket" in script and "dataset.text" in script
    # nothing the page loads comes from elsewhere: it is opened offline
    assert not re.search(r'(src|href)="(https?:)?//', page) and "<link" not in page


def test_colour_follows_the_direction():
    page = html_page(synthetic(3))
    assert '<td class="slower" data-v="2.0000">2.0 % slower</td>' in page
    assert '<td class="flat" data-v="-1">no step</td>' in page
    assert ".faster{color:#1a7f37" in page and ".slower{color:#cf222e" in page
