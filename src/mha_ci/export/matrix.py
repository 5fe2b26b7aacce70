"""From a plan (the JSON of `mha-ci plan --format json`) to the GitHub job matrices.

Runs inside the workflow's `plan` job, after `mha-ci plan`, so the matrix always matches the
pipelines/ of the commit under test (a pull request that edits archs.yaml is planned with its own
runner labels). Two matrices, because a job either runs on the CPU runner with the venv executor,
or on a GPU runner inside its toolchain's container image, and GitHub's `container:` cannot be
switched off per matrix entry:

    cpu: {"include": [{"id", "kind", "arch", "toolchain", "runs_on"}]}
    gpu: {"include": [{"id", "kind", "arch", "toolchain", "runs_on", "image", "container_options"}]}

`runs_on` is a JSON string of the arch's runner labels (`runs-on: ${{ fromJSON(matrix.runs_on) }}`).
"""
from __future__ import annotations

import json
from pathlib import Path

from mha_ci.containers.images import spec_for
from mha_ci.errors import ConfigError
from mha_ci.model.pipeline import Pipeline
from mha_ci.model.types import Arch, Toolchain

# What each device kind needs from `docker run` (the same as the docker executor gives locally).
# AMD: the KFD compute interface and the DRI render nodes, the video group that owns them, and
# no seccomp filter (ROCm's memory mapping calls are blocked by docker's default profile).
CONTAINER_OPTIONS = {
    "amd-gpu": "--device /dev/kfd --device /dev/dri --group-add video --security-opt seccomp=unconfined",
    "nvidia-gpu": "--gpus all",
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


def runs_on(arch: Arch) -> str:
    return json.dumps(list(arch.runner_labels), separators=(",", ":"))


def matrices(pipeline: Pipeline, plan: dict) -> dict[str, dict]:
    """{"cpu": matrix, "gpu": matrix} for the planned jobs, in plan order."""
    cpu, gpu = [], []
    for index, entry in enumerate(plan.get("jobs", ())):
        try:
            job_id, kind, arch_name, toolchain_name = (entry[k] for k in ("id", "kind", "arch", "toolchain"))
        except (KeyError, TypeError):
            raise ConfigError(f"plan jobs[{index}] lacks one of id, kind, arch, toolchain") from None
        arch = pipeline.archs.get(arch_name)
        toolchain = pipeline.toolchains.get(toolchain_name)
        if arch is None or toolchain is None:
            raise ConfigError(f"plan job {job_id} names arch '{arch_name}' / toolchain '{toolchain_name}' "
                              "that pipelines/ does not define")
        item = {"id": job_id, "kind": kind, "arch": arch_name, "toolchain": toolchain_name, "runs_on": runs_on(arch)}
        if arch.device == "none":
            cpu.append(item)
        else:
            gpu.append({**item, "image": image_reference(toolchain, arch),
                        "container_options": CONTAINER_OPTIONS[arch.device]})
    return {"cpu": {"include": cpu}, "gpu": {"include": gpu}}


def github_output(pipeline: Pipeline, plan: dict) -> str:
    """Lines for $GITHUB_OUTPUT: cpu, gpu (compact JSON), cpu_count, gpu_count."""
    found = matrices(pipeline, plan)
    lines = []
    for name in ("cpu", "gpu"):
        lines.append(f"{name}={json.dumps(found[name], separators=(',', ':'), sort_keys=True)}")
        lines.append(f"{name}_count={len(found[name]['include'])}")
    return "\n".join(lines) + "\n"


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
