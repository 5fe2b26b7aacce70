"""images.yml: build and publish every (toolchain, platform) image to the repository's own
registry, and the registry settings the other workflows share.

The GPU jobs of pr.yml / main.yml run in `container: ${{ matrix.image }}`, a reference their plan
job computes with mha_ci.containers.images (no docker there). This workflow publishes the same
references, through the same function (`mha-ci containers publish`), with the same
MHA_CI_REGISTRY: so what a job pulls is what was pushed, by construction.

- Registry: ghcr.io/<owner>/<repo>, from $GITHUB_REPOSITORY, lower-cased in the shell (registry
  paths must be lower case; expressions have no lower()). Never an unqualified name, which docker
  would look up on Docker Hub.
- Triggers: a change to anything the reference is computed from (containers/, the pin check the
  build context adds, toolchains.yaml that says which lock is whose); pull requests from this
  repository too, so a pull request that changes a lock publishes the image its own GPU jobs
  pull. Fork pull requests are skipped: their token cannot write packages.
- Idempotent: a reference the registry already holds is neither built nor pushed (the tag is a
  content digest, so "present" means "same inputs").
"""
from __future__ import annotations

from mha_ci.containers.images import REGISTRY_ENV, discover
from mha_ci.model.pipeline import Pipeline

REGISTRY_HOST = "ghcr.io"
# Shell text (bash: ${VAR,,} lower-cases) that gives MHA_CI_REGISTRY its value in GitHub.
REGISTRY_FROM_REPOSITORY = f'export {REGISTRY_ENV}="{REGISTRY_HOST}/${{GITHUB_REPOSITORY,,}}"\n'
# What a job needs to pull the images: the workflow token, allowed to read packages.
PULL_CREDENTIALS = {"username": "${{ github.actor }}", "password": "${{ secrets.GITHUB_TOKEN }}"}
TRIGGER_PATHS = ["containers/**", "src/mha_ci/containers/**", "pipelines/toolchains.yaml"]
TIMEOUT_IMAGE_MIN = 120


def images_workflow(pipeline: Pipeline, checkout: dict, setup_python: dict) -> dict:
    """checkout, setup_python: export.github's steps, so that action pins are stated once."""
    images = [{"toolchain": s.toolchain, "platform": s.platform}
              for s in discover(pipeline.toolchains.values())]
    publish = (REGISTRY_FROM_REPOSITORY
               + 'echo "$TOKEN" | docker login "' + REGISTRY_HOST + '" -u "$ACTOR" --password-stdin\n'
               'mha-ci containers publish --toolchain "$TOOLCHAIN" --platform "$PLATFORM"\n')
    # The CPU and CUDA images build FROM the local Debian base (containers/make-base-image.sh);
    # the ROCm ones FROM AMD's image, which docker pulls itself.
    base = ('if grep -q "^ARG BASE_IMAGE=mha-ci/" "containers/$TOOLCHAIN/Dockerfile.$PLATFORM"; then\n'
            "  sudo apt-get update -qq && sudo apt-get install -y -qq debootstrap\n"
            "  sudo containers/make-base-image.sh\n"
            "fi\n")
    # A hosted runner has ~14 GB free; the CUDA wheelhouse and image need ~12 GB, the ROCm
    # base image more: drop the preinstalled SDKs no image uses.
    free_disk = ("sudo rm -rf /usr/share/dotnet /usr/local/lib/android /opt/ghc /opt/hostedtoolcache/CodeQL\n"
                 "df -h /\n")
    env = {"TOOLCHAIN": "${{ matrix.toolchain }}", "PLATFORM": "${{ matrix.platform }}"}
    return {
        "name": "images",
        "on": {
            "push": {"branches": list(pipeline.events["push"].branches or ["main"]), "paths": list(TRIGGER_PATHS)},
            "pull_request": {"paths": list(TRIGGER_PATHS)},
            "workflow_dispatch": {},
        },
        "permissions": {"contents": "read"},
        "concurrency": {"group": "images-${{ github.ref }}", "cancel-in-progress": False},
        "jobs": {"image": {
            "name": "${{ matrix.toolchain }}-${{ matrix.platform }}",
            "if": ("github.event_name != 'pull_request' || "
                   "github.event.pull_request.head.repo.full_name == github.repository"),
            "runs-on": "ubuntu-latest",
            "timeout-minutes": TIMEOUT_IMAGE_MIN,
            "permissions": {"contents": "read", "packages": "write"},
            "strategy": {"fail-fast": False, "matrix": {"include": images}},
            "steps": [
                checkout,
                setup_python,
                {"name": "Install mha-ci", "run": "python -m pip install -e '.[docker]'"},
                {"name": "Free disk", "run": free_disk},
                {"name": "Base image", "env": env, "run": base},
                {"name": "Build and publish", "env": {**env, "TOKEN": "${{ secrets.GITHUB_TOKEN }}",
                                                      "ACTOR": "${{ github.actor }}"},
                 "run": publish},
            ],
        }},
    }
