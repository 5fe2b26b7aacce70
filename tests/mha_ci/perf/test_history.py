"""`mha-ci perf history` on a synthetic git repository: four commits of a small baseline, one of
which changes a shape's code objects and value, one a config file, one the Triton version."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mha_ci.cli import main
from mha_ci.errors import ExitCode
from mha_ci.perf import history_report
from mha_ci.perf.history import history

FWD_A = "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"
FWD_B = "dense_b1_hq64_hk8_sq8192_sk8192_dqk128_dv128_c1"
BWD = "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1_bwd"
PATH = "perf_baselines/sm90/triton-3.4.json"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           "-c", "commit.gpgsign=false", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def entry(key: str, mean: float, code: str, noise: float = 1.0, between: float | None = None) -> dict:
    return {"key": key, "shape": {}, "bucket": "default", "code_objects": {"fwd": code},
            "stats": {"trimmed_mean_us": mean, "median_us": mean, "max_us": mean * 1.1, "noise_pct": noise,
                      "reps": 5, "dispatches": 40, "stall": None, "between_run_noise_pct": between,
                      "run_trimmed_means_us": [mean, mean]}, "error": None}


def baseline(results: list[dict], commit: str, triton: str = "3.4.0") -> dict:
    return {"schema": "mha-ci.perf/1",
            "provenance": {"gpu": "NVIDIA H200", "arch": "sm90", "toolchain": "triton-3.4",
                           "versions": {"triton": triton}, "commit": commit, "date": "2026-11-29"},
            "method": {"warmup": 10, "dispatches": 40, "reps": 5, "trim": [10, 10]},
            "selection": {"subset": "full", "count": len(results)}, "results": results}


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
        git(repo, "add", rel)
    git(repo, "commit", "--quiet", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def write_baseline(repo: Path, doc: dict, message: str) -> str:
    return commit(repo, {PATH: json.dumps(doc, indent=1)}, message)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """v0: three shapes. v1: a config change measured, FWD_A's code and value move (+20 %).
    v2: Triton 3.4.1, values within noise. Also one commit that writes a non-document."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    c0 = commit(repo, {"src/mha/configs/sm90.json": "{}"}, "kernel")
    write_baseline(repo, baseline([entry(FWD_A, 100.0, "a0"), entry(FWD_B, 1000.0, "b0"), entry(BWD, 300.0, "w0")],
                                  c0), "baseline v0")
    c1 = commit(repo, {"src/mha/configs/sm90.json": '{"BLOCK_N": 64}'}, "tune")
    write_baseline(repo, baseline([entry(FWD_A, 120.0, "a1", between=2.5), entry(FWD_B, 1010.0, "b0"),
                                   entry(BWD, 297.0, "w0")], c1), "baseline v1")
    commit(repo, {PATH: "{not json"}, "a broken edit")
    write_baseline(repo, baseline([entry(FWD_A, 121.0, "a1"), entry(FWD_B, 1000.0, "b0"), entry(BWD, 303.0, "w0")],
                                  c1, triton="3.4.1"), "baseline v2")
    return repo


def run(repo: Path, out: Path, *extra: str) -> int:
    return main(["--root", str(repo), "perf", "history", "--arch", "sm90", "--toolchain", "triton-3.4",
                 "--out", str(out), *extra])


def series(out: Path) -> dict[str, dict]:
    return {s["key"]: s for s in json.loads((out / "history.json").read_text())["series"]}


def test_series_values_marks_and_outputs(repo, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(repo, out) == ExitCode.OK
    doc = json.loads((out / "history.json").read_text())
    assert len(doc["versions"]) == 3 and len(doc["skipped"]) == 1
    assert "not JSON" in doc["skipped"][0]["reason"]
    assert "skipped" in capsys.readouterr().err
    a = series(out)[FWD_A]
    assert [p["value_us"] for p in a["points"]] == [100.0, 120.0, 121.0]
    assert a["move_pct"] == pytest.approx(21.0)
    # the noise band is the larger of the two noises
    assert a["points"][1]["noise_pct"] == 2.5 and a["points"][1]["band_us"] == pytest.approx([117.0, 123.0])
    assert [p["marks"] for p in a["points"]] == [[], ["kernel", "config"], ["toolchain"]]
    assert a["points"][1]["config_files"] == ["src/mha/configs/sm90.json"]
    b = series(out)[FWD_B]
    assert [p["marks"] for p in b["points"]] == [[], ["config"], ["toolchain"]]     # same code: no kernel mark
    for name in ("index.html", "history.md", "overview.png"):
        assert (out / name).stat().st_size > 0
    assert len(list((out / "shapes").glob("*.png"))) == 3
    assert f'id="{FWD_A}"' in (out / "index.html").read_text()


def test_largest_move_first(repo, tmp_path):
    out = tmp_path / "out"
    assert run(repo, out) == ExitCode.OK
    order = [s["key"] for s in json.loads((out / "history.json").read_text())["series"]]
    assert order == [FWD_A, BWD, FWD_B]          # +21 %, +1 %, 0 %
    md = (out / "history.md").read_text()
    assert md.index(FWD_A) < md.index(BWD + "`") < md.index(FWD_B)


def test_pass_and_shape_filters(repo, tmp_path):
    assert run(repo, tmp_path / "bwd", "--pass", "bwd") == ExitCode.OK
    assert list(series(tmp_path / "bwd")) == [BWD]
    assert run(repo, tmp_path / "fwd", "--pass", "fwd") == ExitCode.OK
    assert set(series(tmp_path / "fwd")) == {FWD_A, FWD_B}
    assert run(repo, tmp_path / "glob", "--shape", "*_dqk64_*") == ExitCode.OK
    assert set(series(tmp_path / "glob")) == {FWD_A, BWD}


def test_shallow_history_marks_no_config(repo, tmp_path):
    """A measured commit this clone does not have: nobody can say whether the configs changed."""
    doc = json.loads(git(repo, "show", f"HEAD:{PATH}"))
    doc["provenance"]["commit"] = "f" * 40
    write_baseline(repo, doc, "measured elsewhere")
    out = tmp_path / "out"
    assert run(repo, out) == ExitCode.OK
    assert series(out)[FWD_A]["points"][-1]["marks"] == []


@pytest.mark.parametrize("extra, words", [
    (("--shape", "nothing_*"), "--shape 'nothing_*' matches no shape"),
    (("--shape", FWD_A, "--pass", "bwd"), "no bwd shape"),
])
def test_selection_matching_nothing_is_exit_2(repo, tmp_path, capsys, extra, words):
    assert run(repo, tmp_path / "out", *extra) == ExitCode.CONFIG_ERROR
    assert words in capsys.readouterr().err


def test_no_baseline_in_history_is_exit_2(repo, tmp_path, capsys):
    code = main(["--root", str(repo), "perf", "history", "--arch", "gfx942", "--toolchain", "triton-3.4",
                 "--out", str(tmp_path / "out")])
    assert code == ExitCode.CONFIG_ERROR
    assert "no committed version of perf_baselines/gfx942/triton-3.4.json" in capsys.readouterr().err


def test_not_a_git_checkout_is_exit_2(tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    assert run(plain, tmp_path / "out") == ExitCode.CONFIG_ERROR
    assert "not a git checkout" in capsys.readouterr().err


def test_refresh_pr_body_points_each_moved_shape_to_history_and_bisect():
    from perf_builders import doc, entry, gate

    from mha_ci.perf.compare import compare
    from mha_ci.refresh.core import RefreshPolicy
    from mha_ci.refresh.report import pr_body

    policy = RefreshPolicy(max_noise_pct=5.0, gate=gate(floor_pct=3.0, k=1.0))
    old = doc([entry(FWD_A, 100.0, noise=1.0), entry(BWD, 300.0, noise=1.0)], commit="a" * 40)
    new = doc([entry(FWD_A, 100.5, noise=1.0), entry(BWD, 336.0, noise=1.0)], commit="b" * 40)
    text = pr_body(arch="sm90", date="2026-12-01", branch="b", base_commit="abc", measured={"triton-3.4": new},
                   olds={"triton-3.4": old}, comparisons={"triton-3.4": compare(old, new, policy.gate)},
                   policy=policy, other_files=[])
    where = text.split("## When and where it moved")[1].split("## Provenance")[0]
    assert "`perf-history-sm90` artifact" in where and "not built yet" not in where
    assert (f"mha-ci perf bisect --good {'a' * 40} --bad {'b' * 40} --arch sm90 --toolchain triton-3.4 "
            f"--shape '{BWD}' --out out/bisect/triton-3.4/{BWD}`") in where
    assert f"triton-3.4/index.html#{BWD}" in where
    assert f"`{FWD_A}`" not in where              # +0.5 %: it did not move


def test_shape_plot_x_axis_is_the_versions_dates(repo):
    """Each point sits at its version's commit time, the ticks read as dates, not version numbers."""
    from matplotlib.dates import num2date

    h = history(repo, "sm90", "triton-3.4")
    fig = history_report.shape_figure(h, series_of(h, FWD_A))
    fig.canvas.draw()
    ax = fig.axes[0]
    xs = [num2date(x).replace(tzinfo=None) for x in ax.lines[0].get_xdata(orig=False)]
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    history_report.pyplot().close(fig)
    assert xs == [history_report.when(v) for v in h.versions]
    assert labels and not any(label.isdigit() and int(label) < len(h.versions) for label in labels)


def test_steps_are_in_history_json_and_on_the_page(repo, tmp_path):
    out = tmp_path / "out"
    assert run(repo, out) == ExitCode.OK
    doc = json.loads((out / "history.json").read_text())
    assert doc["step_rule"] == {"floor_pct": 3.0, "k": 2.0, "source": "default"}
    assert doc["link_template"] is None                       # no origin: hashes as text
    step = series(out)[FWD_A]["step"]
    assert step["version"] == 1 and step["delta_pct"] == pytest.approx(20.5)   # 100 -> median(120, 121)
    assert step["wording"] == "20.5 % slower"
    assert series(out)[FWD_B]["step"] is None and series(out)[BWD]["step"] is None   # within noise
    page = (out / "index.html").read_text()
    assert '<td class="slower" data-v="20.5000">20.5 % slower</td>' in page
    assert f'<code>{doc["versions"][1]["sha"][:12]}</code>' in page and "github.com" not in page


def test_backward_shapes_are_on_the_page_and_filterable(repo, tmp_path):
    out = tmp_path / "out"
    assert run(repo, out) == ExitCode.OK
    page = (out / "index.html").read_text()
    assert f'<tr id="{BWD}" data-pass="bwd" data-bucket="default"' in page
    assert '<option value="bwd">' in page and (out / "shapes" / f"{BWD}.png").is_file()


def test_commit_links_follow_a_github_origin(repo, tmp_path):
    git(repo, "remote", "add", "origin", "git@github.com:example/mha.git")
    out = tmp_path / "out"
    assert run(repo, out) == ExitCode.OK
    doc = json.loads((out / "history.json").read_text())
    assert doc["link_template"] == "https://github.com/example/mha/commit/{sha}"
    sha = doc["versions"][1]["sha"]
    assert f'<a href="https://github.com/example/mha/commit/{sha}"><code>{sha[:12]}</code></a>' in \
        (out / "index.html").read_text()
    assert f"(https://github.com/example/mha/commit/{sha})" in (out / "history.md").read_text()


def test_shape_plot_mark_letters_sit_above_the_plot_apart(repo):
    """A letter drawn inside the axes crosses its own dashed line and the series; two marks of one
    version (K and C) must not cover each other."""
    h = history(repo, "sm90", "triton-3.4")
    fig = history_report.shape_figure(h, series_of(h, FWD_A))
    fig.canvas.draw()
    ax = fig.axes[0]
    boxes = {t.get_text(): t.get_window_extent() for t in ax.texts}
    history_report.pyplot().close(fig)
    assert sorted(boxes) == ["C", "K", "T"]
    assert all(b.y0 >= ax.bbox.y1 for b in boxes.values())
    assert not boxes["K"].overlaps(boxes["C"])


def test_overview_draws_only_the_shapes_that_stepped(repo):
    h = history(repo, "sm90", "triton-3.4")
    fig = history_report.overview_figure(h)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    history_report.pyplot().close(fig)
    assert [text.split(" ")[0] for text in legend] == [FWD_A]
    assert "20.5 % slower at" in legend[0]


def series_of(h, key: str):
    return next(s for s in h.series if s.key == key)
