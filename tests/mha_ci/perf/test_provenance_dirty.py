"""What a report says was measured: the commit, and a hash of any uncommitted change on top."""
import subprocess

from mha_ci.git import commit_or_none
from mha_ci.perf import provenance, report
from mha_ci.perf.compare import compare

from perf_builders import doc, entry, gate  # noqa: E402


def git(root, *args):
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


def repo(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "kernel.py").write_text("BLOCK = 64\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


def test_a_clean_tree_has_no_dirty_hash_and_every_change_moves_it(tmp_path):
    root = repo(tmp_path)
    assert provenance.git_dirty(root) is None
    (root / "kernel.py").write_text("BLOCK = 128\n")
    tracked = provenance.git_dirty(root)
    assert tracked and len(tracked) == 64
    (root / "kernel.py").write_text("BLOCK = 256\n")
    assert provenance.git_dirty(root) not in (None, tracked)
    # an untracked file counts with its contents, not just its name
    (root / "kernel.py").write_text("BLOCK = 64\n")
    (root / "new.py").write_text("a = 1\n")
    first = provenance.git_dirty(root)
    (root / "new.py").write_text("a = 2\n")
    assert first and provenance.git_dirty(root) not in (None, first)
    assert provenance.git_dirty(tmp_path / "nowhere") is None
    # a folder inside the tree is not the tree: a base checkout written there is clean
    (root / "kernel.py").write_text("BLOCK = 32\n")
    (root / "base").mkdir()
    (root / "base" / "kernel.py").write_text("BLOCK = 64\n")
    assert provenance.git_dirty(root)
    assert provenance.git_dirty(root / "base") is None


def test_the_report_marks_a_dirty_side():
    assert report.commit_label({"commit": "3407f29abd03" + "0" * 28, "dirty": "ab12cd34" + "f" * 56}) \
        == "3407f29abd03+dirty:ab12cd34"
    assert report.commit_label({"commit": "3407f29abd03" + "0" * 28, "dirty": None}) == "3407f29abd03"
    c = compare(doc([entry("dense_b1_hq8_hk8_sq128_sk128_dqk64_dv64_c0", 100.0)], commit="3407f29abd03aa"),
                doc([entry("dense_b1_hq8_hk8_sq128_sk128_dqk64_dv64_c0", 100.2)], commit="3407f29abd03aa",
                    dirty="ab12cd34" + "0" * 56), gate())
    assert c.to_dict()["candidate"]["dirty"].startswith("ab12cd34")
    for form in (report.text(c), report.markdown(c), report.html_page(c, b"")):
        assert "commit 3407f29abd03+dirty:ab12cd34" in form
        assert "commit 3407f29abd03," in form          # the baseline: clean


def test_pins_are_one_line_with_a_count_and_a_pointer():
    versions = {f"pkg{i}": "1.0" for i in range(22)} | {"torch": "2.8.0", "triton": "3.4.0"}
    mismatches = [f"toolchain triton-3.4 pins pkg{i}==1.0 but the environment has pkg{i} 2.0" for i in range(5)]
    key = "dense_b1_hq8_hk8_sq128_sk128_dqk64_dv64_c0"
    c = compare(doc([entry(key, 100.0)], versions=versions, pins_checked=False, pin_mismatches=mismatches),
                doc([entry(key, 100.0)], versions=versions), gate())
    for form in (report.text(c), report.markdown(c)):
        side = next(line for line in form.splitlines() if "Baseline:" in line)
        assert "torch 2.8.0, triton 3.4.0" in side and "24 pins" in side
        assert "compare.json baseline.versions" in side
        unpinned = [line for line in form.splitlines() if "UNPINNED baseline" in line]
        assert len(unpinned) == 1 and "5 of 24 pins differ" in unpinned[0]
        assert "compare.json baseline.pin_mismatches" in unpinned[0] and "pins pkg1==" not in unpinned[0]
    assert c.to_dict()["baseline"]["pin_mismatches"] == mismatches


def test_a_measurement_records_the_change_of_the_tree_it_ran_from(tmp_path):
    root = repo(tmp_path)
    (root / "kernel.py").write_text("BLOCK = 128\n")

    def measured(commit):
        return provenance.collect(None, "cpu", toolchain="t", pins={"versions": {}, "pins_checked": True},
                                  arch=None, executor=None, image_digest=None, commit=commit, root=root,
                                  kernel="mha", planted_pct=0.0, smi_start=None, smi_end=None)

    assert measured(None)["dirty"] == provenance.git_dirty(root) is not None
    head = commit_or_none(root)
    assert measured(head)["dirty"] == provenance.git_dirty(root)
    # a commit handed in that is not this tree's HEAD: this tree's change is not its change
    assert measured("0" * 40)["dirty"] is None
