"""Reports of a comparison: markdown table and tally, PNG plot, static HTML, calibration."""
import base64
import io
import re

from PIL import Image

from mha_ci.perf import calibrate, report
from mha_ci.perf.compare import compare

from perf_builders import doc, entry, gate  # noqa: E402

KEYS = ["dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1", "dense_b1_hq128_hk128_sq8192_sk8192_dqk192_dv128_c1",
        "varlen_b1_hq8_hk8_sq8192_sk8192_dqk192_dv128_c1", "dense_b1_hq128_hk8_sq8192_sk8192_dqk128_dv128_c1"]
STALL = {"count": 1, "worst_us": 1_640_000.0, "ratio": 4205.1, "rep": 3, "index": 21}


def reference_comparison():
    """The four reference shapes of docs/workloads.md, golden 3.4 vs 3.8 before the retune."""
    base = doc([entry(KEYS[0], 338.2, tags=("test",), tp=()), entry(KEYS[1], 4547.6, tags=("model_shapes", "bench")),
                entry(KEYS[2], 333.0, tags=("model_shapes",), tp=(8,)), entry(KEYS[3], 2678.4)])
    cand = doc([entry(KEYS[0], 1030.4, stall=STALL, tags=("test",), tp=()), entry(KEYS[1], 4944.0),
                entry(KEYS[2], 357.5, tags=("model_shapes",), tp=(8,)), entry(KEYS[3], 2799.2)],
               toolchain="triton-3.8", versions={"torch": "2.13.0", "triton": "3.8.0"})
    return compare(base, cand, gate(), cross_toolchain=True)


def test_markdown_has_tally_columns_regressions_and_stall():
    md = report.markdown(reference_comparison())
    assert "**fwd: 0 improvements, 0 ok, 4 regressions, 0 invalid of 4 shapes**" in md
    header = next(line for line in md.splitlines() if line.startswith("| shape"))
    for column in report.REGRESSION_COLUMNS[1:]:
        assert f"| {column} |" in header
    row = next(line for line in md.splitlines() if "dense_b8_hq48" in line and line.startswith("|"))
    assert "| **+204.7** | regression (stall) |" in row and "| 338.2 -> 1030.4 |" in row and "small_head" in row
    assert "1.64 s against a 390 us median" in md
    assert "all other shapes" not in md                 # every shape regressed: the table above holds them
    # the wide table, with the dimensions, TP and source, holds the shapes that did not regress
    ok = report.markdown(compare(doc([entry(KEYS[2], 333.0, tags=("model_shapes",), tp=(8,))]),
                                 doc([entry(KEYS[2], 333.5, tags=("model_shapes",), tp=(8,))]), gate()))
    header = next(line for line in ok.splitlines() if line.startswith("| shape"))
    for column in ("M", "N", "K", "d_v", "HQ/HK", "TP", "layout", "bucket", "baseline us", "candidate us",
                   "delta %", "status", "source"):
        assert f"| {column} |" in header
    tp8 = next(line for line in ok.splitlines() if "varlen_b1_hq8" in line and line.startswith("|"))
    assert "| 8192 | 8192 | 192 | 128 | 8/8 | 8 |" in tp8 and "+0.2" in tp8 and "| model_shapes |" in tp8


def test_png_is_a_real_plot_and_html_embeds_it(tmp_path):
    c = reference_comparison()
    png = report.plot_png(c)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    image = Image.open(io.BytesIO(png))
    assert image.size[0] >= 600 and image.size[1] >= 240
    page = report.html_page(c, png)
    match = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert match and base64.b64decode(match.group(1)) == png
    assert page.count("<tr class=") == 4 and "4 regressions" in page
    paths = report.write_all(c, tmp_path)
    assert all(p.stat().st_size > 0 for p in paths.values())


BWD = [KEYS[0] + "_bwd", KEYS[3] + "_bwd"]
CODE = {"attn_fwd": "f" * 64, "attn_bwd_dkdv": "a" * 64}


def with_code(e: dict, code: dict) -> dict:
    e["code_objects"] = dict(code)
    return e


def two_pass_comparison():
    """Forward shapes on unchanged code that come out ok; backward shapes of which one ran new
    code and regressed +10 %, the other ran the same code as before."""
    changed = {**CODE, "attn_bwd_dkdv": "b" * 64}
    base = doc([with_code(entry(KEYS[0], 100.0), CODE), with_code(entry(KEYS[3], 200.0), CODE),
                with_code(entry(BWD[0], 300.0), CODE), with_code(entry(BWD[1], 400.0), CODE)])
    cand = doc([with_code(entry(KEYS[0], 100.4), CODE), with_code(entry(KEYS[3], 201.2), CODE),
                with_code(entry(BWD[0], 330.0), changed), with_code(entry(BWD[1], 401.2), CODE)])
    return compare(base, cand, gate())


def sections(textual: str, start: str, other: str) -> tuple[str, str]:
    """The text from `start` to `other` and from `other` on (the forward and the backward part)."""
    first, second = textual.index(start), textual.index(other)
    return textual[first:second], textual[second:]


def test_a_backward_regression_shows_only_in_the_backward_section_and_tally():
    c = two_pass_comparison()
    assert report.tally_line(c) == ("fwd: 0 improvements, 2 ok, 0 regressions, 0 invalid of 2 shapes; "
                                    "bwd: 0 improvements, 1 ok, 1 regression, 0 invalid of 2 shapes")
    md = report.markdown(c)
    fwd, bwd = sections(md, "## Forward (fwd)", "## Backward (bwd)")
    assert "regression" not in fwd.replace("0 regressions", "") and BWD[0] not in fwd
    assert "### bwd: regressions" in bwd and f"`{BWD[0]}`" in bwd.split("### bwd: all other shapes")[0]
    txt = report.text(c)
    fwd, bwd = sections(txt, "Forward (fwd)", "Backward (bwd)")
    assert not re.search(r"^regression", fwd, re.M)
    assert re.search(rf"^regression .* {BWD[0]}", bwd, re.M)
    page = report.html_page(c, b"")
    fwd, bwd = sections(page, '<section id="pass-fwd">', '<section id="pass-bwd">')
    assert 'class="regression' not in fwd and bwd.count('<tr class="regression') == 1
    # every number in the tables is the comparison JSON's, in the section of its pass
    for shape in c.to_dict()["shapes"]:
        part = fwd if shape["pass"] == "fwd" else bwd
        assert f"<td>{shape['key']}</td>" in part
        assert f"<td>{shape['delta_pct']:+.1f}</td>" in part.split(shape["key"])[1].split("</tr>")[0]


def test_identical_code_objects_are_marked_as_an_aa_sample_in_every_form():
    c = two_pass_comparison()
    md = report.markdown(c)
    same_code, columns = {}, []
    for line in md.splitlines():
        if line.startswith("| shape"):
            columns = [c.strip() for c in line.strip("|").split("|")]
        elif line.startswith("| `"):
            same_code[line.split("`")[1]] = line.strip("|").split("|")[columns.index("same code")].strip()
    assert [same_code[k] for k in KEYS[0:1] + KEYS[3:] + BWD] == ["yes", "yes", "no", "yes"]
    # |delta| of the forward pair: 0.4 % and 0.6 %; of the unchanged backward shape 0.3 %
    fwd_line = ("2 of 2 shapes ran identical code objects on both sides: their deltas are an A/A sample "
                "(median |delta| 0.50 %, max 0.60 %; 0 beyond threshold)")
    bwd_line = ("1 of 2 shapes ran identical code objects on both sides: their deltas are an A/A sample "
                "(median |delta| 0.30 %, max 0.30 %; 0 beyond threshold)")
    for form in (md, report.text(c), report.html_page(c, b"")):
        fwd, bwd = sections(form, "Forward (fwd)", "Backward (bwd)")
        assert fwd_line in fwd and bwd_line in bwd
    assert [line.split()[-1] for line in report.text(c).splitlines() if line.endswith("SAME CODE")] == ["CODE"] * 3
    assert report.html_page(c, b"").count(" same-code\"") == 3
    # a same-code shape flagged beyond its threshold is a false call and is counted as one; a
    # failed shape has no delta; a shape without code objects is unknown
    base = doc([with_code(entry(k, 100.0), CODE) for k in KEYS[:3]] + [entry(KEYS[3], 100.0)])
    cand = doc([with_code(entry(KEYS[0], 106.0), CODE), with_code(entry(KEYS[1], 99.0), CODE),
                with_code(entry(KEYS[2], None, error="launch failed"), CODE), entry(KEYS[3], 100.0)])
    line = report.same_code_line(list(compare(base, cand, gate()).shapes))
    assert line == ("3 of 4 shapes ran identical code objects on both sides: their deltas are an A/A sample "
                    "(median |delta| 3.50 %, max 6.00 %, over the 2 with a delta; 1 beyond threshold); "
                    "code objects unknown for 1")


def test_the_plot_has_one_panel_per_pass():
    for c, passes in ((reference_comparison(), ["fwd"]), (two_pass_comparison(), ["fwd", "bwd"])):
        fig, panels = report.plot_figure(c)
        assert [p["axes"].get_title(loc="left").split(" (")[0] for p in panels] == \
            [report.PASS_TITLES[p].split(" (")[0] for p in passes]
        report.pyplot().close(fig)
    one = Image.open(io.BytesIO(report.plot_png(reference_comparison())))
    two = Image.open(io.BytesIO(report.plot_png(two_pass_comparison())))
    assert two.size[1] > one.size[1] and one.size[0] == two.size[0]


def test_a_one_pass_comparison_has_no_section_of_the_other_pass():
    forward = reference_comparison()                  # no code objects recorded either
    assert report.tally_line(forward).startswith("fwd: ") and "bwd" not in report.tally_line(forward)
    for form in (report.markdown(forward), report.text(forward), report.html_page(forward, b"")):
        assert "Forward (fwd)" in form and "Backward" not in form and "Same code" not in form
    base = doc([entry(k, 300.0) for k in BWD])
    backward = compare(base, doc([entry(BWD[0], 301.0), entry(BWD[1], 360.0)]), gate())
    assert report.tally_line(backward) == "bwd: 0 improvements, 1 ok, 1 regression, 0 invalid of 2 shapes"
    for form in (report.markdown(backward), report.text(backward), report.html_page(backward, b"")):
        assert "Backward (bwd)" in form and "Forward" not in form
    assert "pass-fwd" not in report.html_page(backward, b"")


def test_calibration_counts_false_regressions_and_planted_catches():
    keys = KEYS
    a = doc([entry(k, 100.0, noise=0.5) for k in keys])
    b = doc([entry(keys[0], 104.0, noise=0.5)] + [entry(k, 100.5, noise=0.5) for k in keys[1:]])
    planted = doc([entry(k, 106.0, noise=0.5) for k in keys[:3]] + [entry(keys[3], 100.0, noise=0.5)],
                  planted_slowdown_pct=6.0)
    for e in planted["results"][:3]:
        e["planted_pct"] = 6.0
    result = calibrate.calibrate(a, b, gate(floor_pct=3.0, k=2.5), planted=planted)
    assert result["false_regressions"] == [keys[0]]
    assert result["false_regression_rate"] == 0.25
    assert result["zero_false_call_floor_pct"] == 4.0
    assert result["smallest_caught_pct"]["min"] == 3.0
    p = result["planted"]
    assert p["planted_shapes"] == 3 and p["caught"] == 3 and p["catch_rate"] == 1.0
    assert p["unplanted_false_regressions"] == []
    bands = {tuple(b["band_pct"]): (b["shapes"], b["caught"]) for b in p["caught_by_realised_band"]}
    assert bands[(5.0, 7.5)] == (3, 3) and sum(n for n, _ in bands.values()) == 3
    text = calibrate.markdown(result)
    assert "False regressions: 1 (25.0 %; 95 % upper bound" in text and "caught 3 of 3 (100.0 %)" in text
    assert "| 5 to 7.5 | 3 | 3 |" in text


def test_calibration_verdict_holds_both_rates_to_their_bars():
    keys = KEYS
    a = doc([entry(k, 100.0, noise=0.5) for k in keys])
    clean = doc([entry(k, 100.5, noise=0.5) for k in keys])
    planted = doc([entry(k, 106.0, noise=0.5) for k in keys[:2]] + [entry(k, 101.0, noise=0.5) for k in keys[2:3]],
                  planted_slowdown_pct=6.0)
    for e in planted["results"]:
        e["planted_pct"] = 6.0                       # three planted, the third not really slower
    bars = calibrate.Bars(max_false_regression_pct=1.0, min_planted_catch_pct=95.0)
    v = calibrate.calibrate(a, clean, gate(floor_pct=3.0, k=2.0), planted=planted, bars=bars)["verdict"]
    assert [(c["bar"], c["value_pct"], c["met"]) for c in v["checks"]] == [
        ("false_regressions", 0.0, True), ("false_regressions_shown", 52.71, False), ("planted_catch", 66.67, False)]
    assert v["met"] is False
    # 0 false calls in 4 judgements leave a rate of up to 53 %: the bar is met once 300 show it
    loose = calibrate.Bars(max_false_regression_pct=1.0, min_planted_catch_pct=60.0)
    result = calibrate.calibrate(a, clean, gate(floor_pct=3.0, k=2.0), planted=planted, bars=loose)
    assert result["verdict"]["met"] is False
    result = calibrate.calibrate_pairs([(a, clean)] * 75, gate(floor_pct=3.0, k=2.0), planted=planted, bars=loose)
    assert result["verdict"]["met"] is True and result["shapes_valid"] == 300
    assert ("**Calibrated: yes** (false regressions 0.0 % <= 1 %: met; its 95 % upper bound 0.99 % <= 1 %: met; "
            "planted shapes caught 66.67 % >= 60 %: met)") in calibrate.markdown(result)
    # A/A alone: one false regression in four shapes misses the 1 % bar.
    noisy = doc([entry(keys[0], 110.0, noise=0.5)] + [entry(k, 100.0, noise=0.5) for k in keys[1:]])
    result = calibrate.calibrate(a, noisy, gate(floor_pct=3.0, k=2.0), bars=bars)
    assert [c["bar"] for c in result["verdict"]["checks"]] == ["false_regressions", "false_regressions_shown"]
    assert result["verdict"]["met"] is False and "**Calibrated: NO**" in calibrate.markdown(result)


def test_calibration_pools_pairs_and_bounds_the_false_rate():
    """Three A/A pairs are one sample of judgements; the upper bound says what the count can show."""
    keys = KEYS
    a = doc([entry(k, 100.0, noise=0.5) for k in keys])
    pairs = [(a, doc([entry(k, 100.0 + 0.1 * n, noise=0.5) for k in keys])) for n in range(3)]
    result = calibrate.calibrate_pairs(pairs, gate(floor_pct=1.5, k=2.0))
    assert result["pairs"] == 3 and result["shapes_valid"] == 3 * len(keys)
    assert {s["pair"] for s in result["shapes"]} == {1, 2, 3}
    assert result["false_regression_rate"] == 0.0
    # 0 of 12 shows only that the rate is below ~22 %; 0 of 300 shows below ~1 %.
    assert 0.2 < result["false_regression_rate_upper95"] < 0.23
    assert abs(calibrate._upper95(0, 300) - 0.00994) < 1e-4
    assert abs(calibrate._upper95(3, 300) - 0.0258) < 1e-3
    assert calibrate._upper95(0, 0) is None
    assert "A/A pairs: 3. Valid judgements: 12 of 12." in calibrate.markdown(result)


def test_calibration_leaves_out_shapes_that_ran_other_code():
    """A real A/B run's same-code shapes are A/A judgements; its changed shapes are not."""
    keys = KEYS

    def coded(key, us, sha):
        e = entry(key, us, noise=0.3)
        e["code_objects"] = {"fwd": sha}
        return e

    a = doc([coded(k, 100.0, "a" * 64) for k in keys])
    b = doc([coded(keys[0], 110.0, "b" * 64)] + [coded(k, 100.0, "a" * 64) for k in keys[1:]])
    result = calibrate.calibrate_pairs([(a, b)], gate(floor_pct=1.5, k=2.0))
    assert result["shapes_valid"] == len(keys) - 1 and result["false_regressions"] == []
    assert result["left_out_other_code"] == [{"pair": 1, "key": keys[0]}]
    assert f"other code on the two sides (no A/A judgement): 1: `{keys[0]}` (pair 1)" in calibrate.markdown(result)
    # Without code objects recorded nothing says the code differs: the shape stays and is a false call.
    bare = calibrate.calibrate_pairs([(doc([entry(k, 100.0, noise=0.3) for k in keys]),
                                       doc([entry(keys[0], 110.0, noise=0.3)]
                                           + [entry(k, 100.0, noise=0.3) for k in keys[1:]]))],
                                     gate(floor_pct=1.5, k=2.0))
    assert bare["false_regressions"] == [keys[0]] and bare["left_out_other_code"] == []


def test_scaled_plant_realises_exactly_what_it_says():
    keys = KEYS
    a = doc([entry(k, 100.0, noise=0.3) for k in keys])
    b = doc([entry(k, 100.0, noise=0.3) for k in keys[:-1]] + [entry(keys[-1], 98.5, noise=0.3)])
    result = calibrate.calibrate_pairs([(a, b), (a, a)], gate(floor_pct=1.5, k=2.0), scaled_pct=3.0)
    sc = result["scaled"]
    assert sc["how"] == "scaled" and sc["nominal_pct"] == [3.0] and sc["planted_shapes"] == 2 * len(keys)
    realised = sorted(s["delta_pct"] for s in sc["shapes"])
    # Where B equals A, the realised slowdown is the plant; where B was 1.5 % faster, 1.455 %.
    assert realised[-1] == 3.0 and abs(realised[0] - 1.455) < 1e-3
    assert sc["caught"] == 2 * len(keys) - 1 and sc["missed"][0]["key"] == keys[-1]
    assert [c["bar"] for c in result["verdict"]["checks"]] == ["false_regressions", "false_regressions_shown",
                                                              "scaled_catch"]
    with_reps = doc([entry(keys[0], 100.0, noise=0.3)])
    with_reps["results"][0]["stats"]["rep_means_us"] = [99.0, 100.0, 101.0]
    scaled = calibrate.scaled(with_reps, 3.0)["results"][0]
    assert scaled["planted_pct"] == 3.0 and scaled["stats"]["noise_pct"] == 0.3
    assert scaled["stats"]["rep_means_us"] == [101.97, 103.0, 104.03]
    assert scaled["stats"]["trimmed_mean_us"] == 103.0
    text = calibrate.markdown(result)
    assert "Scaled plant" in text and "| pair | shape |" in text


def test_calibrate_cli_takes_pairs_and_refuses_an_odd_count(tmp_path, repo_root, capsys):
    import json

    from mha_ci.cli import main
    paths = []
    for n, t in enumerate((100.0, 100.2, 100.0, 99.9)):
        path = tmp_path / f"r{n}.json"
        path.write_text(json.dumps(doc([entry(k, t, noise=0.3) for k in KEYS])))
        paths.append(str(path))
    root = ["--root", str(repo_root), "perf", "calibrate"]
    # 8 judgements cannot show a false rate of at most 1 %: red whatever they say
    assert main(root + paths + ["--scaled-plant", "3", "--against-floor", "--format", "json"]) == 1
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{"):])
    assert result["pairs"] == 2 and result["scaled"]["caught"] == 2 * len(KEYS)
    assert main(root + paths[:3]) == 2
    assert "come in pairs" in capsys.readouterr().err
    assert main(root + paths[:2] + ["--scaled-plant", "0"]) == 2


def test_calibrate_cli_exits_1_when_a_bar_is_missed(tmp_path, repo_root, capsys):
    import json

    from mha_ci.cli import main

    def write(name, d):
        path = tmp_path / name
        path.write_text(json.dumps(d))
        return str(path)

    a = write("a.json", doc([entry(k, 100.0, noise=0.5) for k in KEYS]))
    b = write("b.json", doc([entry(k, 100.3, noise=0.5) for k in KEYS]))
    off = write("off.json", doc([entry(KEYS[0], 110.0, noise=0.5)] + [entry(k, 100.0, noise=0.5) for k in KEYS[1:]]))
    root = ["--root", str(repo_root)]
    assert main(root + ["perf", "calibrate", *[a, b] * 75]) == 0      # 300 judgements, 0 false
    assert main(root + ["perf", "calibrate", a, b]) == 1                # 4 judgements show nothing
    assert main(root + ["perf", "calibrate", *[a, b] * 74, a, off, "--format", "json"]) == 1
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{"):])["verdict"]["met"] is False
    planted = doc([entry(k, 106.0, noise=0.5) for k in KEYS], planted_slowdown_pct=6.0)
    for e in planted["results"]:
        e["planted_pct"] = 6.0
    p = write(tmp_path / "planted.json", planted)
    assert main(root + ["perf", "calibrate", *[str(a), str(b)] * 75, "--planted", str(p),
                        "--out", str(tmp_path / "c")]) == 0
    assert {f.name for f in (tmp_path / "c").iterdir()} == {"calibrate.json", "calibrate.md", "calibrate.png"}
    assert (tmp_path / "c" / "calibrate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stored = json.loads((tmp_path / "c" / "calibrate.json").read_text())
    assert [s["caught"] for s in stored["planted"]["shapes"]] == [True] * len(KEYS)
    # a "planted" run in which nothing was planted is a usage error, not a 0 % catch rate
    assert main(root + ["perf", "calibrate", str(a), str(b), "--planted", str(b)]) == 2
    assert "MHA_PERF_PLANT_SLOWDOWN" in capsys.readouterr().err
