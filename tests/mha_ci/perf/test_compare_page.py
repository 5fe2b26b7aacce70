"""compare.html and compare.png read by a person: verdict first, a chart whose legend covers no
bar, whose axis keeps the threshold band visible next to a +300 % bar, whose changed bars carry
their values, sortable and filterable tables, every abbreviation explained."""
from html.parser import HTMLParser

from mha_ci.perf import report
from mha_ci.perf.compare import compare

from perf_builders import doc, entry, gate  # noqa: E402

KEY = "dense_b1_hq{}_hk8_sq2048_sk2048_dqk128_dv128_c1"


def many_shapes_comparison(quiet: int = 40):
    """One shape +310 %, one -20 %, `quiet` within +-1.5 %."""
    keys = [KEY.format(8 * (i + 1)) for i in range(quiet + 2)]
    base = doc([entry(k, 100.0) for k in keys])
    cand = [entry(keys[0], 410.0), entry(keys[1], 80.0)]
    cand += [entry(k, 100.0 + (i % 31 - 15) / 10) for i, k in enumerate(keys[2:])]
    return compare(base, doc(cand), gate()), keys


class Page(HTMLParser):
    """The page as (tag, attributes, text) in document order, tags with their text."""

    def __init__(self, page: str):
        super().__init__()
        self.elements: list[list] = []
        self.open: list[list] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        element = [tag, dict(attrs), ""]
        self.elements.append(element)
        if tag not in ("img", "input", "meta", "br"):
            self.open.append(element)

    def handle_endtag(self, tag):
        while self.open:
            if self.open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for element in self.open:
            element[2] += data

    def all(self, tag):
        return [e for e in self.elements if e[0] == tag]


def test_the_verdict_comes_first_then_what_was_compared():
    c, _ = many_shapes_comparison()
    page = Page(report.html_page(c, b"png"))
    body = [e for e in page.elements if e[0] in ("h1", "p", "ul", "img", "section", "details", "dl", "table")]
    assert body[0][0] == "h1" and body[1][1].get("id") == "verdict"
    assert body[1][2].strip().startswith("FAIL: ") and report.verdict_line(c) in " ".join(body[1][2].split())
    compared = [e for e in page.all("ul") if "Baseline:" in e[2]][0]
    assert page.elements.index(compared) > page.elements.index(body[1])


def test_the_image_scales_to_the_page():
    c, _ = many_shapes_comparison()
    page = report.html_page(c, b"png")
    style = page.split("<style>")[1].split("</style>")[0]
    assert "img{max-width:100%;height:auto}" in style.replace(" ", "")


def test_legend_sits_outside_the_axes_and_covers_no_bar():
    c, _ = many_shapes_comparison()
    fig, panels = report.plot_figure(c)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for panel in panels:
        ax = panel["axes"]
        legend = ax.get_legend().get_window_extent(renderer)
        axes = ax.get_window_extent(renderer)
        assert legend.x0 >= axes.x1 or legend.y0 >= axes.y1, "the legend overlaps the axes"
    report.pyplot().close(fig)


def test_the_axis_keeps_the_threshold_band_visible_next_to_a_large_bar():
    c, _ = many_shapes_comparison()
    fig, panels = report.plot_figure(c)
    ax = panels[0]["axes"]
    assert ax.get_xscale() == "symlog"
    fig.canvas.draw()
    # the +-1.5 % band spans at least a twentieth of the axis next to the +310 % bar
    x0, _ = ax.transData.transform((-1.5, 0))
    x1, _ = ax.transData.transform((1.5, 0))
    width = ax.get_window_extent().width
    assert (x1 - x0) / width > 0.05
    report.pyplot().close(fig)


def test_changed_bars_carry_their_values_and_only_those():
    c, _ = many_shapes_comparison()
    fig, panels = report.plot_figure(c)
    labels = sorted(t.get_text() for t in panels[0]["labels"] if t.get_text())
    assert labels == ["+310.0 %", "-20.0 %"]
    report.pyplot().close(fig)


def test_only_changed_and_the_worst_quiet_shapes_are_drawn_and_the_rest_counted():
    c, keys = many_shapes_comparison(quiet=40)
    fig, panels = report.plot_figure(c, worst=10)
    panel = panels[0]
    assert panel["shown"][:1] == [keys[0]] and keys[1] in panel["shown"] and len(panel["shown"]) == 12
    assert panel["hidden"] == 30
    assert "30 of 42 shapes hidden" in panel["axes"].get_ylabel()
    names = [t.get_text() for t in panel["axes"].get_yticklabels()]
    assert names[0] == keys[0] or names[-1] == keys[0]
    assert all(t.get_rotation() == 0 and t.get_fontsize() >= 7 for t in panel["axes"].get_yticklabels())
    report.pyplot().close(fig)
    page = report.html_page(c, b"png", worst=10)
    assert "30 of 42 fwd shapes hidden" in page
    rows = Page(page).all("tr")
    assert sum(1 for e in rows if "quiet" in e[1].get("class", "")) == 30


def test_tables_are_sortable_filterable_and_have_dtype_noise_and_tflops():
    c, keys = many_shapes_comparison(quiet=3)
    page = Page(report.html_page(c, b"png"))
    scripts = page.all("script")
    assert len(scripts) == 1 and not scripts[0][1].get("src")
    assert "sort" in scripts[0][2] and "filter" in scripts[0][2]
    assert not any(e[1].get("src", "data:").split(":")[0] in ("http", "https") for e in page.elements)
    assert not any(e[1].get("href", "#").startswith("http") for e in page.elements)
    table = page.all("table")[0]
    heads = [e[2] for e in page.all("th")]
    for column in ("dtype", "noise % base / cand", "TFLOP/s base / cand"):
        assert column in heads
    assert all(e[1].get("data-sort") is not None for e in page.all("th"))
    filters = [e for e in page.all("input") if e[1].get("type") == "search"]
    assert filters and filters[0][1].get("data-table") == table[1].get("id")
    row = next(e for e in page.all("tr") if keys[0] in e[2])
    # 2 * 1 * 8 * pairs(causal 2048) * (128 + 128) flops over 100 us and 410 us
    pairs = 2048 * 2049 // 2
    flops = 2 * 8 * pairs * 256
    assert f"{flops / 100e-6 / 1e12:.1f} / {flops / 410e-6 / 1e12:.1f}" in row[2]
    assert "bf16" in row[2]


def test_every_abbreviation_is_explained():
    c, _ = many_shapes_comparison(quiet=3)
    page = Page(report.html_page(c, b"png"))
    terms = {e[2].strip() for e in page.all("dt")}
    for abbreviation in ("M", "N", "K", "d_v", "HQ/HK", "TP", "us", "delta %", "threshold %", "noise %",
                         "TFLOP/s", "dtype", "fwd", "bwd", "A/A", "same code", "stall", "bucket", "source"):
        assert abbreviation in terms, abbreviation
    assert all(e[1].get("title") for e in page.all("th"))
