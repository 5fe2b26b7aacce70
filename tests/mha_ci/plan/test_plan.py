"""`mha-ci plan` on the checked-in pipelines/ for the GitHub events in tests/fixtures/events/.

Runs the real command line and reads its JSON, so what is tested is what CI consumes.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mha_ci.cli import main
from mha_ci.model.loader import load_pipeline
from mha_ci.plan.matrix import full_matrix

EVENTS = Path(__file__).resolve().parents[2] / "fixtures" / "events"
GPU_ARCHS = ("gfx942", "gfx950", "sm90")
TOOLCHAINS = ("triton-3.4", "triton-3.8")


def _plan(repo_root: Path, capsys, *args: str) -> dict:
    code = main(["--root", str(repo_root), "plan", "--format", "json", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def _changed(tmp_path: Path, *paths: str) -> str:
    path = tmp_path / "changed.txt"
    path.write_text("".join(p + "\n" for p in paths))
    return str(path)


def _planned(result: dict) -> dict[str, str]:
    return {job["id"]: job["reason"] for job in result["jobs"]}


def _skipped(result: dict) -> dict[str, str]:
    return {job["id"]: job["reason"] for job in result["skipped"]}


def _pairs(result: dict) -> set[tuple[str, str]]:
    return {(job["kind"], job["arch"]) for job in result["jobs"]}


def _correctness_ids(arch: str, shards: int) -> set[str]:
    return {f"correctness-{arch}-{tc}-{i}of{shards}" for tc in TOOLCHAINS for i in range(1, shards + 1)}


DEFAULT_PR = {("docs", "interpreter"), ("correctness", "gfx950"), ("correctness", "interpreter")}


def test_pull_request_labeled_sm90(repo_root, capsys, tmp_path):
    result = _plan(repo_root, capsys, "--github-event", str(EVENTS / "pull_request_labeled_sm90.json"),
                   "--changed-files", _changed(tmp_path, "tests/mha/test_forward.py"))
    assert _pairs(result) == DEFAULT_PR | {("correctness", "sm90"), ("perf", "sm90")}
    planned = _planned(result)
    assert _correctness_ids("sm90", 4) <= set(planned)
    assert planned["correctness-sm90-triton-3.4-2of4"] == "label ci:sm90"
    assert planned["perf-sm90-triton-3.8"] == "label ci:sm90"
    assert planned["correctness-gfx950-triton-3.4-1of4"] == "pull_request default arch gfx950"
    assert planned["correctness-interpreter-triton-3.8-2of2"] == "pull_request default arch interpreter"
    skipped = _skipped(result)
    assert skipped["correctness-gfx942-triton-3.4-1of4"] == \
        "no label ci:gfx942 or ci:all and no change to src/mha/configs/gfx942-*"
    assert skipped["perf-gfx950-triton-3.4"].startswith("no label ci:gfx950 or ci:all")
    assert "ci:perf" in skipped["perf-gfx950-triton-3.4"]
    assert "no change to src/mha/**" in skipped["checksums-interpreter-triton-3.4-1of4"]


def test_pull_request_config_change_adds_that_arch(repo_root, capsys):
    result = _plan(repo_root, capsys, "--github-event", str(EVENTS / "pull_request_synchronize.json"),
                   "--changed-files", str(EVENTS / "changed_config_gfx942.txt"))
    # a config is under src/mha/: the sanitizer checks every sm90 variant (memcheck)
    assert _pairs(result) == DEFAULT_PR | {("correctness", "gfx942"), ("perf", "gfx942"),
                                           ("checksums", "interpreter"), ("memcheck", "sm90")}
    planned = _planned(result)
    assert planned["correctness-gfx942-triton-3.8-4of4"] == "path src/mha/configs/gfx942-MHA-DEFAULT.json"
    assert planned["perf-gfx942-triton-3.4"] == "path src/mha/configs/gfx942-MHA-DEFAULT.json"
    # checksums: four shards per toolchain, on the CPU runner (arch `interpreter`)
    assert planned["checksums-interpreter-triton-3.4-2of4"] == "path src/mha/configs/gfx942-MHA-DEFAULT.json"
    assert {f"checksums-interpreter-{tc}-{i}of4" for tc in TOOLCHAINS for i in range(1, 5)} <= set(planned)
    assert not any(job_id.startswith(("correctness-sm90", "perf-sm90")) for job_id in planned)


def test_config_of_another_arch_does_not_leak(repo_root, capsys, tmp_path):
    result = _plan(repo_root, capsys, "--changed-files",
                   _changed(tmp_path, "src/mha/configs/sm90-MHA-DEFAULT.json"))
    assert _pairs(result) == DEFAULT_PR | {("correctness", "sm90"), ("perf", "sm90"), ("checksums", "interpreter"),
                                           ("memcheck", "sm90")}
    assert _planned(result)["perf-sm90-triton-3.4"] == "path src/mha/configs/sm90-MHA-DEFAULT.json"


def test_documentation_only_runs_no_gpu_and_no_perf_job(repo_root, capsys):
    result = _plan(repo_root, capsys, "--github-event", str(EVENTS / "pull_request_reopened_docs.json"),
                   "--changed-files", str(EVENTS / "changed_docs_only.txt"))
    # Only the docs check: documentation is read by no test; src/mha/README.md is documentation,
    # so no checksums either. The plan is not empty: the gate judges the docs check.
    assert _pairs(result) == {("docs", "interpreter")}
    assert [job["id"] for job in result["jobs"]] == ["docs-interpreter"]
    skipped = _skipped(result)
    assert skipped["correctness-gfx950-triton-3.4-1of4"].startswith("only documentation changed: only docs jobs run")
    assert skipped["correctness-interpreter-triton-3.4-1of2"].startswith("only documentation changed")
    assert "checksums-interpreter-triton-3.4-1of4" in skipped


def test_documentation_plus_code_is_not_documentation_only(repo_root, capsys, tmp_path):
    result = _plan(repo_root, capsys, "--changed-files", _changed(tmp_path, "README.md", "src/mha_ci/cli.py"))
    assert _pairs(result) == DEFAULT_PR


def test_no_changed_paths_runs_like_documentation_only(repo_root, capsys, tmp_path):
    result = _plan(repo_root, capsys, "--changed-files", _changed(tmp_path))
    assert _pairs(result) == {("docs", "interpreter")}
    assert _skipped(result)["correctness-gfx950-triton-3.4-1of4"].startswith("no paths changed")


def test_label_beats_documentation_only(repo_root, capsys):
    result = _plan(repo_root, capsys, "--changed-files", str(EVENTS / "changed_docs_only.txt"),
                   "--labels", "ci:sm90")
    assert _pairs(result) == {("docs", "interpreter"), ("correctness", "sm90"), ("perf", "sm90")}


def test_draft_plans_nothing(repo_root, capsys):
    result = _plan(repo_root, capsys, "--github-event", str(EVENTS / "pull_request_opened_draft.json"))
    assert result["jobs"] == []
    skipped = _skipped(result)
    assert skipped["correctness-gfx950-triton-3.4-1of4"] == "draft pull request"
    assert skipped["correctness-sm90-triton-3.4-1of4"] == "draft pull request"     # despite ci:sm90
    assert "no GPU timings" in skipped["perf-interpreter-triton-3.4"]


def _everything_but_refresh() -> set[tuple[str, str]]:
    return ({("correctness", a) for a in (*GPU_ARCHS, "interpreter")} | {("perf", a) for a in GPU_ARCHS}
            | {("checksums", "interpreter"), ("docs", "interpreter")})


def test_push_to_main_runs_everything_but_refresh(repo_root, capsys):
    result = _plan(repo_root, capsys, "--github-event", str(EVENTS / "push_main.json"))
    assert _pairs(result) == _everything_but_refresh()
    # correctness shards, perf, checksums shards, the docs check (no toolchain: once)
    assert len(result["jobs"]) == 3 * 4 * 2 + 2 * 2 + 3 * 2 + 4 * 2 + 1
    assert set(_planned(result).values()) == {"push to main: every arch"}
    assert _skipped(result)["refresh-sm90-triton-3.4"].startswith("refresh on sm90 is not part of the push pipeline")


def test_push_to_another_branch_plans_nothing(repo_root, capsys):
    result = _plan(repo_root, capsys, "--github-event", str(EVENTS / "push_feature_branch.json"))
    assert result["jobs"] == []
    assert _skipped(result)["perf-sm90-triton-3.4"] == \
        "push to 'experiment': the push pipeline runs only for main"


def test_schedule_refreshes_every_gpu_arch(repo_root, capsys):
    result = _plan(repo_root, capsys, "--github-event", str(EVENTS / "schedule.json"))
    memcheck = [f"memcheck-sm90-{tc}-{i}of2" for tc in TOOLCHAINS for i in (1, 2)]
    assert sorted(_planned(result)) == sorted([f"refresh-{a}-{tc}" for a in GPU_ARCHS for tc in TOOLCHAINS] + memcheck)
    assert set(_planned(result).values()) == {"schedule: every arch"}
    assert "interpreter has none to refresh" in _skipped(result)["refresh-interpreter-triton-3.8"]


def test_workflow_dispatch_without_labels_is_like_push(repo_root, capsys):
    result = _plan(repo_root, capsys, "--github-event", str(EVENTS / "workflow_dispatch.json"))
    assert _pairs(result) == _everything_but_refresh()
    assert set(_planned(result).values()) == {"manual run without labels: every arch"}


def test_workflow_dispatch_with_labels_runs_what_they_select(repo_root, capsys):
    result = _plan(repo_root, capsys, "--github-event", str(EVENTS / "workflow_dispatch_labels.json"))
    assert _pairs(result) == {("correctness", "gfx942"), ("perf", "gfx942")}
    assert _planned(result)["perf-gfx942-triton-3.4"] == "label ci:gfx942; label ci:perf"
    assert "manual with labels runs only what the labels select" in \
        _skipped(result)["correctness-gfx950-triton-3.4-1of4"]


def test_event_flag_overrides_and_accepts_github_names(repo_root, capsys):
    as_manual = _plan(repo_root, capsys, "--event", "workflow_dispatch")
    assert _pairs(as_manual) == _everything_but_refresh()
    # A push payload planned as a schedule: --event decides the kind.
    as_schedule = _plan(repo_root, capsys, "--github-event", str(EVENTS / "push_main.json"), "--event", "schedule")
    assert {kind for kind, _ in _pairs(as_schedule)} == {"refresh", "memcheck"}


def test_ci_perf_adds_perf_on_the_selected_archs(repo_root, capsys, tmp_path):
    changed = _changed(tmp_path, "src/mha_ci/cli.py")     # no path rule: the default arch only
    result = _plan(repo_root, capsys, "--changed-files", changed, "--labels", "ci:perf")
    assert {a for k, a in _pairs(result) if k == "perf"} == {"gfx950"}
    result = _plan(repo_root, capsys, "--changed-files", changed, "--labels", "ci:perf,ci:sm90")
    assert {a for k, a in _pairs(result) if k == "perf"} == {"gfx950", "sm90"}
    assert _planned(result)["perf-gfx950-triton-3.4"] == "label ci:perf"
    assert "ci:perf covers only the archs already chosen (gfx950, sm90)" in _skipped(result)["perf-gfx942-triton-3.4"]


def test_ci_all_adds_everything(repo_root, capsys, tmp_path):
    result = _plan(repo_root, capsys, "--changed-files", _changed(tmp_path, "README.md"), "--labels", "ci:all")
    assert _pairs(result) == _everything_but_refresh()


def test_all_counts_every_path_as_changed(repo_root, capsys):
    result = _plan(repo_root, capsys, "--all")
    assert _pairs(result) == _everything_but_refresh() | {("memcheck", "sm90")}
    assert "changed files unknown" in _planned(result)["perf-sm90-triton-3.4"]


def test_unknown_ci_label_is_a_usage_error(repo_root, capsys):
    assert main(["--root", str(repo_root), "plan", "--labels", "ci:sm91"]) == 2
    err = capsys.readouterr().err
    assert "unknown label 'ci:sm91'" in err and "did you mean 'ci:sm90'" in err


def test_other_labels_are_not_ours(repo_root, capsys, tmp_path):
    result = _plan(repo_root, capsys, "--changed-files", _changed(tmp_path, "src/mha_ci/cli.py"),
                   "--labels", "bug,enhancement")
    assert _pairs(result) == DEFAULT_PR


def test_unknown_event_kind_is_a_usage_error(repo_root, capsys):
    assert main(["--root", str(repo_root), "plan", "--event", "pull-request"]) == 2
    assert "did you mean 'pull_request'" in capsys.readouterr().err


def test_bad_event_payload_is_a_usage_error(repo_root, capsys, tmp_path):
    bad = tmp_path / "event.json"
    bad.write_text('{"pull_request": {"draft": false,}}\n')
    assert main(["--root", str(repo_root), "plan", "--github-event", str(bad)]) == 2
    assert f"{bad}:1: invalid JSON" in capsys.readouterr().err
    assert main(["--root", str(repo_root), "plan", "--changed-files", str(tmp_path / "missing.txt")]) == 2


@pytest.mark.parametrize("args", [
    (),
    ("--github-event", str(EVENTS / "pull_request_labeled_sm90.json")),
    ("--github-event", str(EVENTS / "push_main.json")),
    ("--github-event", str(EVENTS / "schedule.json")),
    ("--github-event", str(EVENTS / "pull_request_opened_draft.json")),
])
def test_every_matrix_job_is_planned_or_skipped_once(repo_root, capsys, args):
    result = _plan(repo_root, capsys, *args)
    ids = [j["id"] for j in result["jobs"]] + [s["id"] for s in result["skipped"]]
    assert len(ids) == len(set(ids))
    matrix = [entry.job.id for entry in full_matrix(load_pipeline(repo_root))]
    assert sorted(ids) == sorted(matrix)
    for part in ("jobs", "skipped"):                         # each in the matrix's one stable order
        listed = [j["id"] for j in result[part]]
        assert listed == [job_id for job_id in matrix if job_id in set(listed)]
    assert all(j["reason"] for j in result["jobs"]) and all(s["reason"] for s in result["skipped"])


def test_json_shape_and_job_ids(repo_root, capsys):
    result = _plan(repo_root, capsys, "--github-event", str(EVENTS / "push_main.json"))
    assert set(result) == {"jobs", "skipped"}
    by_id = {job["id"]: job for job in result["jobs"]}
    assert by_id["correctness-gfx950-triton-3.4-2of4"] == {
        "id": "correctness-gfx950-triton-3.4-2of4", "kind": "correctness", "arch": "gfx950",
        "toolchain": "triton-3.4", "shard": 2, "shards": 4, "reason": "push to main: every arch"}
    assert by_id["perf-sm90-triton-3.8"]["shard"] is None and by_id["perf-sm90-triton-3.8"]["shards"] is None
    assert all(set(s) == {"id", "reason"} for s in result["skipped"])


def test_plan_is_deterministic(repo_root, capsys, tmp_path):
    forward = _changed(tmp_path, "src/mha/configs/sm90-MHA-DEFAULT.json", "README.md", "src/mha/configs/gfx942-x.json")
    backward = tmp_path / "backward.txt"
    backward.write_text("\n".join(reversed(Path(forward).read_text().splitlines())) + "\n")
    outputs = []
    for labels, changed in (("ci:perf,ci:gfx950", forward), ("ci:gfx950,ci:perf", forward),
                            ("ci:gfx950,ci:perf", str(backward))):
        for fmt in ("json", "text"):
            main(["--root", str(repo_root), "plan", "--format", fmt, "--labels", labels, "--changed-files", changed])
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    # Reversing the changed files may only change which file a reason names first.
    strip = lambda text: [line for line in text.splitlines() if "path src/mha/configs" not in line]
    assert strip(outputs[0]) == strip(outputs[2])


def test_text_format_is_a_table(repo_root, capsys):
    assert main(["--root", str(repo_root), "plan", "--github-event", str(EVENTS / "schedule.json")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "10 jobs planned, 53 skipped"
    assert lines[2].split() == ["JOB", "KIND", "ARCH", "TOOLCHAIN", "SHARD", "WHY"]
    assert lines[3].split()[:5] == ["refresh-gfx942-triton-3.4", "refresh", "gfx942", "triton-3.4", "-"]
    assert "skipped:" in lines


def test_ci_memcheck_runs_the_sanitizer_shards_on_sm90(repo_root, capsys, tmp_path):
    result = _plan(repo_root, capsys, "--changed-files", _changed(tmp_path, "README.md"), "--labels", "ci:memcheck")
    planned = _planned(result)
    assert sorted(j for j in planned if j.startswith("memcheck")) == \
        [f"memcheck-sm90-{tc}-{i}of2" for tc in TOOLCHAINS for i in (1, 2)]
    assert "compute-sanitizer is NVIDIA-only" in _skipped(result)["memcheck-gfx950-triton-3.4"]
