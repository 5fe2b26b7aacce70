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
    return runs_on != steps.HOSTED_RUNNER and runs_on != "${{ fromJSON(matrix.runs_on) }}" or "container" in job


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
    # the approval is checked again on the GPU runner before anything is checked out
    first, checkout = gpu["steps"][0], gpu["steps"][1]
    assert first["run"] == approved_gpu.APPROVAL_CHECK and first["env"]["APPROVED_SHA"] == APPROVED_SHA
    assert checkout["uses"].startswith("actions/checkout@")
    assert checkout["with"] == {"ref": APPROVED_SHA, "persist-credentials": False}
    # read-only token: nothing written, no secret but the token that pulls the image
    assert all(value == "read" for value in gpu["permissions"].values())
    text = json.dumps(gpu)
    assert text.count("secrets.") == 1 and gpu["container"]["credentials"]["password"] == "${{ secrets.GITHUB_TOKEN }}"
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


def fake_api(tmp_path: Path, head: str, labels: list[str]) -> str:
    pulls = tmp_path / "repos" / "owner" / "repo" / "pulls"
    pulls.mkdir(parents=True)
    (pulls / "7").write_text(json.dumps({"head": {"sha": head}, "labels": [{"name": n} for n in labels]}))
    return tmp_path.as_uri()


@pytest.mark.parametrize("head, labels, ok", [
    ("a" * 40, ["gpu-approved", "ci:sm90"], True),
    ("b" * 40, ["gpu-approved"], False),            # pushed after the label
    ("a" * 40, ["ci:sm90"], False),                  # label taken away
])
def test_approval_check_refuses_a_moved_head_or_a_removed_label(tmp_path, head, labels, ok):
    env = {**os.environ, "GITHUB_API_URL": fake_api(tmp_path, head, labels), "GITHUB_REPOSITORY": "owner/repo",
           "PR_NUMBER": "7", "GH_TOKEN": "t", "APPROVED_SHA": "a" * 40, "APPROVAL_LABEL": "gpu-approved",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-e", "-c", approved_gpu.APPROVAL_CHECK], env=env, capture_output=True,
                          text=True, timeout=30)
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
