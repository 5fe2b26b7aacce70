"""`mha-ci perf bisect` on a synthetic git repository of ten commits, one of which changes the
kernel: the code objects come from a fake compile (the kernel file without comments), the GPU
steps from a fake measurer (+10 % from the changing commit on, about 0 before)."""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from mha_ci.bisect import code as code_mod
from mha_ci.bisect import gpu as gpu_mod
from mha_ci.bisect.code import CodeObjectsUnknown
from mha_ci.bisect.search import Step, most_steps, search
from mha_ci.cli import main
from mha_ci.errors import ExitCode

KEY = "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"
KERNEL = "src/mha/kernel.py"
CHANGING = 6          # the commit (index in good..bad) that changes the kernel


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           "-c", "commit.gpgsign=false", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def commit(repo: Path, rel: str, text: str, message: str) -> str:
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_text(text)
    git(repo, "add", rel)
    git(repo, "commit", "--quiet", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def history(pipeline_root: Path) -> list[str]:
    """Ten commits: 0 good; 1-5 and 7-9 touch a README or only a comment of the kernel; 6 changes
    the kernel's code. Returns their shas, oldest first."""
    repo = pipeline_root
    git(repo, "init", "--quiet", "-b", "main")
    git(repo, "add", "pipelines", "containers")
    shas = [commit(repo, KERNEL, "def kernel():\n    return 1\n", "kernel v1")]
    body = "def kernel():\n    return 1\n"
    for i in range(1, 10):
        if i == CHANGING:
            body = body.replace("return 1", "return 2")
            shas.append(commit(repo, KERNEL, body, "kernel v2: slower"))
        elif i % 2:
            shas.append(commit(repo, "README.md", f"readme {i}\n", f"docs {i}"))
        else:
            shas.append(commit(repo, KERNEL, f"# comment {i}\n{body}", f"comment {i}"))
    return shas


class Fakes:
    """The stage functions, counting their calls; `fail_on` makes the n-th measurement raise."""

    def __init__(self, repo: Path, shas: list[str], regressing: bool = True, fail_on: int | None = None) -> None:
        self.repo, self.shas, self.regressing, self.fail_on = repo, shas, regressing, fail_on
        self.compiled: list[str] = []
        self.measured: list[str] = []

    def compiler(self, *args, **kwargs):
        def code_objects(c) -> dict[str, str]:
            self.compiled.append(c.sha)
            text = git(self.repo, "show", f"{c.sha}:{KERNEL}")
            code = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
            return {"fwd-bf16/fwd": hashlib.sha256(code.encode()).hexdigest()}
        return code_objects

    def measurer(self, request, good, make_executor):
        assert good == self.shas[0] and list(request.keys) == [KEY]

        def measure(sha: str) -> Step:
            if self.fail_on is not None and len(self.measured) + 1 == self.fail_on:
                raise KeyboardInterrupt
            self.measured.append(sha)
            slow = self.regressing and self.shas.index(sha) >= CHANGING
            delta = 10.0 if slow else 0.3
            return Step(sha, slow, {KEY: {"delta_pct": delta, "threshold_pct": 3.0, "good_us": 100.0,
                                          "build_us": 100.0 + delta, "status": "regression" if slow else "ok",
                                          "reason": ""}}, seconds=12.0)
        return measure


def bisect(root: Path, out: Path, fakes: Fakes, monkeypatch, *extra: str, good: str = "HEAD~9",
           bad: str = "HEAD") -> int:
    monkeypatch.setattr(code_mod, "compiler", fakes.compiler)
    monkeypatch.setattr(gpu_mod, "measurer", fakes.measurer)
    return main(["--root", str(root), "perf", "bisect", "--good", good, "--bad", bad, "--arch", "sm90",
                 "--toolchain", "triton-3.4", "--shape", KEY, "--out", str(out), *extra])


def report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def test_names_the_commit_and_measures_no_commit_with_unchanged_code_objects(pipeline_root, history, tmp_path,
                                                                              monkeypatch, capsys):
    fakes = Fakes(pipeline_root, history)
    assert bisect(pipeline_root, tmp_path / "out", fakes, monkeypatch) == ExitCode.OK
    found = report(tmp_path / "out")
    assert found["status"] == "found" and found["first_moved"]["sha"] == history[CHANGING]
    assert found["first_moved"]["subject"] == "kernel v2: slower"
    assert KERNEL in found["first_moved"]["diff_stat"]
    # Two builds: code objects change only at CHANGING; README and comment commits are removed.
    assert [b["first"] for b in found["builds"]] == [history[0], history[CHANGING]]
    assert found["removed"] == 8
    # compiled once per distinct src/mha tree (README commits share their predecessor's tree)
    assert sorted(fakes.compiled) == sorted(history[i] for i in (0, 2, 4, 6, 8))
    assert fakes.measured == [history[CHANGING]]           # the check of bad's build is the whole search
    skipped = {s["sha"]: s["why"] for s in found["skipped"]}
    assert skipped[history[2]] == "src/mha changed, code objects equal"
    assert skipped[history[3]] == "src/mha unchanged"
    assert not set(skipped) & set(fakes.measured) and len(skipped) == 8
    assert found["gpu_seconds"] == 12.0
    text = capsys.readouterr().out
    assert history[CHANGING] in text and "+10.00 %" in text
    assert "kernel v2: slower" in (tmp_path / "out" / "report.md").read_text()


def test_a_search_over_many_builds_measures_only_their_first_commits(pipeline_root, history, tmp_path,
                                                                    monkeypatch):
    """Every commit changes the code objects (comments count in this fake): one build per commit,
    and the search measures at most 1 + ceil(log2(4)) of the five."""
    fakes = Fakes(pipeline_root, history)

    def every_commit_differs(*args, **kwargs):
        def code_objects(c) -> dict[str, str]:
            fakes.compiled.append(c.sha)
            return {"fwd": c.sha}
        return code_objects
    fakes.compiler = every_commit_differs       # type: ignore[method-assign]
    assert bisect(pipeline_root, tmp_path / "out", fakes, monkeypatch) == ExitCode.OK
    found = report(tmp_path / "out")
    assert found["first_moved"]["sha"] == history[CHANGING]
    assert len(found["builds"]) == 5            # README commits still share their predecessor's tree
    assert len(fakes.measured) <= most_steps(5) and len(set(fakes.measured)) == len(fakes.measured)


def test_resume_after_an_interruption_measures_nothing_twice(pipeline_root, history, tmp_path, monkeypatch):
    first = Fakes(pipeline_root, history, fail_on=3)
    first.compiler = lambda *a, **k: (lambda c: {"fwd": c.tree})     # type: ignore  # five builds
    assert bisect(pipeline_root, tmp_path / "out", first, monkeypatch) == ExitCode.INTERRUPTED
    assert len(first.measured) == 2
    stored = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert set(stored["steps"]) == set(first.measured)
    again = Fakes(pipeline_root, history)
    again.compiler = lambda *a, **k: pytest.fail("the CPU stage was stored: nothing to compile")  # type: ignore
    assert bisect(pipeline_root, tmp_path / "out", again, monkeypatch) == ExitCode.OK
    assert not set(again.measured) & set(first.measured) and again.measured
    found = report(tmp_path / "out")
    assert found["first_moved"]["sha"] == history[CHANGING]
    assert [s["commit"] for s in found["steps"]] == first.measured + again.measured


def test_not_reproducible_is_exit_1(pipeline_root, history, tmp_path, monkeypatch):
    fakes = Fakes(pipeline_root, history, regressing=False)
    assert bisect(pipeline_root, tmp_path / "out", fakes, monkeypatch) == ExitCode.GATE_FAILED
    found = report(tmp_path / "out")
    assert found["status"] == "not reproducible" and found["first_moved"] is None
    assert fakes.measured == [history[CHANGING]]


def test_a_range_without_a_code_object_change_needs_no_gpu(pipeline_root, history, tmp_path, monkeypatch):
    fakes = Fakes(pipeline_root, history)
    assert bisect(pipeline_root, tmp_path / "out", fakes, monkeypatch, good="HEAD~3") == ExitCode.GATE_FAILED
    assert report(tmp_path / "out")["status"] == "no kernel change" and not fakes.measured


def test_cpu_only_lists_the_builds_and_the_gpu_stage_reuses_them(pipeline_root, history, tmp_path, monkeypatch,
                                                                  capsys):
    fakes = Fakes(pipeline_root, history)
    assert bisect(pipeline_root, tmp_path / "out", fakes, monkeypatch, "--cpu-only") == ExitCode.OK
    assert not fakes.measured and report(tmp_path / "out")["status"] == "planned"
    assert "2 distinct builds" in capsys.readouterr().out
    later = Fakes(pipeline_root, history)
    later.compiler = lambda *a, **k: pytest.fail("the CPU stage was stored: nothing to compile")  # type: ignore
    assert bisect(pipeline_root, tmp_path / "out", later, monkeypatch, "--executor", "host", "--pins",
                  "record") == ExitCode.OK
    assert later.measured == [history[CHANGING]]


def test_unknown_code_objects_keep_a_commit_apart(pipeline_root, history, tmp_path, monkeypatch):
    """A commit whose compile failed cannot be shown equal to its neighbour: its own build."""
    fakes = Fakes(pipeline_root, history)
    real = fakes.compiler()

    def failing_at_4(*args, **kwargs):
        def code_objects(c):
            if c.sha == history[4]:
                raise CodeObjectsUnknown("fwd-bf16/fwd: compile error")
            return real(c)
        return code_objects
    fakes.compiler = failing_at_4              # type: ignore[method-assign]
    assert bisect(pipeline_root, tmp_path / "out", fakes, monkeypatch) == ExitCode.OK
    found = report(tmp_path / "out")
    assert [b["first"] for b in found["builds"]] == [history[0], history[4], history[CHANGING]]
    assert found["first_moved"]["sha"] == history[CHANGING]


@pytest.mark.parametrize("good, bad, shape, why", [
    ("nosuchref", "HEAD", KEY, "names no commit"),
    ("HEAD", "HEAD~9", KEY, "is not an ancestor"),
    ("HEAD", "HEAD", KEY, "same commit"),
    ("HEAD~9", "HEAD", "dense_nomatch*", "no workload shape matches"),
])
def test_usage_errors_are_exit_2(pipeline_root, history, tmp_path, monkeypatch, capsys, good, bad, shape, why):
    fakes = Fakes(pipeline_root, history)
    monkeypatch.setattr(code_mod, "compiler", fakes.compiler)
    monkeypatch.setattr(gpu_mod, "measurer", fakes.measurer)
    code = main(["--root", str(pipeline_root), "perf", "bisect", "--good", good, "--bad", bad, "--arch", "sm90",
                 "--toolchain", "triton-3.4", "--shape", shape, "--out", str(tmp_path / "out")])
    assert code == ExitCode.CONFIG_ERROR and why in capsys.readouterr().err
    assert not fakes.compiled and not fakes.measured


def test_an_out_folder_of_another_bisect_is_refused(pipeline_root, history, tmp_path, monkeypatch, capsys):
    fakes = Fakes(pipeline_root, history)
    assert bisect(pipeline_root, tmp_path / "out", fakes, monkeypatch, "--cpu-only") == ExitCode.OK
    assert bisect(pipeline_root, tmp_path / "out", fakes, monkeypatch, "--cpu-only",
                  good="HEAD~8") == ExitCode.CONFIG_ERROR
    assert "other arguments (good: stored" in capsys.readouterr().err


def test_search_is_a_binary_search_over_builds():
    for count in range(2, 40):
        for first in range(1, count):
            seen: list[int] = []

            def measure(i: int) -> Step:
                seen.append(i)
                return Step(str(i), i >= first)
            outcome = search(count, measure)
            assert outcome.first_moved == first and len(seen) <= most_steps(count) and len(set(seen)) == len(seen)


def test_a_step_is_judged_by_the_gate_on_the_bisected_shapes_only():
    from perf_builders import doc, entry, gate

    from mha_ci.bisect.gpu import StepUnjudged, step_of
    from mha_ci.perf.compare import compare

    other = "dense_b1_hq16_hk1_sq8192_sk8192_dqk128_dv128_c1"
    good = doc([entry(KEY, 100.0), entry(other, 100.0)])
    policy = gate(floor_pct=3.0, k=1.0)
    slower = step_of("c" * 40, compare(good, doc([entry(KEY, 110.0), entry(other, 100.0)]), policy), [KEY], 5.0)
    assert slower.regressed and slower.shapes[KEY]["delta_pct"] == 10.0 and other not in slower.shapes
    moved_elsewhere = compare(good, doc([entry(KEY, 100.5), entry(other, 150.0)]), policy)
    assert not step_of("c" * 40, moved_elsewhere, [KEY], 5.0).regressed
    with pytest.raises(StepUnjudged, match="could not be judged"):
        step_of("c" * 40, compare(good, doc([entry(KEY, None, error="launch failed"), entry(other, 100.0)]),
                                  policy), [KEY], 5.0)


def test_a_step_without_a_verdict_is_exit_1_and_is_not_stored(pipeline_root, history, tmp_path, monkeypatch):
    from mha_ci.bisect.gpu import StepUnjudged

    fakes = Fakes(pipeline_root, history)

    def unjudged(*args, **kwargs):
        def measure(sha: str) -> Step:
            raise StepUnjudged(f"the step of {sha[:12]} could not be judged: too noisy")
        return measure
    fakes.measurer = unjudged                   # type: ignore[method-assign]
    assert bisect(pipeline_root, tmp_path / "out", fakes, monkeypatch) == ExitCode.GATE_FAILED
    assert report(tmp_path / "out")["status"] == "no verdict"
    assert json.loads((tmp_path / "out" / "bisect.json").read_text())["steps"] == {}
