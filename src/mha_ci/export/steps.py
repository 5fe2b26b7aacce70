"""The pieces every generated workflow is built from: pinned actions, steps and job shapes.

Actions by commit SHA (a tag can be moved to other code); the release each SHA is stays in
ACTION_RELEASES, written as a comment on its line. Checkout never persists the token in
.git/config: a step that must push is given the token itself (nightly.yml).
"""
from __future__ import annotations

from mha_ci.export.gate import ARTIFACT_PREFIX
from mha_ci.export.matrix import SECCOMP_NOTE
from mha_ci.export.yaml_text import Noted

CHECKOUT = "actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8"
SETUP_PYTHON = "actions/setup-python@e797f83bcb11b83ae66e0230d6156d7c80228e7c"
UPLOAD = "actions/upload-artifact@b7c566a772e6b6bfb58ed0dc250532a479d7789f"
DOWNLOAD = "actions/download-artifact@37930b1c2abaa49bbe596cd826c3c89aef350131"
# actions/cache's restore and save halves, one commit: a run restores, and only a run of the
# default branch's own code saves (cache_restore_steps, cache_save_steps).
CACHE_RESTORE = "actions/cache/restore@0057852bfaa89a56745cba8c7296529d2fc39830"
CACHE_SAVE = "actions/cache/save@0057852bfaa89a56745cba8c7296529d2fc39830"
ACTION_RELEASES = {CHECKOUT: "v5.0.0", SETUP_PYTHON: "v6.0.0", UPLOAD: "v6.0.0", DOWNLOAD: "v7.0.0",
                   CACHE_RESTORE: "v4.3.0", CACHE_SAVE: "v4.3.0"}
PYTHON_VERSION = "3.11"
HOSTED_RUNNER = "ubuntu-latest"
# True only in a run of the default branch's workflow file on the default branch: a manual
# dispatch may name any branch, whose copy of the workflow is then the one that runs.
ON_DEFAULT_BRANCH = "github.ref == format('refs/heads/{0}', github.event.repository.default_branch)"
# A push to the default branch: the only run whose code may write a cache the others restore.
PUSH_TO_DEFAULT_BRANCH = f"github.event_name == 'push' && {ON_DEFAULT_BRANCH}"

# A GPU job's folders on the runner: the commit under test, the base branch a pull request's perf
# verdict is judged by (mha_ci.perf.gate_source), what the run writes, and what is uploaded.
CODE_DIR, BASE_DIR, OUT_DIR, RESULTS_DIR = "code", "base", "out", "results"

TIMEOUT_PLAN_MIN = 15
TIMEOUT_JOB_MIN = 180


def expr(text: str) -> str:
    return "${{ " + text + " }}"


def checkout(fetch_depth: int | None = None, ref: str | None = None, path: str | None = None,
             name: str = "Check out") -> dict:
    options: dict = {}
    if ref is not None:
        options["ref"] = ref
    if path is not None:
        options["path"] = path
    if fetch_depth is not None:
        options["fetch-depth"] = fetch_depth
    options["persist-credentials"] = False
    return {"name": name, "uses": CHECKOUT, "with": options}


def setup_python(step_id: str | None = None) -> dict:
    named = {"name": "Set up Python", "id": step_id} if step_id else {"name": "Set up Python"}
    return {**named, "uses": SETUP_PYTHON, "with": {"python-version": PYTHON_VERSION}}


# mha-ci's default cache root (mha_ci.cache.cache_root) on a runner that sets neither MHA_CI_CACHE
# nor XDG_CACHE_HOME, as GitHub's do not; actions/cache expands the ~.
CACHE_ROOT = "~/.cache/mha-ci"


VENVS_STEP, COMPILE_STEP = "venvs", "compile"
WITH_TOOLCHAIN = "matrix.toolchain != ''"          # a docs job runs none
CHECKSUMS = "matrix.kind == 'checksums'"


def cache_restore_steps() -> list[dict]:
    """The CPU job's toolchain envs and compile cache, restored (export/github.py's docstring: the
    keys). The compile cache is keyed by the job id, so each checksums shard restores (and, on
    the default branch, saves) the entries of its own slice of the variants."""
    lock = expr("hashFiles(format('containers/{0}/requirements.lock', matrix.toolchain))")
    toolchain = f"{expr('runner.os')}-{expr('matrix.toolchain')}"
    venvs = f"mha-ci-venvs-{toolchain}-py{expr('steps.python.outputs.python-version')}-{lock}"
    compile_prefix = f"mha-ci-compile-{expr('runner.os')}-{expr('matrix.id')}-"
    compile_lock = f"{compile_prefix}{lock}-"
    return [
        {"name": "Toolchain environment cache", "id": VENVS_STEP, "if": WITH_TOOLCHAIN, "uses": CACHE_RESTORE,
         "with": {"path": f"{CACHE_ROOT}/venvs", "key": venvs}},
        {"name": "Compile cache", "id": COMPILE_STEP, "if": CHECKSUMS, "uses": CACHE_RESTORE,
         "with": {"path": f"{CACHE_ROOT}/checksums", "key": compile_lock + expr("hashFiles('src/mha/**')"),
                  "restore-keys": f"{compile_lock}\n{compile_prefix}\n"}},
    ]


def cache_save_steps() -> list[dict]:
    """Save what a push to the default branch built, under the key its restore step computed; a
    key already saved is left as it is (GitHub's entries are immutable)."""
    def saved(step: str, path: str, condition: str) -> dict:
        return {"if": f"{condition} && {PUSH_TO_DEFAULT_BRANCH} && steps.{step}.outputs.cache-hit != 'true' "
                      "&& !cancelled()",
                "uses": CACHE_SAVE,
                "with": {"path": f"{CACHE_ROOT}/{path}", "key": expr(f"steps.{step}.outputs.cache-primary-key")}}
    return [{"name": "Save the toolchain environment cache", **saved(VENVS_STEP, "venvs", WITH_TOOLCHAIN)},
            {"name": "Save the compile cache", **saved(COMPILE_STEP, "checksums", CHECKSUMS)}]


def install() -> dict:
    return {"name": "Install mha-ci", "run": "python -m pip install -e ."}


def _run_script(executor: str) -> str:
    # The exit code is kept in out/exit-code so the gate can tell "failed" from "never ran";
    # `set +e` so a failing run still records it, then the step fails with the same code.
    return ("set +e\n"
            "mkdir -p out\n"
            f'mha-ci run --job "$JOB_ID" --executor {executor} --out out\n'
            "code=$?\n"
            'echo "$code" > out/exit-code\n'
            'exit "$code"\n')


def run_steps(executor: str) -> list[dict]:
    """Run one planned job, then publish its summary and upload its results for the gate."""
    return [
        {"name": "Run", "env": {"JOB_ID": expr("matrix.id")}, "run": _run_script(executor)},
        {"name": "Summary", "if": "always()",
         "run": 'if [ -f out/summary.md ]; then cat out/summary.md >> "$GITHUB_STEP_SUMMARY"; fi\n'},
        {"name": "Upload results", "if": "always()", "uses": UPLOAD,
         "with": {"name": ARTIFACT_PREFIX + expr("matrix.id"), "path": "out/", "if-no-files-found": "error"}},
    ]


# -- GPU jobs ----------------------------------------------------------------------------------
# Every JavaScript action of a job (checkout, upload-artifact) is handed ACTIONS_RUNTIME_TOKEN,
# which writes the workflow's cache as well as its artifacts; in a pull_request_target run that
# cache is the default branch's, which main.yml and pr.yml restore. A `container:` job runs its
# actions inside the job's container, where the code under test ran before them: with the
# runner's _actions folder (the actions' own code) mounted writable, and any process that code
# left behind. So a GPU job has no `container:`: the code under test runs in the `docker run` of
# the Run step alone, from the toolchain image, with nothing of the runner's mounted but the
# checkout (read-only) and out/; the container is removed before any action runs again, and the
# upload takes regular files of out/ only (a link the run left there could point at the host's files).

CONTAINER_NAME = 'container="mha-ci-$GITHUB_RUN_ID-$GITHUB_RUN_ATTEMPT-$JOB_ID"\n'

# The image is trusted (published from the default branch under a digest of its inputs); the
# login lives in a configuration folder of the step's own, removed when the step ends.
PULL_IMAGE = ('DOCKER_CONFIG="$(mktemp -d)"\n'
              "export DOCKER_CONFIG\n"
              "trap 'rm -rf \"$DOCKER_CONFIG\"' EXIT\n"
              'printf \'%s\' "$REGISTRY_TOKEN" | docker login "${IMAGE%%/*}" --username "$REGISTRY_USER" --password-stdin\n'
              'docker pull "$IMAGE"\n')

# Inside the image: the checkout is copied out of its read-only mount (pip writes egg-info into
# it, the run its caches); torch and triton are the image's pinned ones, so only mha-ci itself is
# installed. "$@": the host's extra options for `mha-ci run`.
IN_IMAGE = ("set -e\n"
            'work="$(mktemp -d)"\n'
            'cp -a /checkout/. "$work"\n'
            'cd "$work"\n'
            "python -m pip install --no-deps -e .\n"
            'exec mha-ci run --job "$JOB_ID" --executor host --out /out "$@"\n')

# Only regular files and folders of out/ are kept, and the exit code is the one `docker run`
# returned, kept where the container could not write (the container's own exit-code is dropped).
RESULTS = (f"rm -rf {RESULTS_DIR}\n"
           f"mkdir {RESULTS_DIR}\n"
           f"if [ -d {OUT_DIR} ]; then cp -R {OUT_DIR}/. {RESULTS_DIR}/ || true; fi\n"
           f"find {RESULTS_DIR} -mindepth 1 ! -type f ! -type d -delete\n"
           f"rm -f {RESULTS_DIR}/exit-code\n"
           f"if [ -f exit-code ]; then cp exit-code {RESULTS_DIR}/exit-code; fi\n")


def _gpu_run_script(gate_from_base: bool, event: str) -> str:
    base = f' --volume "$PWD/{BASE_DIR}:/base:ro"' if gate_from_base else ""
    # The event decides the perf job's shapes (a pull request's subset, or the full set). The base
    # checkout both judges (its gate settings and baselines) and is measured beside the pull
    # request's kernel on this GPU (the perf job's same-GPU A/B).
    options = f" --event {event}" + (" --gate-from /base --perf-against /base" if gate_from_base else "")
    # A runner that kept a job's files would upload them, or its exit code, as this job's.
    return ("set +e\n"
            "rm -f exit-code\n"
            f"if [ -e {OUT_DIR} ]; then echo \"{OUT_DIR}/ exists before the run: this runner kept an earlier "
            f"job's files (GPU runners are ephemeral: CI guide, Trust)\" >&2; exit 3; fi\n"
            f"mkdir {OUT_DIR}\n"
            'read -ra options <<< "$CONTAINER_OPTIONS"\n'
            + CONTAINER_NAME +
            'docker run --rm --name "$container" "${options[@]}" '
            f'--volume "$PWD/{CODE_DIR}:/checkout:ro" --volume "$PWD/{OUT_DIR}:/out"{base} '
            f'--env JOB_ID "$IMAGE" bash -c "$IN_IMAGE" mha-ci{options}\n'
            "code=$?\n"
            'echo "$code" > exit-code\n'
            'exit "$code"\n')


def gpu_run_steps(gate_from_base: bool, event: str) -> list[dict]:
    """Run one planned job in its toolchain image, then upload what it left for the gate."""
    job_id = {"JOB_ID": expr("matrix.id")}
    return [
        {"name": "Run",
         "env": {**job_id, "IMAGE": expr("matrix.image"), "CONTAINER_OPTIONS": Noted(expr("matrix.container_options"), SECCOMP_NOTE),
                 "IN_IMAGE": IN_IMAGE},
         "run": _gpu_run_script(gate_from_base, event)},
        {"name": "Stop the run's container", "if": "always()", "env": job_id,
         "run": CONTAINER_NAME + 'docker rm --force "$container" > /dev/null 2>&1 || true\n'},
        {"name": "Results for the gate", "if": "always()", "run": RESULTS},
        {"name": "Summary", "if": "always()",
         "run": f'if [ -f {RESULTS_DIR}/summary.md ]; then cat {RESULTS_DIR}/summary.md >> "$GITHUB_STEP_SUMMARY"; fi\n'},
        {"name": "Upload results", "if": "always()", "uses": UPLOAD,
         "with": {"name": ARTIFACT_PREFIX + expr("matrix.id"), "path": f"{RESULTS_DIR}/",
                  "if-no-files-found": "error"}},
    ]


def pull_image_step() -> dict:
    return {"name": "Pull the toolchain image",
            "env": {"IMAGE": expr("matrix.image"), "REGISTRY_USER": expr("github.actor"),
                    "REGISTRY_TOKEN": expr("github.token")},
            "run": PULL_IMAGE}


def cpu_job(save_caches: bool) -> dict:
    """The cpu matrix: GitHub-hosted runners (export/matrix.py refuses others), venv executor.
    Caches are restored in every workflow and saved only where `save_caches` (main.yml, and there
    only on a push to the default branch): pull-request code never writes a cache."""
    return {
        "name": expr("matrix.id"),
        "needs": "plan",
        "if": "needs.plan.outputs.cpu_count != '0'",
        "runs-on": expr("fromJSON(matrix.runs_on)"),
        "timeout-minutes": TIMEOUT_JOB_MIN,
        "strategy": {"fail-fast": False, "matrix": expr("fromJSON(needs.plan.outputs.cpu)")},
        "steps": [checkout(), setup_python(step_id="python"), *cache_restore_steps(), install(), *run_steps("venv"),
                  *(cache_save_steps() if save_caches else [])],
    }


def gpu_job(event: str, condition: str | None = None, before_checkout: tuple[dict, ...] = (),
            checkout_ref: str | None = None, permissions: dict | None = None, gate_from_base: bool = False,
            base_ref: str | None = None) -> dict:
    """The gpu matrix: self-hosted runners, the job's command in its toolchain image (host executor
    there); read-only token (`packages: read` pulls the image, `permissions` adds to it). `event`:
    the run's event kind (`mha-ci run --event`), which picks the perf job's shapes.
    `gate_from_base`: the default checkout (a pull_request_target run's base branch) goes beside
    the commit under test (at `base_ref`, the merge base, when given), and perf jobs are judged by
    it and measured against its kernel (`mha-ci run --gate-from --perf-against`)."""
    planned = "needs.plan.outputs.gpu_count != '0'"
    base = [checkout(ref=base_ref, path=BASE_DIR,
                     name="Check out the merge base (gate settings, baselines, the kernel measured beside)")] \
        if gate_from_base else []
    return {
        "name": expr("matrix.id"),
        "needs": "plan",
        "if": f"{planned} && {condition}" if condition else planned,
        "runs-on": expr("fromJSON(matrix.runs_on)"),
        "timeout-minutes": TIMEOUT_JOB_MIN,
        "strategy": {"fail-fast": False, "matrix": expr("fromJSON(needs.plan.outputs.gpu)")},
        "permissions": {"contents": "read", "packages": Noted("read", "pulls the toolchain image"),
                        **(permissions or {})},
        # said, not guessed from the runner: the scripts use bash (arrays, here-strings)
        "defaults": {"run": {"shell": "bash"}},
        "steps": [pull_image_step(), *before_checkout, checkout(ref=checkout_ref, path=CODE_DIR), *base,
                  *gpu_run_steps(gate_from_base, event)],
    }


def gate_command(plan: str = "artifacts/plan/plan.json") -> str:
    return (f'python -m mha_ci.export.gate --plan {plan} --artifacts artifacts '
            '--plan-result "$PLAN_RESULT" --summary "$GITHUB_STEP_SUMMARY"')
