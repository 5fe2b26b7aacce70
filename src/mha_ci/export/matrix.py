"""From a plan (the JSON of `mha-ci plan --format json`) to the GitHub job matrices.

Runs inside the workflow's `plan` job, after `mha-ci plan`, so the matrix always matches the
pipelines/ of the commit under test (a pull request that edits archs.yaml is planned with its own
runner labels). Two matrices, because a job either runs on the CPU runner with the venv executor,
or on a GPU runner in a `docker run` of its toolchain's image (export/steps.py, GPU jobs), and the
two take different steps:

    cpu: {"include": [{"id", "kind", "arch", "toolchain", "runs_on"}]}
    gpu: {"include": [{"id", "kind", "arch", "toolchain", "runs_on", "image", "container_options"}]}

`runs_on` is a JSON string of the arch's runner labels (`runs-on: ${{ fromJSON(matrix.runs_on) }}`).

A `cpu` job (an arch with `device: none`) runs pull-request code in pr.yml, so its runner must be
one GitHub-hosted image label (ubuntu-latest, ubuntu-24.04, ...): the export refuses anything
else (`self-hosted`, or a custom label a self-hosted machine could answer to). This refusal is a
guard against mistakes, not against a fork: a pull_request run executes the pull request's own
copy of this file and of pr.yml. What keeps fork code off the self-hosted runners is the runner
group setting that admits only the default branch's workflows (docs/ci-guide.md, trust).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from mha_ci.containers.images import spec_for
from mha_ci.errors import ConfigError
from mha_ci.model.pipeline import Pipeline
from mha_ci.model.types import Arch, Toolchain

# What each device kind needs from `docker run` (the same as the docker executor gives locally).
# AMD: the KFD compute interface and the DRI render nodes, the video group that owns them, and
# no seccomp filter: the ROCm runtime places memory by NUMA node (mbind, set_mempolicy), which
# docker's default profile refuses without CAP_SYS_NICE, and AMD's container guide runs ROCm
# unconfined. It widens the kernel calls the pull request's code can make, so it is bounded the
# other way: no --privileged, docker's default capabilities, no token, an ephemeral runner (CI
# guide, Trust). A narrower profile (the default plus those calls) waits on a run on MI300X.
SECCOMP_NOTE = ("AMD GPU jobs run with seccomp=unconfined (ROCm's NUMA memory calls; bounded by "
                "an ephemeral runner, default capabilities, no token): export/matrix.py, CI guide Trust")
CONTAINER_OPTIONS = {
    "amd-gpu": "--device /dev/kfd --device /dev/dri --group-add video --security-opt seccomp=unconfined",
    "nvidia-gpu": "--gpus all",
}
# compute-sanitizer is not on PyPI, so the toolchain images (built from wheels) lack it: the
# memcheck job uses the GPU runner's CUDA toolkit, read-only, and records its version.
KIND_CONTAINER_OPTIONS = {
    ("memcheck", "nvidia-gpu"): "--volume /usr/local/cuda:/opt/runner-cuda:ro "
                                "--env MHA_CI_COMPUTE_SANITIZER=/opt/runner-cuda/bin/compute-sanitizer",
}


def image_reference(toolchain: Toolchain, arch: Arch) -> str:
    """The reference of the toolchain's image on the arch's platform, e.g.
    ghcr.io/owner/repo/triton-3.4-cuda:<content digest>: exactly what images.yml publishes and
    `mha-ci containers` builds (one function, ImageSpec.reference; the registry is
    $MHA_CI_REGISTRY, which the workflow sets from the repository)."""
    on_platform = toolchain.on(arch.platform)
    spec = spec_for(on_platform)
    if spec is None:
        raise ConfigError(f"arch {arch.name} runs {toolchain.name} in an image, but "
                          f"{on_platform.container_dir}/Dockerfile.{arch.platform} does not exist")
    return spec.reference()


# GitHub's hosted images, e.g. ubuntu-latest, ubuntu-24.04-arm, windows-2025, macos-15-xlarge.
HOSTED_IMAGE = re.compile(r"(ubuntu|windows|macos)-(latest|slim|\d+(\.\d+)?)(-arm|-intel|-large|-xlarge)?")
ARCHS_FILE = "pipelines/archs.yaml"


def check_hosted(pipeline: Pipeline) -> None:
    """Refuse (exit 2) an arch with `device: none` whose runner is not one GitHub-hosted image."""
    for arch in pipeline.archs.values():
        labels = list(arch.runner_labels)
        if arch.device != "none" or (len(labels) == 1 and HOSTED_IMAGE.fullmatch(labels[0])):
            continue
        why = ("'self-hosted' is a self-hosted runner" if any(label.casefold() == "self-hosted" for label in labels)
               else "a job runs where all its labels match, and only one GitHub-hosted image label is sure "
                    "to be GitHub's machine")
        raise ConfigError(f"arch {arch.name} has device: none: its jobs run pull-request code and must run "
                          f"on one GitHub-hosted runner label (e.g. ubuntu-latest), not {labels}: {why}",
                          file=ARCHS_FILE, key=f"archs.{arch.name}.runner_labels")


def runs_on(arch: Arch) -> str:
    return json.dumps(list(arch.runner_labels), separators=(",", ":"))


def group_of(arch: Arch) -> str:
    """The matrix a job of `arch` goes to: cpu (GitHub-hosted, venv executor) or gpu (self-hosted,
    in its toolchain image)."""
    return "cpu" if arch.device == "none" else "gpu"


def matrices(pipeline: Pipeline, plan: dict) -> dict[str, dict]:
    """{"cpu": matrix, "gpu": matrix} for the planned jobs, in plan order."""
    check_hosted(pipeline)
    cpu, gpu = [], []
    for index, entry in enumerate(plan.get("jobs", ())):
        try:
            job_id, kind, arch_name, toolchain_name = (entry[k] for k in ("id", "kind", "arch", "toolchain"))
        except (KeyError, TypeError):
            raise ConfigError(f"plan jobs[{index}] lacks one of id, kind, arch, toolchain") from None
        arch = pipeline.archs.get(arch_name)
        kind_matrix = pipeline.kinds.get(kind)
        # a kind that runs no toolchain (docs) names "", every other kind one of toolchains.yaml
        needs_toolchain = kind_matrix is None or kind_matrix.per_toolchain
        toolchain = pipeline.toolchains.get(toolchain_name)
        if arch is None or (toolchain is None if needs_toolchain else toolchain_name != ""):
            raise ConfigError(f"plan job {job_id} names arch '{arch_name}' / toolchain '{toolchain_name}' "
                              "that pipelines/ does not define")
        item = {"id": job_id, "kind": kind, "arch": arch_name, "toolchain": toolchain_name, "runs_on": runs_on(arch)}
        if group_of(arch) == "cpu":
            cpu.append(item)
        elif toolchain is None:
            raise ConfigError(f"plan job {job_id} runs no toolchain, so it has no image to run in on {arch_name}: "
                              "a kind with per_toolchain: false runs on a CPU arch only")
        else:
            options = " ".join(filter(None, (CONTAINER_OPTIONS[arch.device],
                                             KIND_CONTAINER_OPTIONS.get((kind, arch.device)))))
            gpu.append({**item, "image": image_reference(toolchain, arch), "container_options": options})
    return {"cpu": {"include": cpu}, "gpu": {"include": gpu}}


def github_output(pipeline: Pipeline, plan: dict) -> str:
    """Lines for $GITHUB_OUTPUT: cpu, gpu (compact JSON), cpu_count, gpu_count."""
    found = matrices(pipeline, plan)
    lines = []
    for name in ("cpu", "gpu"):
        lines.append(f"{name}={json.dumps(found[name], separators=(',', ':'), sort_keys=True)}")
        lines.append(f"{name}_count={len(found[name]['include'])}")
    return "\n".join(lines) + "\n"


def group_plan(pipeline: Pipeline, plan: dict, group: str) -> dict:
    """The plan with only the jobs of matrix `group`: what one workflow's gate checks (pr.yml runs
    the cpu group; the approved GPU run of pr-gpu.yml the gpu group)."""
    if group not in ("cpu", "gpu"):
        raise ConfigError(f"unknown matrix group '{group}': cpu or gpu")
    matrices(pipeline, plan)     # the same refusals as the matrices themselves
    kept = [entry for entry in plan["jobs"] if group_of(pipeline.archs[entry["arch"]]) == group]
    return {**plan, "jobs": kept}


def read_plan(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError("plan file not found", file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"plan file is not JSON: {exc.msg}", file=str(path), line=exc.lineno) from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise ConfigError("plan file has no 'jobs' list (expected `mha-ci plan --format json` output)", file=str(path))
    return data
