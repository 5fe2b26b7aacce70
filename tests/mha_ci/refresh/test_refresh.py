"""The nightly refresh (mha_ci.refresh) on a real temporary git repository with fake
mha-ci.perf/1 measurements: what it commits, where, and every refusal."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from mha_ci.cli import main
from mha_ci.errors import ConfigError, EnvironmentProblem, ExitCode
from mha_ci.jobs.context import JobContext
from mha_ci.model.loader import load_pipeline
from mha_ci.refresh import RefreshRefused, refresh
from mha_ci import git as git_branch
from mha_ci.refresh.core import RefreshPolicy
from mha_ci.perf.config import gate_policy
from mha_ci.perf.request import perf_request
from perf_builders import gate

DATE = dt.date(2026, 11, 30)
BRANCH = "baseline-refresh/2026-11-30-sm90"
BRANCH_34 = BRANCH + "-triton-3.4"    # only one of the two toolchains refreshed
POLICY = RefreshPolicy(max_noise_pct=5.0, gate=gate(floor_pct=3.0, k=1.0))
PINS = {"triton-3.4": {"torch": "2.13.0+cu130", "triton": "3.4.0"},
        "triton-3.8": {"torch": "2.13.0+cu130", "triton": "3.8.0"}}
KEYS = ("dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1", "dense_b1_hq64_hk8_sq8192_sk8192_dqk128_dv128_c1")


def perf_doc(toolchain: str, means=(500.0, 1900.0), noise=2.0, gpu="NVIDIA H200", arch="sm90",
             stall=None, versions=None, subset="full", error_key=None, pins_checked=True) -> dict:
    results = []
    for key, mean in zip(KEYS, means):
        if key == error_key:
            results.append({"key": key, "shape": {}, "bucket": "default", "stats": None, "error": "launch failed"})
            continue
        results.append({"key": key, "shape": {"b": 8}, "bucket": "default",
                        "stats": {"trimmed_mean_us": mean, "median_us": mean, "max_us": mean * 1.2,
                                  "noise_pct": noise, "reps": 5, "dispatches": 40, "stall": stall}, "error": None})
    return {"schema": "mha-ci.perf/1",
            "provenance": {"gpu": gpu, "arch": arch, "driver": "580.1", "toolchain": toolchain,
                           "versions": versions or PINS[toolchain], "kernel": "mha", "commit": "abc", "date": "2026-11-29",
                           "pins_checked": pins_checked,
                           "pin_mismatches": [] if pins_checked else ["toolchain t pins torch==2.8.0 but the environment has torch 2.11.0"]},
            "method": {"warmup": 10, "dispatches": 40, "reps": 5, "trim": [10, 10]},
            "selection": {"subset": subset, "count": len(results)}, "results": results}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(pipeline_root: Path) -> Path:
    """A git repository holding pipelines/, the locks and a stored sm90/triton-3.4 baseline."""
    baseline = pipeline_root / "perf_baselines" / "sm90" / "triton-3.4.json"
    baseline.parent.mkdir(parents=True)
    baseline.write_text(json.dumps(perf_doc("triton-3.4"), indent=1) + "\n")
    git(pipeline_root, "init", "--quiet", "-b", "main")
    git(pipeline_root, "add", ".")
    git(pipeline_root, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
        "commit", "--quiet", "-m", "init")
    return pipeline_root


@pytest.fixture
def scratch(tmp_path_factory) -> Path:
    """A folder outside the repository, for out/ folders and measurement files."""
    return tmp_path_factory.mktemp("scratch")


def snapshot(repo: Path) -> tuple:
    """Everything a refresh must leave alone in the checkout: HEAD, branch, status, worktrees, baseline."""
    return (git(repo, "rev-parse", "HEAD"), git(repo, "symbolic-ref", "HEAD"), git(repo, "status", "--porcelain"),
            git(repo, "worktree", "list", "--porcelain").count("worktree "),
            (repo / "perf_baselines/sm90/triton-3.4.json").read_text())


def measure_with(docs: dict):
    return lambda arch, toolchain: docs[toolchain.name]


def request_for(repo: Path, arch: str = "sm90", toolchains=None, out_dir: Path | None = None):
    pipeline = load_pipeline(repo)
    return perf_request(pipeline, arch=arch, toolchains=toolchains or list(pipeline.toolchains),
                        out_dir=out_dir or repo / "out", executor=None)


def run(repo: Path, docs: dict, scratch: Path, toolchains=None, **kw):
    return refresh(request_for(repo, toolchains=toolchains), measure_with(docs), out_dir=scratch / "out",
                   policy=POLICY, today=DATE, **kw)


def test_commits_new_baselines_on_a_new_branch_only(repo, scratch):
    before = snapshot(repo)
    docs = {"triton-3.4": perf_doc("triton-3.4", means=(560.0, 1905.0)), "triton-3.8": perf_doc("triton-3.8")}
    result = run(repo, docs, scratch)

    assert result.status == "committed" and result.branch == BRANCH
    assert snapshot(repo) == before                     # checkout, its branch and files untouched
    assert git(repo, "rev-parse", f"{BRANCH}^") == before[0]    # exactly one commit on top of HEAD
    assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", BRANCH) == \
        "mha-ci nightly <mha-ci@localhost>|mha-ci nightly <mha-ci@localhost>"
    changed = git(repo, "diff", "--name-only", f"{BRANCH}^", BRANCH).splitlines()
    assert changed == ["perf_baselines/sm90/triton-3.4.json", "perf_baselines/sm90/triton-3.8.json"]
    stored = json.loads(git(repo, "show", f"{BRANCH}:perf_baselines/sm90/triton-3.4.json"))
    # the stored baseline is the new run joined to the old one's history (mha_ci.perf.combine.roll)
    first = stored["results"][0]["stats"]
    assert first["run_trimmed_means_us"] == [500.0, 560.0] and first["trimmed_mean_us"] == 530.0
    assert first["between_run_noise_pct"] == pytest.approx(100 * 42.426 / 530.0, abs=1e-2)
    assert [r["stats"]["max_us"] for r in stored["results"]] == [r["stats"]["max_us"] for r in docs["triton-3.4"]["results"]]
    assert len(stored["provenance"]["combined_runs"]) == 2
    new_38 = json.loads(git(repo, "show", f"{BRANCH}:perf_baselines/sm90/triton-3.8.json"))
    assert new_38["results"][0]["stats"]["run_trimmed_means_us"] == [500.0]
    assert result.history == {"triton-3.4": "2 run(s) kept",
                              "triton-3.8": "1 run(s) kept; history restarted: no stored baseline"}
    assert result.moved == {"triton-3.4": [KEYS[0]], "triton-3.8": []}   # +12 % > 3 %; +0.3 % is noise

    out = scratch / "out"
    body = (out / "pr-body.md").read_text()
    assert f"| triton-3.4 | `{KEYS[0]}` | 500.0 | 2.0 % | 560.0 | 2.0 % | +12.0 % | 3.0 % | regression |" in body
    assert "## Provenance" in body and "NVIDIA H200" in body and "(no baseline)" in body   # triton-3.8 is new
    assert json.loads((out / "refresh.json").read_text())["branch"] == BRANCH
    assert (out / "pr-title.txt").read_text() == "Baseline refresh: sm90, 2026-11-30\n"
    assert sorted(p.name for p in out.iterdir()) == ["pr-body.md", "pr-title.txt", "refresh.json"]


def test_nothing_moved_makes_no_branch_unless_asked(repo, scratch):
    docs = {"triton-3.4": perf_doc("triton-3.4", means=(501.0, 1899.0))}
    result = run(repo, docs, scratch, toolchains=["triton-3.4"])
    assert result.status == "unchanged" and result.branch is None
    assert not git_branch.branch_exists(repo, BRANCH_34)
    assert "nothing changed beyond noise" in (scratch / "out" / "pr-body.md").read_text()
    forced = run(repo, docs, scratch, toolchains=["triton-3.4"], always=True)
    assert forced.branch == BRANCH_34 and git_branch.branch_exists(repo, BRANCH_34)


@pytest.mark.parametrize("doc, exit_code, reason", [
    (perf_doc("triton-3.4", stall={"worst_us": 2100.0, "ratio": 4.2}), ExitCode.GATE_FAILED, "stalled (2100.0 us, 4.2x the median)"),
    (perf_doc("triton-3.4", noise=7.5), ExitCode.GATE_FAILED, "noise 7.5 % > refresh.max_noise_pct 5.0 %"),
    (perf_doc("triton-3.4", error_key=KEYS[1]), ExitCode.GATE_FAILED, "failed to run: launch failed"),
    (perf_doc("triton-3.4", subset="pr"), ExitCode.GATE_FAILED, "measured the 'pr' subset"),
    ({"schema": "mha-ci.perf/0"}, ExitCode.GATE_FAILED, "not a mha-ci.perf/1 document"),
    (perf_doc("triton-3.4", gpu="NVIDIA H100 80GB HBM3"), ExitCode.ENVIRONMENT_ERROR,
     "not comparable with the stored baseline: different GPU: baseline 'NVIDIA H200', candidate 'NVIDIA H100 80GB HBM3'"),
    (perf_doc("triton-3.4", arch="gfx950"), ExitCode.ENVIRONMENT_ERROR, "measured on arch 'gfx950', not 'sm90'"),
    (perf_doc("triton-3.8", versions=PINS["triton-3.8"]) | {}, ExitCode.ENVIRONMENT_ERROR,
     "measured with toolchain 'triton-3.8', not 'triton-3.4'"),
    (perf_doc("triton-3.4", versions={"torch": "2.13.0+cu130", "triton": "3.6.0"}), ExitCode.ENVIRONMENT_ERROR,
     "triton '3.6.0' measured, '3.4.0' pinned"),
    (perf_doc("triton-3.4", pins_checked=False), ExitCode.ENVIRONMENT_ERROR,
     "an unpinned measurement (toolchain t pins torch==2.8.0 but the environment has torch 2.11.0) does not refresh"),
], ids=["stall", "noise", "failed-shape", "subset", "schema", "gpu", "arch", "toolchain", "pin", "unpinned"])
def test_refuses_an_invalid_measurement_and_writes_nothing(repo, scratch, doc, exit_code, reason):
    before = snapshot(repo)
    with pytest.raises(RefreshRefused) as refused:
        run(repo, {"triton-3.4": doc}, scratch, toolchains=["triton-3.4"])
    assert refused.value.exit_code == exit_code
    assert any(reason in r for r in refused.value.reasons), refused.value.reasons
    assert snapshot(repo) == before and not git_branch.branch_exists(repo, BRANCH_34)
    record = json.loads((scratch / "out" / "refresh.json").read_text())
    assert record["status"] == "refused" and record["branch"] is None and record["exit_code"] == exit_code


def test_reports_every_toolchains_problems_at_once(repo, scratch):
    docs = {"triton-3.4": perf_doc("triton-3.4", noise=9.0), "triton-3.8": perf_doc("triton-3.8", stall={"worst_us": 1, "ratio": 5})}
    with pytest.raises(RefreshRefused) as refused:
        run(repo, docs, scratch)
    assert any(r.startswith("sm90/triton-3.4") for r in refused.value.reasons)
    assert any(r.startswith("sm90/triton-3.8") for r in refused.value.reasons)


def test_interrupted_mid_write_leaves_nothing_behind(repo, scratch, monkeypatch):
    before = snapshot(repo)
    real_write, calls = git_branch._write_file, []

    def interrupted(path, data):
        calls.append(path)
        if len(calls) == 2:                 # the first baseline is written, the second is not
            raise KeyboardInterrupt
        real_write(path, data)

    monkeypatch.setattr(git_branch, "_write_file", interrupted)
    # The refresh's scratch worktree goes under a temp root of this test alone: another test
    # running at the same time (pytest-xdist) makes its own under the system one.
    temp_root = scratch / "tmp"
    temp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp_root))
    docs = {"triton-3.4": perf_doc("triton-3.4", means=(600.0, 1900.0)), "triton-3.8": perf_doc("triton-3.8")}
    with pytest.raises(KeyboardInterrupt):
        run(repo, docs, scratch)
    assert len(calls) == 2
    assert snapshot(repo) == before
    assert not git_branch.branch_exists(repo, BRANCH)
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert not calls[0].exists()                          # the worktree holding the partial file is gone
    assert not any(temp_root.glob("mha-ci-refresh-*"))
    assert not (scratch / "out").exists() or not any((scratch / "out").iterdir())


def test_interrupted_while_publishing_removes_the_branch(repo, scratch, monkeypatch):
    from mha_ci.refresh import core

    def interrupted(out_dir, texts):
        raise KeyboardInterrupt

    monkeypatch.setattr(core, "_publish", interrupted)
    docs = {"triton-3.4": perf_doc("triton-3.4", means=(600.0, 1900.0))}
    with pytest.raises(KeyboardInterrupt):
        run(repo, docs, scratch, toolchains=["triton-3.4"])
    assert not git_branch.branch_exists(repo, BRANCH_34)


def test_existing_branch_is_an_environment_error(repo, scratch):
    git(repo, "branch", BRANCH_34)
    docs = {"triton-3.4": perf_doc("triton-3.4", means=(600.0, 1900.0))}
    with pytest.raises(EnvironmentProblem, match="already exists"):
        run(repo, docs, scratch, toolchains=["triton-3.4"])
    assert git(repo, "rev-parse", BRANCH_34) == git(repo, "rev-parse", "HEAD")     # not moved


def test_arch_without_refresh_job_is_a_config_error(repo, scratch):
    with pytest.raises(ConfigError, match="no refresh job"):
        refresh(request_for(repo, "interpreter"), measure_with({}), out_dir=scratch / "out", policy=POLICY)


def of_head(repo: Path, doc: dict) -> dict:
    doc["provenance"]["commit"] = git(repo, "rev-parse", "HEAD")
    return doc


def test_command_line_from_measurement_files(repo, scratch):
    m34 = scratch / "m34.json"
    m34.write_text(json.dumps(of_head(repo, perf_doc("triton-3.4", means=(450.0, 1900.0)))))
    codeobj = scratch / "co.json"
    codeobj.write_text(json.dumps({"schema": "mha-ci.codeobj/1", "toolchain": {}, "objects": []}))
    out = scratch / "cli-out"
    argv = ["--root", str(repo), "perf", "refresh", "--arch", "sm90", "--measurement", f"triton-3.4={m34}",
            "--checksums", f"triton-3.4={codeobj}", "--out", str(out), "--date", "2026-11-30"]
    assert main(argv) == 0
    files = git(repo, "diff", "--name-only", f"{BRANCH_34}^", BRANCH_34).splitlines()
    assert files == ["perf_baselines/code_objects/triton-3.4.json", "perf_baselines/sm90/triton-3.4.json"]
    assert "improvement" in (out / "pr-body.md").read_text()

    noisy = scratch / "noisy.json"
    noisy.write_text(json.dumps(of_head(repo, perf_doc("triton-3.4", noise=12.0))))
    argv = ["--root", str(repo), "perf", "refresh", "--arch", "sm90", "--measurement", f"triton-3.4={noisy}",
            "--out", str(scratch / "o2"), "--date", "2026-12-01"]
    assert main(argv) == ExitCode.GATE_FAILED
    assert not git_branch.branch_exists(repo, "baseline-refresh/2026-12-01-sm90-triton-3.4")

    # the arch the files were measured on is not guessed from this machine's devices
    no_arch = ["--root", str(repo), "perf", "refresh", "--measurement", f"triton-3.4={m34}", "--out", str(out)]
    assert main(no_arch) == ExitCode.CONFIG_ERROR
    assert main([*no_arch[:4], "--arch", "sm90", "--measurement", "triton-3.4", "--out", str(out)]) == \
        ExitCode.CONFIG_ERROR


def test_a_measurement_of_other_code_objects_or_a_dirty_tree_is_refused(repo, scratch):
    """--measurement stores a document as HEAD's baseline: only if it timed HEAD's code objects."""
    def commit_all(message):
        git(repo, "add", ".")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
            "commit", "--quiet", "-m", message)
        return git(repo, "rev-parse", "HEAD")

    records = repo / "perf_baselines" / "code_objects" / "triton-3.4.json"
    records.parent.mkdir(parents=True, exist_ok=True)

    def store(sha):
        records.write_text(json.dumps({"schema": "mha-ci.codeobj/1", "toolchain": {}, "records": [
            {"key": "sm90/forward/default/fwd/bf16-d128", "arch": "sm90", "sha256": sha},
            {"key": "gfx942/forward/default/fwd/bf16-d128", "arch": "gfx942", "sha256": "g" * 64}]}))

    store("a" * 64)
    measured_at = commit_all("code objects a")
    (repo / "src").mkdir(exist_ok=True)
    (repo / "src" / "host.py").write_text("# host code only\n")
    commit_all("host code")
    doc = perf_doc("triton-3.4", means=(450.0, 1900.0))
    doc["provenance"]["commit"] = measured_at
    m34 = scratch / "m34.json"
    m34.write_text(json.dumps(doc))

    def refresh(date):
        return main(["--root", str(repo), "perf", "refresh", "--arch", "sm90", "--measurement", f"triton-3.4={m34}",
                     "--out", str(scratch / date), "--date", date])

    store("b" * 64)                                  # a config change: other sm90 code objects
    commit_all("code objects b")
    assert refresh("2026-12-01") == ExitCode.CONFIG_ERROR
    store("a" * 64)                                  # back to the measured code: accepted
    commit_all("code objects a again")
    (repo / "src" / "new_kernel.py").write_text("# untracked\n")
    assert refresh("2026-12-02") == ExitCode.CONFIG_ERROR      # an untracked file under src/ is dirty
    (repo / "src" / "new_kernel.py").unlink()
    assert refresh("2026-12-03") == ExitCode.OK
    doc["provenance"]["commit"] = "f" * 40           # a commit this clone does not have
    m34.write_text(json.dumps(doc))
    assert refresh("2026-12-04") == ExitCode.CONFIG_ERROR


def test_policy_comes_from_pipelines_perf_yaml(repo):
    import yaml

    raw = yaml.safe_load((repo / "pipelines" / "perf.yaml").read_text())
    policy = RefreshPolicy.from_perf(load_pipeline(repo).perf, gate_policy(load_pipeline(repo).perf))
    assert policy.max_noise_pct == raw["refresh"]["max_noise_pct"]
    assert policy.gate.floor_pct == raw["gate"]["floor_pct"] and policy.gate.k == raw["gate"]["k"]


def test_an_unpinned_measurement_refreshes_only_when_asked_and_stays_marked(repo, scratch):
    docs = {"triton-3.4": perf_doc("triton-3.4", means=(600.0, 1900.0), pins_checked=False)}
    result = run(repo, docs, scratch, toolchains=["triton-3.4"], allow_unpinned=True)
    assert result.status == "committed"
    stored = json.loads(git(repo, "show", f"{BRANCH_34}:perf_baselines/sm90/triton-3.4.json"))
    assert stored["provenance"]["pins_checked"] is False and stored["provenance"]["pin_mismatches"]


def test_a_torch_release_other_than_the_pin_is_no_refusal(repo, scratch):
    # torch launches the Triton kernels but compiles none of them (mha_ci.perf.comparable)
    docs = {"triton-3.4": perf_doc("triton-3.4", means=(600.0, 1900.0),
                                   versions={"torch": "2.11.0+cu130", "triton": "3.4.0"})}
    assert run(repo, docs, scratch, toolchains=["triton-3.4"]).status == "committed"


def test_refresh_refuses_a_working_tree_that_is_not_head(repo, scratch, capsys):
    """Its baselines are stored as HEAD's: measuring uncommitted code would misattribute them."""
    toolchains = repo / "pipelines" / "toolchains.yaml"
    toolchains.write_text(toolchains.read_text() + "\n# an uncommitted edit\n")
    code = main(["--root", str(repo), "perf", "refresh", "--arch", "sm90", "--executor", "host",
                 "--out", str(scratch / "out")])
    assert code == ExitCode.CONFIG_ERROR
    assert "differs from HEAD in 1 tracked file(s) (pipelines/toolchains.yaml)" in capsys.readouterr().err


def test_a_stall_seen_only_in_max_us_is_refused(repo, scratch):
    doc = perf_doc("triton-3.4")
    doc["results"][0]["stats"]["max_us"] = 500.0 * 5000      # no `stall` field, as another tool writes it
    with pytest.raises(RefreshRefused) as refused:
        run(repo, {"triton-3.4": doc}, scratch, toolchains=["triton-3.4"])
    assert any("stalled (2500000.0 us, 5000.0x the median)" in r for r in refused.value.reasons), refused.value.reasons


# -- shapes caught disturbed are measured again (mha_ci.refresh.remeasure) ----------------------

STALL = {"count": 3, "worst_us": 2100.0, "ratio": 4.2, "rep": 1, "index": 7}


def remeasure_with(*rounds: dict, asked: list | None = None):
    """A RemeasureFn handing out `rounds` in turn (None when they run out), noting what was asked."""
    def remeasure_fn(arch, toolchain, keys, round_):
        if asked is not None:
            asked.append((toolchain.name, keys, round_))
        return rounds[round_ - 1] if round_ <= len(rounds) else None
    return remeasure_fn


def test_a_stalled_shape_measured_again_cleanly_goes_into_the_baseline(repo, scratch):
    first = perf_doc("triton-3.4", means=(600.0, 1900.0))
    first["results"][1]["stats"]["stall"] = STALL
    again = perf_doc("triton-3.4", means=(999.0, 1950.0))          # its other shape is ignored
    asked: list = []
    result = run(repo, {"triton-3.4": first}, scratch, toolchains=["triton-3.4"],
                 remeasure_fn=remeasure_with(again, asked=asked))
    assert result.status == "committed"
    assert asked == [("triton-3.4", [KEYS[1]], 1)]                   # only the disturbed shape, once
    stored = json.loads(git(repo, "show", f"{BRANCH_34}:perf_baselines/sm90/triton-3.4.json"))
    values = {e["key"]: e["stats"]["run_trimmed_means_us"][-1] for e in stored["results"]}
    assert values == {KEYS[0]: 600.0, KEYS[1]: 1950.0}
    note = stored["selection"]["remeasured"][KEYS[1]]
    assert note["taken_from"] == "re-measurement 1" and note["first"].startswith("stalled (2100.0 us, 4.2x")
    assert stored["selection"]["remeasure_rounds"] == 1
    body = (scratch / "out" / "pr-body.md").read_text()
    assert "## Shapes measured again" in body and f"| triton-3.4 | `{KEYS[1]}` | stalled (2100.0 us" in body


def test_a_shape_disturbed_in_every_round_still_refuses(repo, scratch):
    first = perf_doc("triton-3.4", noise=7.5)
    second = perf_doc("triton-3.4", stall=STALL)
    third = perf_doc("triton-3.4", noise=6.0)
    asked: list = []
    with pytest.raises(RefreshRefused) as refused:
        run(repo, {"triton-3.4": first}, scratch, toolchains=["triton-3.4"],
            remeasure_fn=remeasure_with(second, third, third, asked=asked))
    assert [a[2] for a in asked] == [1, 2]                          # POLICY's default: two rounds
    assert refused.value.exit_code == ExitCode.GATE_FAILED
    assert any("noise 7.5 %" in r and "again in 2 re-measurement(s)" in r for r in refused.value.reasons), \
        refused.value.reasons


def test_a_re_measurement_of_another_build_is_refused(repo, scratch):
    first = perf_doc("triton-3.4", stall=STALL)
    other = perf_doc("triton-3.4")
    other["provenance"]["commit"] = "def"
    with pytest.raises(ConfigError, match="re-measurement 1 cannot stand in.*commit 'def'"):
        run(repo, {"triton-3.4": first}, scratch, toolchains=["triton-3.4"], remeasure_fn=remeasure_with(other))


def test_shapes_that_moved_after_a_kernel_change_start_their_history_again(repo, scratch):
    """Runs of another kernel build are not history of a shape the change moved: the stored
    median would hide the move. Shapes it did not move keep their runs and spread."""
    def commit_all(message):
        git(repo, "add", ".")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
            "commit", "--quiet", "-m", message)
        return git(repo, "rev-parse", "HEAD")

    base = git(repo, "rev-parse", "HEAD")
    stored = perf_doc("triton-3.4")
    stored["provenance"]["commit"] = base
    (repo / "perf_baselines/sm90/triton-3.4.json").write_text(json.dumps(stored, indent=1) + "\n")
    docs_only = commit_all("baseline of base")
    kernel = repo / "src" / "mha" / "kernels" / "forward.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("# a faster kernel\n")
    changed = commit_all("kernel change")

    def runs_of(result):
        stored = json.loads(git(repo, "show", f"{result.branch}:perf_baselines/sm90/triton-3.4.json"))
        return [e["stats"]["run_trimmed_means_us"] for e in stored["results"]]

    same_kernel = perf_doc("triton-3.4", means=(560.0, 1905.0))        # +12 % moved, +0.3 % did not
    same_kernel["provenance"]["commit"] = docs_only
    kept = run(repo, {"triton-3.4": same_kernel}, scratch, toolchains=["triton-3.4"])
    assert kept.history == {"triton-3.4": "2 run(s) kept"}
    assert runs_of(kept) == [[500.0, 560.0], [1900.0, 1905.0]]        # a move with the same kernel is noise
    git(repo, "branch", "-D", BRANCH_34)

    new_kernel = perf_doc("triton-3.4", means=(560.0, 1905.0))
    new_kernel["provenance"]["commit"] = changed
    result = run(repo, {"triton-3.4": new_kernel}, scratch, toolchains=["triton-3.4"])
    assert result.history == {"triton-3.4": "2 run(s) kept; 1 shape(s) start their history again: 1 without "
                                            "recorded code objects moved after a kernel change (the kernel changed "
                                            f"since kept run {base[:12]} (src/mha/kernels/forward.py))"}
    assert runs_of(result) == [[560.0], [1900.0, 1905.0]]


def test_history_restarts_exactly_where_the_code_objects_changed(repo, scratch):
    """With code objects recorded the commit does not matter: a shape whose kernels changed
    restarts even when it did not move, one whose kernels did not keeps its runs even when it
    moved and src/mha changed."""
    def with_code(doc, first, second):
        for entry, sha in zip(doc["results"], (first, second)):
            entry["code_objects"] = {"fwd": sha}
        return doc

    base = git(repo, "rev-parse", "HEAD")
    stored = with_code(perf_doc("triton-3.4"), "a" * 64, "b" * 64)
    stored["provenance"]["commit"] = base
    (repo / "perf_baselines/sm90/triton-3.4.json").write_text(json.dumps(stored, indent=1) + "\n")
    kernel = repo / "src" / "mha" / "kernels" / "forward.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("# another kernel\n")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "commit", "--quiet",
        "-m", "kernel change")
    # shape 0 moved +12 % on the same code objects; shape 1 did not move but ran new ones
    new = with_code(perf_doc("triton-3.4", means=(560.0, 1901.0)), "a" * 64, "c" * 64)
    new["provenance"]["commit"] = git(repo, "rev-parse", "HEAD")
    result = run(repo, {"triton-3.4": new}, scratch, toolchains=["triton-3.4"])
    assert result.history == {"triton-3.4": "2 run(s) kept; 1 shape(s) start their history again: "
                                            "1 ran other code objects"}
    stored = json.loads(git(repo, "show", f"{result.branch}:perf_baselines/sm90/triton-3.4.json"))
    runs = {e["key"]: e["stats"]["run_trimmed_means_us"] for e in stored["results"]}
    assert runs == {KEYS[0]: [500.0, 560.0], KEYS[1]: [1901.0]}
    assert [e["code_objects"] for e in stored["results"]] == [{"fwd": "a" * 64}, {"fwd": "c" * 64}]


def test_command_line_takes_re_measurements_as_repeated_files(repo, scratch):
    first, again = scratch / "first.json", scratch / "again.json"
    stalled = of_head(repo, perf_doc("triton-3.4", means=(600.0, 1900.0)))
    stalled["results"][0]["stats"]["stall"] = STALL
    first.write_text(json.dumps(stalled))
    again.write_text(json.dumps(of_head(repo, perf_doc("triton-3.4", means=(610.0, 1900.0)))))
    out = scratch / "cli"
    base = ["--root", str(repo), "perf", "refresh", "--arch", "sm90", "--out", str(out), "--date", "2026-11-30"]
    assert main([*base, "--measurement", f"triton-3.4={first}"]) == ExitCode.GATE_FAILED
    assert main([*base, "--measurement", f"triton-3.4={first}", "--measurement", f"triton-3.4={again}"]) == 0
    stored = json.loads(git(repo, "show", f"{BRANCH_34}:perf_baselines/sm90/triton-3.4.json"))
    assert stored["results"][0]["stats"]["run_trimmed_means_us"][-1] == 610.0
    # a file option that names a toolchain twice is an error, not a silent last-one-wins
    assert main([*base, "--measurement", f"triton-3.4={again}", "--checksums", f"triton-3.4={first}",
                 "--checksums", f"triton-3.4={again}"]) == ExitCode.CONFIG_ERROR


class StallOnceExecutor:
    """Stands in for the perf payload: a document for the shapes it is given, the first shape of
    the first run stalled; notes the shape lists it was asked for."""

    name = "fake"
    pin_mode = "enforce"

    def __init__(self):
        self.asked: list[list[str]] = []

    def run(self, payload):
        from mha_ci.executors.base import PayloadResult
        from perf_builders import doc, entry

        args = dict(zip(payload.args[::2], payload.args[1::2]))
        keys = [s["key"] for s in json.loads((payload.out_dir / args["--shapes"]).read_text())["shapes"]]
        first = not self.asked
        self.asked.append(keys)
        results = [entry(k, 100.0, stall=STALL if first and i == 0 else None) for i, k in enumerate(keys)]
        subset = json.loads((payload.out_dir / args["--shapes"]).read_text())["subset"]
        out = payload.out_dir / args["--out"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc(results, subset=subset, versions=PINS["triton-3.4"], date="2026-11-30",
                                        pins_checked=True)))
        return PayloadResult(exit_code=0, provenance={"executor": "fake"})


def test_the_refresh_job_measures_again_only_the_stalled_shape(repo, scratch):
    """jobs/refresh.py end to end: the full set, then the one stalled shape in its own folder."""
    from mha_ci.jobs import refresh as refresh_kind
    from mha_ci.model.types import Job

    executor = StallOnceExecutor()
    job = Job(kind="refresh", arch="sm90", toolchain="triton-3.4")
    result = refresh_kind.run_job(job, JobContext(load_pipeline(repo), executor, scratch / "o"))
    assert result.verdict == "pass", result.message
    full, again = executor.asked
    assert len(full) > 100 and again == [full[0]]
    assert (scratch / "o" / "jobs" / job.id / "triton-3.4" / "remeasure-1" / "perf.json").is_file()
    branch = result.details["branch"]
    stored = json.loads(git(repo, "show", f"{branch}:perf_baselines/sm90/triton-3.4.json"))
    assert list(stored["selection"]["remeasured"]) == [full[0]]


def test_the_refresh_job_refuses_a_working_tree_that_is_not_head(repo, scratch):
    """The job stores its baseline as HEAD's, as `perf refresh` does: one rule (refresh.clean_tree),
    checked before anything is measured; an error verdict, exit 2."""
    from mha_ci.jobs.runner import run_job
    from mha_ci.model.types import Job, PlannedJob

    (repo / "src").mkdir(exist_ok=True)
    (repo / "src" / "new_kernel.py").write_text("# untracked\n")
    executor = StallOnceExecutor()
    job = Job(kind="refresh", arch="sm90", toolchain="triton-3.4")
    result = run_job(PlannedJob(job, "test"), JobContext(load_pipeline(repo), executor, scratch / "o"))
    assert result.verdict == "error" and result.exit_code == ExitCode.CONFIG_ERROR
    assert "differs from HEAD in 1 untracked file(s) (src/new_kernel.py)" in result.message
    assert executor.asked == [] and BRANCH_34 not in git(repo, "branch", "--list")
