"""images.yml: build and publish every (toolchain, platform) image to the repository's own
registry, and the registry settings the other workflows share.

The GPU jobs of pr-gpu.yml / main.yml pull and `docker run` `matrix.image`, a reference their plan
job computes with mha_ci.containers.images (no docker there). This workflow publishes the same
references, through the same function (`mha-ci containers publish`), with the same
MHA_CI_REGISTRY: so what a job pulls is what was pushed, by construction.

- Registry: ghcr.io/<owner>/<repo>, from $GITHUB_REPOSITORY, lower-cased in the shell (registry
  paths must be lower case; expressions have no lower()). Never an unqualified name, which docker
  would look up on Docker Hub.
- Triggers: a change to anything the reference is computed from (containers/, the pin check the
  build context adds, toolchains.yaml that says which lock is whose).
- Pull requests only build (`build`, read-only token): that the image still builds is their
  check. Only a run on the default branch publishes (`publish`, `packages: write`): publish
  skips a tag the registry already holds, so an image a pull request pushed under a tag would
  later stand for main's own build of the same inputs. A pull request that changes a lock
  therefore gets its GPU image once it is merged (docs/ci-guide.md, Trust).
- Idempotent: a reference the registry already holds is neither built nor pushed (the tag is a
  content digest, so "present" means "same inputs").
"""
from __future__ import annotations

from mha_ci.containers.images import REGISTRY_ENV, discover
from mha_ci.export.steps import ON_DEFAULT_BRANCH, checkout, setup_python
from mha_ci.export.yaml_text import Noted
from mha_ci.model.pipeline import Pipeline

REGISTRY_HOST = "ghcr.io"
# Shell text (bash: ${VAR,,} lower-cases) that gives MHA_CI_REGISTRY its value in GitHub.
REGISTRY_FROM_REPOSITORY = f'export {REGISTRY_ENV}="{REGISTRY_HOST}/${{GITHUB_REPOSITORY,,}}"\n'
TRIGGER_PATHS = ["containers/**", "src/mha_ci/containers/**", "pipelines/toolchains.yaml"]
TIMEOUT_IMAGE_MIN = 120
PUBLISHES = f"github.event_name != 'pull_request' && {ON_DEFAULT_BRANCH}"
BUILDS_ONLY = ("github.event_name == 'pull_request' || "
               "github.ref != format('refs/heads/{0}', github.event.repository.default_branch)")


def images_workflow(pipeline: Pipeline) -> dict:
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
    prepare = [checkout(), setup_python(),
               {"name": "Install mha-ci", "run": "python -m pip install -e '.[docker]'"},
               {"name": "Free disk", "run": free_disk},
               {"name": "Base image", "env": env, "run": base}]
    build = REGISTRY_FROM_REPOSITORY + 'mha-ci containers build --toolchain "$TOOLCHAIN" --platform "$PLATFORM"\n'

    def job(condition: str, steps: list[dict], permissions: dict | None = None) -> dict:
        return {"name": "${{ matrix.toolchain }}-${{ matrix.platform }}", "if": condition, "runs-on": "ubuntu-latest",
                "timeout-minutes": TIMEOUT_IMAGE_MIN, **({"permissions": permissions} if permissions else {}),
                "strategy": {"fail-fast": False, "matrix": {"include": images}}, "steps": steps}

    return {
        "name": "images",
        "on": {
            "push": {"branches": list(pipeline.events["push"].branches or ["main"]), "paths": list(TRIGGER_PATHS)},
            "pull_request": {"paths": list(TRIGGER_PATHS)},
            "workflow_dispatch": {},
        },
        "permissions": {"contents": "read"},
        "concurrency": {"group": "images-${{ github.ref }}", "cancel-in-progress": False},
        "jobs": {
            "build": job(BUILDS_ONLY, [*prepare, {"name": "Build", "env": env, "run": build}]),
            "publish": job(PUBLISHES, [*prepare, {"name": "Build and publish", "env": {
                **env, "TOKEN": "${{ secrets.GITHUB_TOKEN }}", "ACTOR": "${{ github.actor }}"}, "run": publish}],
                permissions={"contents": "read", "packages": Noted("write", "pushes the toolchain images")}),
        },
    }
