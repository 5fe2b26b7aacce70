"""images.yml and the GPU matrix name the same images: the plan job's `mha-ci export matrix` and
the image build's `mha-ci containers publish` run with MHA_CI_REGISTRY set by the
same generated shell line, and both compute references through ImageSpec.reference."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mha_ci.cli import main as cli
from mha_ci.containers.images import discover
from mha_ci.model.loader import load_pipeline


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))
    return data


def step(workflow: dict, job: str, name: str) -> dict:
    return next(s for s in workflow["jobs"][job]["steps"] if s.get("name") == name)


def registry_line(script: str) -> str:
    (line,) = [ln for ln in script.splitlines() if "MHA_CI_REGISTRY=" in ln]
    return line


def run_bash(script: str, root: Path, repository: str) -> str:
    """Run a workflow script's lines in bash as GitHub would (GITHUB_REPOSITORY set)."""
    env = {**os.environ, "GITHUB_REPOSITORY": repository, "PYTHONPATH": str(Path(__file__).parents[3] / "src")}
    env.pop("MHA_CI_REGISTRY", None)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow   # over a second (subprocesses): out of `make test-fast`
def test_plan_job_and_image_build_compute_the_same_references(pipeline_root, tmp_path):
    assert cli(["--root", str(pipeline_root), "export", "github"]) == 0
    flows = {p.name: load(p) for p in (pipeline_root / ".github/workflows").glob("*.yml")}
    images, pr = flows["images.yml"], flows["pr.yml"]
    publish = step(images, "publish", "Build and publish")["run"]
    matrices = step(pr, "plan", "Job matrices")["run"]
    assert registry_line(publish) == registry_line(matrices)
    assert "mha-ci containers publish" in publish

    # Every GPU job of every arch and toolchain, as the plan job would see it.
    pipeline = load_pipeline(pipeline_root)
    plan = {"jobs": [{"id": f"perf-{a}-{t}", "kind": "perf", "arch": a, "toolchain": t}
                     for a, arch in pipeline.archs.items() if arch.device != "none"
                     for t in pipeline.toolchains]}
    (pipeline_root / "plan.json").write_text(json.dumps(plan))
    python = sys.executable
    # A mixed-case repository: registry paths must come out lower case.
    out = run_bash(registry_line(matrices) + f'\n"{python}" -m mha_ci --root . export matrix --plan plan.json\n',
                   pipeline_root, "Some-Owner/MHA-CI")
    gpu = json.loads(dict(line.split("=", 1) for line in out.splitlines())["gpu"])["include"]
    pulled = {e["image"] for e in gpu}
    assert pulled and all(r.startswith("ghcr.io/some-owner/mha-ci/") for r in pulled)

    # What images.yml's matrix entries publish, with its own registry line.
    entries = images["jobs"]["publish"]["strategy"]["matrix"]["include"]
    published = set()
    for entry in entries:
        script = (registry_line(publish) + f'\n"{python}" -m mha_ci --root . containers tags '
                  f'--toolchain {entry["toolchain"]} --platform {entry["platform"]}\n')
        published.update(run_bash(script, pipeline_root, "Some-Owner/MHA-CI").split())
    assert pulled <= published, f"GPU jobs pull images nothing publishes: {pulled - published}"


def test_images_workflow_builds_every_image_and_publishes_only_from_the_default_branch(pipeline_root):
    """A pull request's image never becomes main's: pull requests build with a read-only token,
    only a default-branch run logs in and publishes (publish skips tags that exist)."""
    assert cli(["--root", str(pipeline_root), "export", "github"]) == 0
    images = load(pipeline_root / ".github/workflows/images.yml")
    build, publish = images["jobs"]["build"], images["jobs"]["publish"]
    every = {(s.toolchain, s.platform) for s in discover(load_pipeline(pipeline_root).toolchains.values())}
    for job in (build, publish):
        assert {(e["toolchain"], e["platform"]) for e in job["strategy"]["matrix"]["include"]} == every
    assert ("triton-3.4", "cuda") in every and ("triton-3.8", "cuda") in every
    # rebuilt when anything that goes into a reference changes
    assert "containers/**" in images["on"]["push"]["paths"]
    assert images["on"]["pull_request"]["paths"] == images["on"]["push"]["paths"]
    default = "github.ref == format('refs/heads/{0}', github.event.repository.default_branch)"
    assert publish["if"] == f"github.event_name != 'pull_request' && {default}"
    assert publish["permissions"] == {"contents": "read", "packages": "write"}
    assert build["if"].startswith("github.event_name == 'pull_request' || github.ref != ")
    assert "permissions" not in build          # the workflow's contents: read
    build_text = json.dumps(build)
    assert "docker login" not in build_text and "publish" not in build_text and "secrets." not in build_text
    assert "mha-ci containers build" in step(images, "build", "Build")["run"]


def test_gpu_jobs_pull_with_the_workflow_token(pipeline_root):
    assert cli(["--root", str(pipeline_root), "export", "github"]) == 0
    for name in ("pr-gpu.yml", "main.yml"):
        gpu = load(pipeline_root / ".github/workflows" / name)["jobs"]["gpu"]
        pull = gpu["steps"][0]
        assert pull["env"] == {"IMAGE": "${{ matrix.image }}", "REGISTRY_USER": "${{ github.actor }}",
                               "REGISTRY_TOKEN": "${{ github.token }}"}
        assert "--password-stdin" in pull["run"] and 'docker pull "$IMAGE"' in pull["run"]
        assert gpu["permissions"]["packages"] == "read"
