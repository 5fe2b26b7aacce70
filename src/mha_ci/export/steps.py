"""The pieces every generated workflow is built from: pinned actions, steps and job shapes.

Actions by commit SHA (a tag can be moved to other code); the release each SHA is stays in
ACTION_RELEASES, written as a comment on its line. Checkout never persists the token in
.git/config: a step that must push is given the token itself (nightly.yml).
"""
from __future__ import annotations

from mha_ci.export.gate import ARTIFACT_PREFIX
from mha_ci.export.yaml_text import Noted

CHECKOUT = "actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8"
SETUP_PYTHON = "actions/setup-python@e797f83bcb11b83ae66e0230d6156d7c80228e7c"
UPLOAD = "actions/upload-artifact@b7c566a772e6b6bfb58ed0dc250532a479d7789f"
DOWNLOAD = "actions/download-artifact@37930b1c2abaa49bbe596cd826c3c89aef350131"
CACHE = "actions/cache@0057852bfaa89a56745cba8c7296529d2fc39830"
ACTION_RELEASES = {CHECKOUT: "v5.0.0", SETUP_PYTHON: "v6.0.0", UPLOAD: "v6.0.0", DOWNLOAD: "v7.0.0",
                   CACHE: "v4.3.0"}
PYTHON_VERSION = "3.11"
HOSTED_RUNNER = "ubuntu-latest"
# True only in a run of the default branch's workflow file on the default branch: a manual
# dispatch may name any branch, whose copy of the workflow is then the one that runs.
ON_DEFAULT_BRANCH = "github.ref == format('refs/heads/{0}', github.event.repository.default_branch)"

# zizmor cannot see through `${{ matrix.image }}`. The plan job computes the reference from the
# lock files and Dockerfile (export/matrix.py): a tag that is a digest of the image's inputs,
# which images.yml publishes from the default branch only, never over an existing tag.
IMAGE_NOTE = ("zizmor: ignore[unpinned-images] the plan names each image by a content-digest tag of its inputs, "
              "published from the default branch only (docs/ci-guide.md, Trust)")

# What a GPU job needs to pull its image: the workflow token, allowed to read packages.
PULL_CREDENTIALS = {"username": "${{ github.actor }}", "password": "${{ secrets.GITHUB_TOKEN }}"}

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


def cache_steps() -> list[dict]:
    """The CPU job's toolchain envs and compile cache (export/github.py's docstring: the keys)."""
    lock = expr("hashFiles(format('containers/{0}/requirements.lock', matrix.toolchain))")
    toolchain = f"{expr('runner.os')}-{expr('matrix.toolchain')}"
    venvs = f"mha-ci-venvs-{toolchain}-py{expr('steps.python.outputs.python-version')}-{lock}"
    compile_prefix = f"mha-ci-compile-{toolchain}-"
    compile_lock = f"{compile_prefix}{lock}-"
    return [
        {"name": "Toolchain environment cache", "uses": CACHE,
         "with": {"path": ".cache/mha-ci/venvs", "key": venvs}},
        {"name": "Compile cache", "if": "matrix.kind == 'checksums'", "uses": CACHE,
         "with": {"path": ".cache/mha-ci/checksums", "key": compile_lock + expr("hashFiles('src/mha/**')"),
                  "restore-keys": f"{compile_lock}\n{compile_prefix}\n"}},
    ]


def install(no_deps: bool = False) -> dict:
    cmd = "python -m pip install --no-deps -e ." if no_deps else "python -m pip install -e ."
    return {"name": "Install mha-ci", "run": cmd}


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


def cpu_job() -> dict:
    """The cpu matrix: GitHub-hosted runners (export/matrix.py refuses others), venv executor."""
    return {
        "name": expr("matrix.id"),
        "needs": "plan",
        "if": "needs.plan.outputs.cpu_count != '0'",
        "runs-on": expr("fromJSON(matrix.runs_on)"),
        "timeout-minutes": TIMEOUT_JOB_MIN,
        "strategy": {"fail-fast": False, "matrix": expr("fromJSON(needs.plan.outputs.cpu)")},
        "steps": [checkout(), setup_python(step_id="python"), *cache_steps(), install(), *run_steps("venv")],
    }


def gpu_job(condition: str | None = None, first_steps: tuple[dict, ...] = (), checkout_ref: str | None = None,
            permissions: dict | None = None) -> dict:
    """The gpu matrix: self-hosted runners, inside the toolchain image (host executor); read-only
    token (`packages: read` pulls the image, `permissions` adds to it)."""
    planned = "needs.plan.outputs.gpu_count != '0'"
    return {
        "name": expr("matrix.id"),
        "needs": "plan",
        "if": f"{planned} && {condition}" if condition else planned,
        "runs-on": expr("fromJSON(matrix.runs_on)"),
        "timeout-minutes": TIMEOUT_JOB_MIN,
        "strategy": {"fail-fast": False, "matrix": expr("fromJSON(needs.plan.outputs.gpu)")},
        "container": {"image": Noted(expr("matrix.image"), IMAGE_NOTE), "options": expr("matrix.container_options"),
                      "credentials": PULL_CREDENTIALS},
        "permissions": {"contents": "read", "packages": Noted("read", "pulls the toolchain image"),
                        **(permissions or {})},
        # said, not guessed from the image: the scripts use bash (heredocs, ${VAR,,})
        "defaults": {"run": {"shell": "bash"}},
        # Inside a toolchain image torch and triton are the pinned ones: install only mha-ci itself.
        "steps": [*first_steps, checkout(ref=checkout_ref), install(no_deps=True), *run_steps("host")],
    }


def gate_command(plan: str = "artifacts/plan/plan.json") -> str:
    return (f'python -m mha_ci.export.gate --plan {plan} --artifacts artifacts '
            '--plan-result "$PLAN_RESULT" --summary "$GITHUB_STEP_SUMMARY"')
