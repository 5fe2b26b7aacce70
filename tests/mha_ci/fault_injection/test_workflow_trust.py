"""Probes of the exported workflows' trust model as a fork would try them: a CPU (device: none)
job steered onto a self-hosted runner is refused by the exporter, and GPU jobs of pull requests
run only from the default branch's workflow, on the head commit a maintainer approved."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mha_ci.cli import main as cli
from mha_ci.errors import ConfigError
from mha_ci.export import approved_gpu, github, matrix, steps
from mha_ci.model.loader import load_pipeline

REPO_ROOT = Path(__file__).resolve().parents[3]

HOSTED = "runner_labels: [ubuntu-latest]"
PLAN = {"jobs": [{"id": "correctness-interpreter-triton-3.4-1of2", "kind": "correctness",
                  "arch": "interpreter", "toolchain": "triton-3.4"}]}


def steer_cpu_runner(root, labels: str) -> None:
    archs = root / "pipelines" / "archs.yaml"
    assert HOSTED in archs.read_text()
    archs.write_text(archs.read_text().replace(HOSTED, f"runner_labels: {labels}"))


@pytest.mark.parametrize("labels", ["[self-hosted, linux, h100]", "[h100]", "[self-hosted]",
                                    "[ubuntu-latest, mi300x]", "[SELF-HOSTED, linux]"])
def test_matrix_refuses_a_device_none_job_off_github_hosted_runners(pipeline_root, labels):
    steer_cpu_runner(pipeline_root, labels)
    with pytest.raises(ConfigError, match="device: none.*GitHub-hosted"):
        matrix.matrices(load_pipeline(pipeline_root), PLAN)


def test_export_matrix_and_check_exit_2_on_a_self_hosted_cpu_runner(pipeline_root, tmp_path, capsys):
    assert cli(["--root", str(pipeline_root), "export", "github"]) == 0
    steer_cpu_runner(pipeline_root, "[self-hosted, linux, h100]")
    plan = tmp_path / "plan.json"
    plan.write_text('{"jobs": [{"id": "c", "kind": "correctness", "arch": "interpreter", "toolchain": "triton-3.4"}]}')
    assert cli(["--root", str(pipeline_root), "export", "matrix", "--plan", str(plan)]) == 2
    assert cli(["--root", str(pipeline_root), "export", "github", "--check"]) == 2
    assert cli(["--root", str(pipeline_root), "export", "github"]) == 2
    err = capsys.readouterr().err
    assert "archs.yaml" in err and "interpreter" in err and "self-hosted" in err


def test_other_github_hosted_images_are_accepted(pipeline_root):
    steer_cpu_runner(pipeline_root, "[ubuntu-24.04]")
    found = matrix.matrices(load_pipeline(pipeline_root), PLAN)
    assert found["cpu"]["include"][0]["runs_on"] == '["ubuntu-24.04"]'
    assert github.generate(load_pipeline(pipeline_root))


# -- the generated workflows -------------------------------------------------------------------

APPROVED_SHA = "${{ github.event.pull_request.head.sha }}"


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))    # YAML 1.1 reads the bare key `on` as true
    return data


@pytest.fixture(scope="module")
def flows() -> dict[str, dict]:
    """The committed workflows (tests/mha_ci/export/test_github.py: they are what pipelines/ gives)."""
    return {p.name: load(p) for p in sorted((REPO_ROOT / ".github/workflows").glob("*.yml"))}


def may_be_self_hosted(job: dict) -> bool:
    runs_on = job["runs-on"]
    gpu_matrix = "outputs.gpu)" in str(job.get("strategy", {}).get("matrix", ""))
    return (runs_on != steps.HOSTED_RUNNER and runs_on != "${{ fromJSON(matrix.runs_on) }}" or "container" in job
            or gpu_matrix)


def test_pull_request_code_never_has_a_self_hosted_job(flows):
    """pr.yml is the pull request's own file: nothing in it may target a GPU runner."""
    pr = flows["pr.yml"]
    assert set(pr["on"]) == {"pull_request"}
    for job_id, job in pr["jobs"].items():
        assert not may_be_self_hosted(job), job_id
        assert job["runs-on"] in (steps.HOSTED_RUNNER, "${{ fromJSON(matrix.runs_on) }}"), job_id
    assert pr["jobs"]["cpu"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.cpu) }}"


def test_self_hosted_jobs_run_only_from_default_branch_definitions(flows):
    for name, flow in flows.items():
        for job_id, job in flow["jobs"].items():
            if not may_be_self_hosted(job):
                continue
            assert "pull_request" not in flow["on"], f"{name} / {job_id}"
            if name == "pr-gpu.yml":
                assert set(flow["on"]) == {"pull_request_target"}
            else:          # push, schedule, dispatch: only the default branch's run gets a GPU
                assert steps.ON_DEFAULT_BRANCH in job["if"], f"{name} / {job_id}"


def test_approved_gpu_jobs_run_the_labelled_sha_read_only(flows):
    gpu_flow = flows["pr-gpu.yml"]
    plan, gpu = gpu_flow["jobs"]["plan"], gpu_flow["jobs"]["gpu"]
    label = approved_gpu.APPROVAL_LABEL
    assert plan["if"] == (f"github.event.action == 'labeled' && github.event.label.name == '{label}' "
                          "&& github.event.pull_request.draft == false")
    assert gpu["needs"] == "plan" and gpu["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.gpu) }}"
    # the approval is checked again on the GPU runner before anything is checked out: nothing runs
    # before it but the pull of the (default branch's) image it runs in
    names = [step["name"] for step in gpu["steps"]]
    check = gpu["steps"][names.index("Approval still holds for this commit")]
    checkouts = [i for i, step in enumerate(gpu["steps"]) if step.get("uses", "").startswith("actions/checkout@")]
    assert names[:2] == ["Pull the toolchain image", "Approval still holds for this commit"] and checkouts[0] == 2
    assert approved_gpu.APPROVAL_SCRIPT in check["run"] and check["env"]["APPROVED_SHA"] == APPROVED_SHA
    code = gpu["steps"][checkouts[0]]
    assert code["with"] == {"ref": APPROVED_SHA, "path": "code", "persist-credentials": False}
    # read-only token: nothing written, no secret; the token reaches the image pull and the approval
    # check, never the step that runs the pull request's code
    assert all(value == "read" for value in gpu["permissions"].values())
    assert "secrets." not in json.dumps(gpu)
    tokened = [step["name"] for step in gpu["steps"] if "github.token" in json.dumps(step)]
    assert tokened == ["Pull the toolchain image", "Approval still holds for this commit"]
    # the plan runs the default branch's mha-ci: the approved commit is only diffed
    plan_checkouts = [s for s in plan["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert plan_checkouts[0]["with"] == {"fetch-depth": 0, "persist-credentials": False}
    assert plan_checkouts[1]["with"]["ref"] == APPROVED_SHA and plan_checkouts[1]["with"]["path"] == "approved"
    assert all(s.get("run", "").count("approved") == 0 for s in plan["steps"] if s.get("name") in ("Plan", "Install mha-ci"))


def test_a_new_push_withdraws_the_approval(flows):
    gpu_flow = flows["pr-gpu.yml"]
    label = approved_gpu.APPROVAL_LABEL
    assert gpu_flow["on"] == {"pull_request_target": {"types": ["labeled", "unlabeled", "synchronize"]}}
    revoke = gpu_flow["jobs"]["revoke"]
    assert revoke["if"].startswith("github.event.action == 'synchronize' && ")
    assert "labels/$APPROVAL_LABEL" in revoke["steps"][0]["run"] and revoke["steps"][0]["env"]["APPROVAL_LABEL"] == label
    assert revoke["permissions"] == {"pull-requests": "write"} and "uses" not in json.dumps(revoke)
    # a push and the approval label share one group per pull request, so the push cancels the run
    group = gpu_flow["concurrency"]["group"]
    assert gpu_flow["concurrency"]["cancel-in-progress"] is True
    assert f"github.event.action == 'synchronize' || github.event.label.name == '{label}'" in group


def test_the_verdict_lands_on_the_approved_commit(flows):
    gate = flows["pr-gpu.yml"]["jobs"]["gate"]
    step = gate["steps"][-1]
    assert gate["if"] == "always() && needs.plan.result != 'skipped'"
    assert step["env"]["APPROVED_SHA"] == APPROVED_SHA and step["env"]["CONTEXT"] == approved_gpu.GPU_STATUS
    assert 'statuses/$APPROVED_SHA' in step["run"] and "python -m mha_ci.export.gate" in step["run"]
    assert gate["permissions"] == {"contents": "read", "statuses": "write"}


def test_no_checkout_persists_credentials_and_nightly_push_gets_the_token_itself(flows):
    for name, flow in flows.items():
        for job_id, job in flow["jobs"].items():
            for step in job["steps"]:
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False, f"{name} / {job_id}"
    refresh = flows["nightly.yml"]["jobs"]["refresh-sm90"]
    push = next(s for s in refresh["steps"] if "git " in s.get("run", "") and " push " in s["run"])
    assert '-c "credential.helper=!gh auth git-credential" push' in push["run"]
    assert push["env"]["GH_TOKEN"] == "${{ github.token }}"


# -- no runtime token near the pull request's code ---------------------------------------------
# Every JavaScript action (upload-artifact, checkout, ...) gets ACTIONS_RUNTIME_TOKEN, which also
# writes the cache; a pull_request_target run's cache scope is the default branch's, which main.yml
# and pr.yml restore. In a `container:` job those actions run in the container the pull request's
# code ran in, which holds their code (the runner's _actions folder is mounted writable) and
# whatever process that code left behind. So the pull request's code runs only inside the
# `docker run` of one step, and every action runs on the host, after that container is gone.

GPU_JOBS = [("pr-gpu.yml", "gpu"), ("main.yml", "gpu")]


def gpu_steps(flows, name: str) -> dict[str, dict]:
    return {step["name"]: step for step in flows[name]["jobs"]["gpu"]["steps"]}


@pytest.mark.parametrize("name, job_id", GPU_JOBS)
def test_no_action_shares_a_container_with_the_code_under_test(flows, name, job_id):
    job = flows[name]["jobs"][job_id]
    assert "container" not in job and "services" not in job
    names = [step["name"] for step in job["steps"]]
    run, stop = names.index("Run"), names.index("Stop the run's container")
    assert run < stop < names.index("Results for the gate") < names.index("Upload results")
    # actions after the run only once its container is removed, whatever the run's outcome
    assert job["steps"][stop]["if"] == "always()" and "docker rm --force" in job["steps"][stop]["run"]
    for index, step in enumerate(job["steps"]):
        if "uses" in step and index > run:
            assert index > stop, f"{name}: {step['name']} runs beside the run's container"
    # the container starts from the image alone: no tokens, no runner folders, nothing of the host's
    script = job["steps"][run]["run"]
    assert 'docker run --rm --name "$container"' in script
    for forbidden in ("--privileged", "--pid", "docker.sock", "RUNNER_TEMP", "_actions", "--env-file",
                      "GITHUB_WORKSPACE", "--network host", "TOKEN"):
        assert forbidden not in script, f"{name}: {forbidden} in the run step"
    assert "github.token" not in json.dumps(job["steps"][run])
    mounts = re.findall(r'--volume "([^"]+)"', script)
    expected = ['$PWD/code:/checkout:ro', '$PWD/out:/out']
    if name == "pr-gpu.yml":
        expected.append('$PWD/base:/base:ro')
    assert sorted(mounts) == sorted(expected)
    assert re.findall(r"--env (\w+)", script) == ["JOB_ID"]


@pytest.mark.parametrize("name, job_id", GPU_JOBS)
def test_the_upload_holds_regular_files_of_the_run_only(flows, name, job_id):
    steps_ = gpu_steps(flows, name)
    assert steps_["Upload results"]["with"]["path"] == "results/"
    assert steps_["Summary"]["run"].count("results/summary.md") == 2 and "out/" not in steps_["Summary"]["run"]


def run_step(flows, name: str, step: str, cwd: Path, env: dict, path_dir: Path | None = None):
    script = gpu_steps(flows, name)[step]["run"]
    full = {**os.environ, **env, **({"PATH": f"{path_dir}:{os.environ['PATH']}"} if path_dir else {})}
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=30)


def test_results_for_the_gate_keep_regular_files_and_the_hosts_exit_code(flows, tmp_path):
    """What the run's container left in out/ could point anywhere on the host: links, FIFOs and an
    exit-code of its own are not uploaded; the exit code is the one `docker run` returned."""
    secret = tmp_path / "runner-credentials"
    secret.write_text("do not upload")
    out = tmp_path / "out"
    (out / "jobs").mkdir(parents=True)
    (out / "results.json").write_text("{}")
    (out / "jobs" / "perf.json").write_text("{}")
    (out / "exit-code").write_text("0\n")
    (out / "jobs" / "link.json").symlink_to(secret)
    (out / "linked-folder").symlink_to(tmp_path)
    os.mkfifo(out / "jobs" / "pipe")
    (tmp_path / "exit-code").write_text("1\n")
    done = run_step(flows, "pr-gpu.yml", "Results for the gate", tmp_path, {})
    assert done.returncode == 0, done.stderr
    kept = sorted(str(p.relative_to(tmp_path / "results")) for p in (tmp_path / "results").rglob("*"))
    assert kept == ["exit-code", "jobs", "jobs/perf.json", "results.json"]
    assert (tmp_path / "results" / "exit-code").read_text() == "1\n"
    assert not any(p.is_symlink() for p in (tmp_path / "results").rglob("*"))


def test_the_run_records_docker_runs_exit_code_outside_the_containers_reach(flows, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$DOCKER_ARGS"\nexit 7\n')
    (bin_dir / "docker").chmod(0o755)
    env = {"DOCKER_ARGS": str(tmp_path / "args"), "JOB_ID": "perf-sm90-triton-3.4", "IMAGE": "ghcr.io/o/r/i:t",
           "CONTAINER_OPTIONS": "--gpus all", "GITHUB_RUN_ID": "5", "GITHUB_RUN_ATTEMPT": "1"}
    done = run_step(flows, "pr-gpu.yml", "Run", tmp_path, env, bin_dir)
    assert done.returncode == 7
    assert (tmp_path / "exit-code").read_text() == "7\n" and not (tmp_path / "out" / "exit-code").exists()
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:4] == ["run", "--rm", "--name", "mha-ci-5-1-perf-sm90-triton-3.4"]
    assert ["--gpus", "all"] == args[4:6] and "ghcr.io/o/r/i:t" in args
    assert args[-2:] == ["--gate-from", "/base"]
    # a runner that kept the last job's out/ (not ephemeral) would upload it as this job's
    (tmp_path / "args").unlink()
    done = run_step(flows, "pr-gpu.yml", "Run", tmp_path, env, bin_dir)
    assert done.returncode == 3 and "exists before the run" in done.stderr
    assert not (tmp_path / "args").exists() and not (tmp_path / "exit-code").exists()


def test_the_approved_run_is_judged_by_the_base_branchs_gate(flows):
    """pr-gpu.yml checks out the base branch (the commit the run's plan came from) beside the
    approved commit and passes it read-only as --gate-from; main.yml judges main by itself."""
    gpu = gpu_steps(flows, "pr-gpu.yml")
    assert gpu["Check out the base branch (gate settings and baselines)"]["with"] == {
        "path": "base", "persist-credentials": False}
    assert "--volume \"$PWD/base:/base:ro\"" in gpu["Run"]["run"] and " --gate-from /base\n" in gpu["Run"]["run"]
    main_run = gpu_steps(flows, "main.yml")["Run"]["run"]
    assert "--gate-from" not in main_run and "/base" not in main_run


def fake_api(tmp_path: Path, head: str, labels: list[str]) -> str:
    pulls = tmp_path / "repos" / "owner" / "repo" / "pulls"
    pulls.mkdir(parents=True)
    (pulls / "7").write_text(json.dumps({"head": {"sha": head}, "labels": [{"name": n} for n in labels]}))
    return tmp_path.as_uri()


@pytest.mark.parametrize("in_image", [False, True], ids=["hosted", "in-image"])
@pytest.mark.parametrize("head, labels, ok", [
    ("a" * 40, ["gpu-approved", "ci:sm90"], True),
    ("b" * 40, ["gpu-approved"], False),            # pushed after the label
    ("a" * 40, ["ci:sm90"], False),                  # label taken away
])
def test_approval_check_refuses_a_moved_head_or_a_removed_label(tmp_path, head, labels, ok, in_image):
    # In the GPU job the check runs in the image: this `docker` runs the command after the image.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/sh\nwhile [ "$1" != "$IMAGE" ]; do shift; done\nshift\nexec "$@"\n')
    (bin_dir / "docker").chmod(0o755)
    env = {**os.environ, "GITHUB_API_URL": fake_api(tmp_path, head, labels), "GITHUB_REPOSITORY": "owner/repo",
           "PR_NUMBER": "7", "GH_TOKEN": "t", "APPROVED_SHA": "a" * 40, "APPROVAL_LABEL": "gpu-approved",
           "IMAGE": "ghcr.io/o/r/i:t", "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
    step = approved_gpu.approval_check_step(in_image=in_image)
    assert set(step["env"]) | {"GITHUB_API_URL", "GITHUB_REPOSITORY"} >= set(approved_gpu.APPROVAL_ENV)
    done = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=30)
    assert (done.returncode == 0) is ok, done.stderr
    if not ok:
        assert "approval withdrawn" in done.stderr


def zizmor() -> str:
    beside = Path(sys.executable).parent / "zizmor"
    found = str(beside) if beside.is_file() else shutil.which("zizmor")
    if not found:
        pytest.fail("zizmor not installed: it is pinned in requirements-dev.lock")
    return found


def test_zizmor_finds_nothing_unjustified_and_would_find_the_unjustified(tmp_path):
    workflows = tmp_path / ".github" / "workflows"
    shutil.copytree(REPO_ROOT / ".github/workflows", workflows)
    args = [zizmor(), "--offline", "--persona", "auditor", str(tmp_path)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    gpu_flow = workflows / "pr-gpu.yml"
    gpu_flow.write_text(re.sub(r"  # zizmor: ignore\[[a-z-]+\].*", "", gpu_flow.read_text()))
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "dangerous-triggers" in done.stdout + done.stderr


def test_the_gates_word_on_a_forks_missing_gpu_result_matches_pr_gpu(flows):
    """A fork's GPU jobs are not barred from the runners: they wait for the approval label."""
    from mha_ci.export import gate

    why = gate.WITHHELD_FROM_FORKS
    assert "withheld" in why and "fork" in why
    assert "pr-gpu.yml" in why and approved_gpu.APPROVAL_LABEL in why
    assert "only branches of this repository" not in why
