"""Probes of the exported workflows' trust model as a fork would try them: a CPU (device: none)
job steered onto a self-hosted runner is refused by the exporter, and GPU jobs of pull requests
run only from the default branch's workflow, on the head commit a maintainer approved by its SHA."""
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
from mha_ci.export import approval, approved_gpu, github, matrix, steps
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


@pytest.mark.parametrize("label", ["${{ github.event.pull_request.title }}", "gpu-${{ github.head_ref }}",
                                   "h100}}"])
def test_a_runner_label_holding_an_expression_is_refused_by_validation(pipeline_root, label):
    """runs-on is evaluated with the event's context: an expression there would let a title or a
    branch name pick the runner."""
    archs = pipeline_root / "pipelines" / "archs.yaml"
    text = archs.read_text()
    assert "mi300x" in text
    archs.write_text(text.replace("mi300x", repr(label), 1))
    with pytest.raises(ConfigError, match="expression: labels are plain names"):
        load_pipeline(pipeline_root)


def test_other_github_hosted_images_are_accepted(pipeline_root):
    steer_cpu_runner(pipeline_root, "[ubuntu-24.04]")
    found = matrix.matrices(load_pipeline(pipeline_root), PLAN)
    assert found["cpu"]["include"][0]["runs_on"] == '["ubuntu-24.04"]'
    assert github.generate(load_pipeline(pipeline_root))


# -- the generated workflows -------------------------------------------------------------------

APPROVED_SHA = "${{ needs.plan.outputs.sha }}"


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
                assert set(flow["on"]) == {"issue_comment", "pull_request_target"}
            else:          # push, schedule, dispatch: only the default branch's run gets a GPU
                assert steps.ON_DEFAULT_BRANCH in job["if"], f"{name} / {job_id}"


def test_approved_gpu_jobs_run_the_named_sha_read_only(flows):
    gpu_flow = flows["pr-gpu.yml"]
    plan, gpu = gpu_flow["jobs"]["plan"], gpu_flow["jobs"]["gpu"]
    assert plan["if"] == ("github.event_name == 'issue_comment' && github.event.issue.pull_request "
                          "&& startsWith(github.event.comment.body, '/gpu-approve ')")
    assert gpu["needs"] == "plan" and gpu["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.gpu) }}"
    # the SHA the GPU jobs check out is the one export/approval.py checked, never the event's
    assert plan["outputs"]["sha"] == "${{ steps.approval.outputs.sha }}"
    approve = next(s for s in plan["steps"] if s.get("id") == "approval")
    assert approve["run"] == "python -m mha_ci.export.approval --event-out approved-event.json\n"
    assert approve["env"]["COMMENTER"] == "${{ github.event.comment.user.login }}"
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
    # the plan runs the default branch's mha-ci over the approved pull request: the commit is only diffed
    plan_checkouts = [s for s in plan["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert plan_checkouts[0]["with"] == {"fetch-depth": 0, "persist-credentials": False}
    assert plan_checkouts[1]["with"]["ref"] == "${{ steps.approval.outputs.sha }}"
    assert plan_checkouts[1]["with"]["path"] == "approved"
    assert all(s.get("run", "").count("approved ") == 0 for s in plan["steps"] if s.get("name") in ("Plan", "Install mha-ci"))
    assert "--github-event approved-event.json" in next(s for s in plan["steps"] if s["name"] == "Plan")["run"]


def test_a_new_push_or_approval_cancels_the_approved_run_and_other_comments_do_not(flows):
    gpu_flow = flows["pr-gpu.yml"]
    assert gpu_flow["on"] == {"issue_comment": {"types": ["created"]}, "pull_request_target": {"types": ["synchronize"]}}
    assert set(gpu_flow["jobs"]) == {"plan", "gpu", "gate"}      # nothing runs on a push
    group = gpu_flow["concurrency"]["group"]
    assert gpu_flow["concurrency"]["cancel-in-progress"] is True
    assert group.startswith("pr-gpu-${{ github.event.issue.number || github.event.pull_request.number }}-")
    assert "github.event_name == 'pull_request_target' || (startsWith(github.event.comment.body, '/gpu-approve ')" in group
    assert "github.event.comment.author_association" in group and "|| github.run_id }}" in group


def test_the_verdict_is_a_check_run_on_the_approved_commit(flows):
    gate = flows["pr-gpu.yml"]["jobs"]["gate"]
    step = gate["steps"][-1]
    # a refused approval names no SHA: there is nothing to put a verdict on
    assert gate["if"] == "always() && needs.plan.outputs.sha != ''"
    assert step["env"]["APPROVED_SHA"] == APPROVED_SHA and step["env"]["CHECK_NAME"] == approved_gpu.GPU_CHECK
    assert '"repos/$GITHUB_REPOSITORY/check-runs"' in step["run"] and '-f head_sha="$APPROVED_SHA"' in step["run"]
    assert "statuses" not in step["run"] and "python -m mha_ci.export.gate" in step["run"]
    assert gate["permissions"] == {"contents": "read", "checks": "write"}
    assert all("statuses" not in job.get("permissions", {}) for flow in flows.values() for job in flow["jobs"].values())


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
    assert args[-4:] == ["--gate-from", "/base", "--perf-against", "/base"]
    # a runner that kept the last job's out/ (not ephemeral) would upload it as this job's
    (tmp_path / "args").unlink()
    done = run_step(flows, "pr-gpu.yml", "Run", tmp_path, env, bin_dir)
    assert done.returncode == 3 and "exists before the run" in done.stderr
    assert not (tmp_path / "args").exists() and not (tmp_path / "exit-code").exists()


def test_the_approved_run_is_judged_by_the_base_branchs_gate(flows):
    """pr-gpu.yml checks out the merge base (the plan job computes it from the approved commit's
    history) beside the approved commit and passes it read-only as --gate-from and as the kernel
    measured beside on the same GPU (--perf-against); main.yml judges main by itself."""
    gpu = gpu_steps(flows, "pr-gpu.yml")
    assert gpu["Check out the merge base (gate settings, baselines, the kernel measured beside)"]["with"] == {
        "ref": "${{ needs.plan.outputs.merge_base }}", "path": "base", "persist-credentials": False}
    assert "--volume \"$PWD/base:/base:ro\"" in gpu["Run"]["run"]
    assert " --gate-from /base --perf-against /base\n" in gpu["Run"]["run"]
    plan = {s.get("id"): s for s in flows["pr-gpu.yml"]["jobs"]["plan"]["steps"] if s.get("id")}
    assert 'git -C approved merge-base "$BASE_SHA" HEAD' in plan["merge_base"]["run"]
    assert flows["pr-gpu.yml"]["jobs"]["plan"]["outputs"]["merge_base"] == "${{ steps.merge_base.outputs.sha }}"
    main_run = gpu_steps(flows, "main.yml")["Run"]["run"]
    assert "--gate-from" not in main_run and "/base" not in main_run


def fake_api(tmp_path: Path, head: str, state: str = "open", draft: bool = False, permission: str = "write",
             labels: tuple[str, ...] = ("ci:sm90",)) -> str:
    """GitHub's API as files: urllib reads a file:// URL like the https one."""
    repo = tmp_path / "api" / "repos" / "owner" / "repo"
    (repo / "pulls").mkdir(parents=True)
    (repo / "pulls" / "7").write_text(json.dumps({"head": {"sha": head}, "base": {"sha": "c" * 40, "ref": "main"},
                                                  "state": state, "draft": draft,
                                                  "labels": [{"name": n} for n in labels]}))
    (repo / "collaborators" / "alice").mkdir(parents=True)
    (repo / "collaborators" / "alice" / "permission").write_text(json.dumps({"permission": permission}))
    return (tmp_path / "api").as_uri()


@pytest.mark.parametrize("head, state, ok", [
    ("a" * 40, "open", True),
    ("b" * 40, "open", False),            # pushed after the approval
    ("a" * 40, "closed", False),
])
def test_approval_check_on_the_gpu_runner_refuses_a_moved_head(tmp_path, head, state, ok):
    # The check runs in the image: this `docker` runs the command after the image.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/sh\nwhile [ "$1" != "$IMAGE" ]; do shift; done\nshift\nexec "$@"\n')
    (bin_dir / "docker").chmod(0o755)
    env = {**os.environ, "GITHUB_API_URL": fake_api(tmp_path, head, state), "GITHUB_REPOSITORY": "owner/repo",
           "PR_NUMBER": "7", "GH_TOKEN": "t", "APPROVED_SHA": "a" * 40,
           "IMAGE": "ghcr.io/o/r/i:t", "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
    step = approved_gpu.approval_check_step()
    assert set(step["env"]) | {"GITHUB_API_URL", "GITHUB_REPOSITORY"} >= set(approved_gpu.APPROVAL_ENV)
    done = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=30)
    assert (done.returncode == 0) is ok, done.stderr
    if not ok:
        assert "approval withdrawn" in done.stderr


# -- the approval comment (export/approval.py) ---------------------------------------------------

SHA = "a" * 40


def approve(tmp_path: Path, body: str, **pull) -> subprocess.CompletedProcess:
    """export/approval.py as pr-gpu.yml's plan job runs it."""
    outputs = tmp_path / "outputs"
    env = {**os.environ, "GITHUB_API_URL": fake_api(tmp_path, **{"head": SHA, **pull}),
           "GITHUB_REPOSITORY": "owner/repo", "PR_NUMBER": "7", "GH_TOKEN": "t", "COMMENT_BODY": body,
           "COMMENTER": "alice", "GITHUB_OUTPUT": str(outputs), "PYTHONPATH": str(REPO_ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "mha_ci.export.approval", "--event-out", str(tmp_path / "event.json")],
                          env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path)


def test_an_approval_naming_the_head_passes_its_sha_and_the_pull_request_on(tmp_path):
    done = approve(tmp_path, f"/gpu-approve {SHA.upper()}\nread it, looks right")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "outputs").read_text() == f"sha={SHA}\nbase_sha={'c' * 40}\n"
    event = json.loads((tmp_path / "event.json").read_text())
    from mha_ci.plan.events import read_github_event

    planned = read_github_event(tmp_path / "event.json", "pull_request")
    assert event["pull_request"]["head"]["sha"] == SHA and planned.labels == {"ci:sm90"} and planned.branch == "main"


@pytest.mark.parametrize("body, pull, why", [
    (f"/gpu-approve {SHA}", {"head": "b" * 40}, "the head moved past the approved commit"),   # pushed before the click
    (f"/gpu-approve {SHA}", {"permission": "triage"}, "needs write access"),
    (f"/gpu-approve {SHA}", {"permission": "read"}, "needs write access"),
    (f"/gpu-approve {SHA}", {"state": "closed"}, "not open"),
    (f"/gpu-approve {SHA}", {"draft": True}, "draft"),
    (f"/gpu-approve {SHA[:12]}", {}, "full 40-character SHA"),                           # a short SHA
    ("/gpu-approve", {}, "full 40-character SHA"),
    (f"/gpu-approve {SHA} {'b' * 40}", {}, "full 40-character SHA"),
    (f"lgtm\n/gpu-approve {SHA}", {}, "first line"),
])
def test_an_approval_is_refused_red_with_the_reason(tmp_path, body, pull, why):
    done = approve(tmp_path, body, **pull)
    assert done.returncode == 1 and why in done.stderr, done.stderr
    assert "::error::GPU jobs not approved" in done.stderr
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "event.json").exists()


def test_an_approval_by_someone_the_api_does_not_know_is_refused_with_the_reason(tmp_path):
    done = approve(tmp_path, f"/gpu-approve {SHA}")
    assert done.returncode == 0
    (tmp_path / "outputs").unlink()
    (tmp_path / "event.json").unlink()
    shutil.rmtree(tmp_path / "api" / "repos" / "owner" / "repo" / "collaborators")
    done = subprocess.run([sys.executable, "-m", "mha_ci.export.approval", "--event-out", str(tmp_path / "event.json")],
                          env={**os.environ, "GITHUB_API_URL": (tmp_path / "api").as_uri(),
                               "GITHUB_REPOSITORY": "owner/repo", "PR_NUMBER": "7", "GH_TOKEN": "t",
                               "COMMENT_BODY": f"/gpu-approve {SHA}", "COMMENTER": "alice",
                               "GITHUB_OUTPUT": str(tmp_path / "outputs"), "PYTHONPATH": str(REPO_ROOT / "src")},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "cannot read repos/owner/repo/collaborators/alice/permission" in done.stderr


def test_approval_runs_on_the_standard_library_alone():
    """pr-gpu.yml runs it before anything of the pull request is installed; gate.py imports it."""
    source = Path(approval.__file__).read_text()
    imported = set(re.findall(r"^(?:from|import) ([\w.]+)", source, re.MULTILINE))
    assert imported <= {"__future__", "argparse", "json", "os", "re", "sys", "urllib.request", "pathlib"}, imported


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
    """A fork's GPU jobs are not barred from the runners: they wait for an approval naming the head."""
    from mha_ci.export import gate

    why = gate.WITHHELD_FROM_FORKS
    assert "withheld" in why and "fork" in why
    assert "pr-gpu.yml" in why and f"{approval.COMMAND} <sha>" in why
    assert "only branches of this repository" not in why
