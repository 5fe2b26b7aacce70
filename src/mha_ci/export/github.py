"""The GitHub Actions workflows, generated from pipelines/ (`mha-ci export github`).

Five workflows. Trust model (docs/ci-guide.md, "Trust"): a pull request's own code runs only on
GitHub-hosted runners; the self-hosted GPU runners run only workflow definitions of the default
branch, on commits the default branch holds or a maintainer approved.

- pr.yml (`pull_request`): every pull request, forks included. `plan` asks `mha-ci plan` (labels
  and changed paths decide), the CPU jobs run on GitHub-hosted runners (export/matrix.py refuses
  anything else for `device: none`), and `gate` fails unless every planned CPU job left a passing
  result (export/gate.py). The planned GPU jobs are only named: this workflow, the pull request's
  own file, must never reach a GPU runner.
- pr-gpu.yml (`pull_request_target`, so GitHub takes it from the default branch, never from the
  pull request; `issue_comment` too): the GPU jobs of a pull request, after a maintainer with
  write access comments `/gpu-approve <sha>` naming the head commit they reviewed. The plan is made
  by the default branch's mha-ci and pipelines/ over the pull request's changed paths; the GPU jobs
  check out exactly that SHA, and judge perf by the default branch's gate settings and baselines
  (`mha-ci run --gate-from`); a new push (`synchronize`) cancels the run, and every GPU job first
  asks the API that the head is still that SHA. Read-only token, no secrets, no persisted
  credentials; the code under test runs in a `docker run` of its own, never beside an action
  (every action holds the token that writes the cache). A `pull_request_target` run is attached to the base branch, not to the pull
  request's head, so its `gate` creates the verdict as a check run (GPU_CHECK) on the
  approved SHA: that is the check branch protection requires.
- main.yml: pushes to main and manual dispatch: plan, cpu, gpu, gate; jobs.yaml's `push` and
  `manual` events say what runs. The GPU jobs run only when the ref is the default branch.
- images.yml: builds the toolchain images (export/images_workflow.py); publishes them only from
  the default branch.
- nightly.yml: one refresh job per arch jobs.yaml gives the `refresh` kind; each re-measures its
  arch and opens a pull request with the new baselines (mha_ci.refresh), then uploads each
  toolchain's `mha-ci perf history` pages as an artifact. Default branch only.

Safe by construction (tests/mha_ci/export/test_github.py and
tests/mha_ci/fault_injection/test_workflow_trust.py check each point on the output; zizmor and
actionlint run in `make lint`):
- workflow-wide `permissions: contents: read`; a job that needs more says so, with the reason as
  a comment on the line;
- no `${{ }}` expression inside any `run:` script: values reach the shell through `env:`, so a
  branch name or label cannot inject shell code;
- actions pinned to a full commit SHA (a tag can be moved to other code), with the release in
  a comment; checkout never persists credentials: the one step that pushes gets the token itself;
- the plan jobs run `mha-ci export github --check`, so a stale workflow fails CI (a fork can
  edit that step too: the default branch's workflows are the guard, not this check).

The CPU jobs keep the venv executor's cache (~/.cache/mha-ci, the runner's) between runs, in two
cache entries with their own keys, so a kernel change still reuses the toolchain env:
- venvs/: per toolchain, keyed by its lock file and the Python that built it (a venv names its
  interpreter's path). No restore-keys: an environment of other pins is never used (its folder
  name is the lock's digest), so restoring one would only cost the download;
- checksums/ (the compile cache; checksums jobs only): keyed by the job id (toolchain and shard:
  each shard compiles its own slice of the variants), the lock file and src/mha/**, restore-keys
  down to the job id, because each entry carries its own full key (sources, config, variant,
  toolchain), so an older cache is safe and its untouched entries still hit.
Every workflow only restores them (actions/cache/restore); main.yml saves them (actions/cache/save)
on a push to the default branch, so the entries a pull request restores were written by the
default branch's code, never by another pull request's (nor by its own earlier push). The
payloads check what they restore all the same (mha_ci.executors.venv, mha_ci.checksums.cache).
pr-gpu.yml uses no cache: a `pull_request_target` run writes the default branch's cache scope.
GPU jobs (main.yml and pr-gpu.yml alike, export/steps.py) run the job's command in `docker run`
of the toolchain image from one step, and upload from the runner once that container is removed.
The output is deterministic (pipelines/ order, fixed key order), so `--check` can compare text.
"""
from __future__ import annotations

import difflib
import shlex
from dataclasses import dataclass
from pathlib import Path

from mha_ci.errors import ConfigError
from mha_ci.export import yaml_text
from mha_ci.export.approved_gpu import APPROVAL_COMMAND, pr_gpu_workflow
from mha_ci.export.images_workflow import REGISTRY_FROM_REPOSITORY, images_workflow
from mha_ci.export.matrix import check_hosted
from mha_ci.export.steps import (
    ACTION_RELEASES,
    HOSTED_RUNNER,
    ON_DEFAULT_BRANCH,
    TIMEOUT_PLAN_MIN,
    DOWNLOAD,
    UPLOAD,
    checkout,
    cpu_job,
    expr,
    gate_command,
    gpu_job,
    install,
    setup_python,
)
from mha_ci.export.yaml_text import Noted
from mha_ci.model.pipeline import Pipeline
from mha_ci.perf.history import artifact_name

WORKFLOWS_DIR = Path(".github/workflows")
ACTIONLINT_CONFIG = Path(".github/actionlint.yaml")
HEADER = ("# Generated by `mha-ci export github` from pipelines/. Do not edit: change pipelines/ and\n"
          "# regenerate (`mha-ci export github`); CI runs `mha-ci export github --check`.\n")
# Nightly at 02:17 UTC: off the hour, when GitHub's scheduler is least crowded, and early enough
# that the refresh pull requests are there when people start work in Europe and the US.
NIGHTLY_CRON = "17 2 * * *"
# Labels GitHub and actionlint know by themselves; the rest of a self-hosted runner's labels are
# declared in .github/actionlint.yaml.
BUILTIN_LABELS = frozenset({"self-hosted", "linux", "windows", "macos", "x64", "arm", "arm64"})
TIMEOUT_REFRESH_MIN = 360
SCHEDULED_GPU_NOTE = ("zizmor: ignore[self-hosted-runner] default branch only (job condition and the runner "
                      "group's workflow allow-list), no pull request's code (docs/ci-guide.md, Trust)")


@dataclass(frozen=True)
class GeneratedFile:
    path: Path          # relative to the checkout root
    text: str


# -- pr.yml and main.yml ---------------------------------------------------------------------

def plan_job(steps: list[dict], outputs: tuple[str, ...], condition: str | None = None,
             permissions: dict | None = None) -> dict:
    job: dict = {"name": "plan"}
    if condition:
        job["if"] = condition
    job.update({"runs-on": HOSTED_RUNNER, "timeout-minutes": TIMEOUT_PLAN_MIN})
    if permissions:
        job["permissions"] = permissions
    job["outputs"] = {name: expr(f"steps.matrix.outputs.{name}") for name in outputs}
    job["steps"] = steps
    return job


def _plan_steps(plan_command: str, env: dict, changed_files_step: dict | None, group: str | None) -> list[dict]:
    """Check out, plan, job matrices; `group`: the gate of this workflow checks that matrix only."""
    steps = [checkout(fetch_depth=0), setup_python(), install(),
             {"name": "Generated workflows are current", "run": "mha-ci export github --check"}]
    if changed_files_step:
        steps.append(changed_files_step)
    matrices = 'mha-ci export matrix --plan plan.json'
    if group:
        matrices += f" --group-plan {group} gate/plan.json"
    steps += [
        {"name": "Plan", **({"env": env} if env else {}), "run": plan_command + "\ncat plan.json\n"},
        # the GPU entries name images of this repository's registry (export/images_workflow.py)
        {"name": "Job matrices", "id": "matrix",
         "run": REGISTRY_FROM_REPOSITORY + ("mkdir -p gate\n" if group else "") + matrices + ' >> "$GITHUB_OUTPUT"\n'},
        {"name": "Keep the plan", "uses": UPLOAD,
         "with": {"name": "plan", "path": "gate/plan.json" if group else "plan.json"}},
    ]
    return steps


def gate_job(needs: list[str]) -> dict:
    return {
        "name": "gate",
        "needs": needs,
        "if": "always()",
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT_PLAN_MIN,
        "steps": [
            checkout(),
            setup_python(),
            {"name": "Download results", "uses": DOWNLOAD, "with": {"path": "artifacts"}},
            {"name": "Every planned job passed", "env": {"PLAN_RESULT": expr("needs.plan.result"), "PYTHONPATH": "src"},
             "run": gate_command() + "\n"},
        ],
    }


def pr_workflow(pipeline: Pipeline) -> dict:
    """The pull request's own workflow: whatever it says, a fork can edit, so it holds no GPU job."""
    # Every label event re-plans, CI label or not: it lands in the same concurrency group and
    # cancels the run in progress, so a replacement that planned nothing would leave the gate green.
    condition = "github.event.pull_request.draft == false"
    # NUL-separated, unquoted: `--name-only` alone quotes non-ASCII paths ("caf\303\251.md").
    changed = {"name": "Changed files", "env": {"BASE_SHA": expr("github.event.pull_request.base.sha")},
               "run": ('git diff --name-only -z "$BASE_SHA"...HEAD > changed.txt\n'
                       "tr '\\0' '\\n' < changed.txt\n")}
    plan_cmd = ('mha-ci plan --github-event "$GITHUB_EVENT_PATH" --event pull_request '
                '--changed-files changed.txt --format json > plan.json')
    steps = _plan_steps(plan_cmd, {}, changed, group="cpu")
    steps.insert(-1, {
        "name": "GPU jobs wait for approval",
        "env": {"GPU_COUNT": expr("steps.matrix.outputs.gpu_count")},
        "run": ('if [ "$GPU_COUNT" != "0" ]; then\n'
                f'  echo "$GPU_COUNT GPU jobs planned: they run in pr-gpu.yml once a maintainer comments '
                f'{APPROVAL_COMMAND} <sha> naming the head commit (docs/ci-guide.md, Trust)" | tee -a "$GITHUB_STEP_SUMMARY"\n'
                "fi\n")})
    return {
        "name": "pull request",
        "on": {"pull_request": {"types": ["opened", "synchronize", "reopened", "ready_for_review", "labeled"]}},
        "permissions": {"contents": "read"},
        "concurrency": {"group": "pr-${{ github.event.pull_request.number }}", "cancel-in-progress": True},
        "jobs": {
            "plan": plan_job(steps, ("cpu", "cpu_count", "gpu_count"), condition),
            "cpu": cpu_job(save_caches=False),
            "gate": gate_job(["plan", "cpu"]),
        },
    }


def main_workflow(pipeline: Pipeline) -> dict:
    branches = list(pipeline.events["push"].branches or ["main"])
    # GITHUB_EVENT_NAME is push or workflow_dispatch; mha-ci plan maps workflow_dispatch to manual.
    plan_cmd = ('mha-ci plan --github-event "$GITHUB_EVENT_PATH" --event "$GITHUB_EVENT_NAME" '
                '--labels "$LABELS" --format json > plan.json')
    env = {"LABELS": "${{ inputs.labels }}"}
    return {
        "name": "main",
        "on": {
            "push": {"branches": branches},
            "workflow_dispatch": {"inputs": {"labels": {
                "description": f"comma-separated {pipeline.triggers.label_prefix} labels; empty runs what a push runs",
                "required": False, "default": "", "type": "string"}}},
        },
        "permissions": {"contents": "read"},
        # Every commit on main keeps its own run (a regression is pinned to one commit).
        "concurrency": {"group": "main-${{ github.sha }}", "cancel-in-progress": False},
        "jobs": {
            "plan": plan_job(_plan_steps(plan_cmd, env, None, group=None), ("cpu", "cpu_count", "gpu", "gpu_count")),
            "cpu": cpu_job(save_caches=True),
            # A dispatch on another branch runs that branch's copy of this file: no GPU for it
            # (the gate then names the GPU jobs as missing).
            "gpu": gpu_job("push", ON_DEFAULT_BRANCH),
            "gate": gate_job(["plan", "cpu", "gpu"]),
        },
    }


# -- nightly.yml -----------------------------------------------------------------------------

def _refresh_job(pipeline: Pipeline, arch_name: str) -> dict:
    arch = pipeline.archs[arch_name]
    refresh = ("set +e\n"
               'mha-ci perf refresh --arch "$ARCH" --executor docker --out out\n'
               "code=$?\n"
               'if [ -f out/pr-body.md ]; then cat out/pr-body.md >> "$GITHUB_STEP_SUMMARY"; fi\n'
               'exit "$code"\n')
    # The branch was committed in a throw-away worktree (mha_ci.refresh); push it and open the PR.
    # The checkout kept no token: this step alone gets it, through gh as git's credential helper
    # for this one command (nothing written to a git config a later step or job could read).
    open_pr = ("branch=\"$(python -c 'import json; print(json.load(open(\"out/refresh.json\"))[\"branch\"] or \"\")')\"\n"
               'if [ -z "$branch" ]; then echo "baselines unchanged: no pull request"; exit 0; fi\n'
               'git -c credential.helper= -c "credential.helper=!gh auth git-credential" '
               'push origin "refs/heads/$branch:refs/heads/$branch"\n'
               'gh pr create --base "$BASE_BRANCH" --head "$branch" --title "$(cat out/pr-title.txt)" --body-file out/pr-body.md\n')
    # The history pages read the baselines' git history (hence fetch-depth 0), through tonight's
    # refresh branch when there is one, so tonight's point is on them.
    history = ("rev=HEAD\n"
               "if [ -f out/refresh.json ]; then\n"
               "  branch=\"$(python -c 'import json; print(json.load(open(\"out/refresh.json\"))[\"branch\"] or \"\")')\"\n"
               '  if [ -n "$branch" ]; then rev="$branch"; fi\n'
               "fi\n"
               "code=0\n"
               f"for toolchain in {' '.join(shlex.quote(t) for t in pipeline.toolchains)}; do\n"
               '  if ! git cat-file -e "$rev:perf_baselines/$ARCH/$toolchain.json" 2>/dev/null; then\n'
               '    echo "no $ARCH $toolchain baseline yet: no history"; continue\n'
               "  fi\n"
               '  mha-ci perf history --arch "$ARCH" --toolchain "$toolchain" --rev "$rev" '
               '--out "perf-history/$toolchain" > /dev/null || code=$?\n'
               '  if [ -f "perf-history/$toolchain/history.md" ]; then '
               'cat "perf-history/$toolchain/history.md" >> "$GITHUB_STEP_SUMMARY"; fi\n'
               "done\n"
               'exit "$code"\n')
    return {
        "name": f"refresh {arch_name}",
        "if": ON_DEFAULT_BRANCH,
        Noted("runs-on", SCHEDULED_GPU_NOTE): list(arch.runner_labels),
        "timeout-minutes": TIMEOUT_REFRESH_MIN,
        "permissions": {"contents": Noted("write", "pushes the refresh branch (that step alone gets the token)"),
                        "pull-requests": Noted("write", "opens the refresh pull request")},
        "steps": [
            checkout(fetch_depth=0),
            setup_python(),
            {"name": "Install mha-ci", "run": "python -m pip install -e '.[docker]'"},
            {"name": "Refresh baselines", "env": {"ARCH": arch_name}, "run": refresh},
            {"name": "Open pull request",
             "env": {"GH_TOKEN": "${{ github.token }}", "BASE_BRANCH": "${{ github.ref_name }}"},
             "run": open_pr},
            {"name": "Upload refresh report", "if": "always()", "uses": UPLOAD,
             "with": {"name": f"refresh-{arch_name}", "path": "out/", "if-no-files-found": "warn"}},
            {"name": "Perf history", "if": "always()", "env": {"ARCH": arch_name}, "run": history},
            {"name": "Upload perf history", "if": "always()", "uses": UPLOAD,
             "with": {"name": artifact_name(arch_name), "path": "perf-history/", "if-no-files-found": "warn"}},
        ],
    }


def _golden_job(pipeline: Pipeline, arch_name: str, golden: str, top: str) -> dict:
    """Golden vs top of tree on one GPU, the two toolchains' payloads taking turns shape by shape
    (mha_ci.perf.lockstep). A study, not a gate: regressions between toolchains are its findings
    (the step summary shows them); only a usage or environment error (exit 2, 3) fails the job."""
    arch = pipeline.archs[arch_name]
    measure = ("set +e\n"
               'mha-ci perf measure --arch "$ARCH" --subset full --toolchain "$GOLDEN" --interleave "$TOP" --executor docker --out out\n'
               "code=$?\n"
               'for report in out/*/compare.md; do if [ -f "$report" ]; then cat "$report" >> "$GITHUB_STEP_SUMMARY"; fi; done\n'
               'if [ "$code" -gt 1 ]; then exit "$code"; fi\n')
    return {
        "name": f"golden vs top of tree {arch_name}",
        "if": ON_DEFAULT_BRANCH,
        Noted("runs-on", SCHEDULED_GPU_NOTE): list(arch.runner_labels),
        "timeout-minutes": TIMEOUT_REFRESH_MIN,
        "steps": [
            checkout(),
            setup_python(),
            {"name": "Install mha-ci", "run": "python -m pip install -e '.[docker]'"},
            {"name": f"Measure {golden} and {top} interleaved",
             "env": {"ARCH": arch_name, "GOLDEN": golden, "TOP": top}, "run": measure},
            {"name": "Upload report", "if": "always()", "uses": UPLOAD,
             "with": {"name": f"golden-vs-tot-{arch_name}", "path": "out/", "if-no-files-found": "warn"}},
        ],
    }


def _nightly_check_label(pipeline: Pipeline) -> str | None:
    """The label that selects exactly the scheduled kinds other than refresh (memcheck): the nightly
    plans its GPU checks through it, so they are what a pull request with that label runs. None
    when the schedule runs nothing but refresh; ConfigError when no label selects them alone."""
    scheduled = {kind for run in pipeline.events["schedule"].runs for kind in run.kinds} - {"refresh"}
    if not scheduled:
        return None
    for rule in pipeline.triggers.labels:
        if set(rule.selection.kinds) == scheduled and rule.selection.every_arch:
            return rule.label
    raise ConfigError(f"jobs.yaml schedules {', '.join(sorted(scheduled))}, which the nightly workflow plans through a "
                      "label of triggers.yaml selecting exactly those kinds on all archs; none does")


def nightly_workflow(pipeline: Pipeline) -> dict:
    archs = [a for a in pipeline.kinds["refresh"].archs if pipeline.archs[a].device != "none"]
    jobs = {f"refresh-{arch}".replace(".", "_"): _refresh_job(pipeline, arch) for arch in archs}
    golden, top = pipeline.toolchain_with_role("golden"), pipeline.toolchain_with_role("top-of-tree")
    if golden and top:
        # One study per GPU arch, on that arch's runners, beside its refresh.
        jobs.update({f"golden-vs-tot-{arch}".replace(".", "_"): _golden_job(pipeline, arch, golden, top)
                     for arch in archs})
    label = _nightly_check_label(pipeline)
    if label:
        plan_cmd = f"mha-ci plan --event manual --labels {shlex.quote(label)} --format json > plan.json"
        jobs["plan"] = plan_job(_plan_steps(plan_cmd, {}, None, group=None), ("cpu", "cpu_count", "gpu", "gpu_count"),
                                ON_DEFAULT_BRANCH)
        jobs["gpu"] = gpu_job("manual", ON_DEFAULT_BRANCH)
        jobs["gate"] = gate_job(["plan", "gpu"])
    return {
        "name": "nightly baseline refresh",
        "on": {"schedule": [{"cron": NIGHTLY_CRON}], "workflow_dispatch": {}},
        "permissions": {"contents": "read"},
        "concurrency": {"group": "nightly-refresh", "cancel-in-progress": False},
        "jobs": jobs,
    }


def actionlint_config(pipeline: Pipeline) -> dict:
    labels = sorted({label for arch in pipeline.archs.values() if "self-hosted" in arch.runner_labels
                     for label in arch.runner_labels if label not in BUILTIN_LABELS})
    return {"self-hosted-runner": {"labels": labels}}


def generate(pipeline: Pipeline) -> list[GeneratedFile]:
    """Every file `mha-ci export github` owns, in a fixed order. Refuses (exit 2) a pipeline whose
    CPU jobs would leave GitHub-hosted runners (export/matrix.py)."""
    check_hosted(pipeline)
    return [
        GeneratedFile(WORKFLOWS_DIR / "pr.yml", _workflow_text(pr_workflow(pipeline))),
        GeneratedFile(WORKFLOWS_DIR / "pr-gpu.yml", _workflow_text(pr_gpu_workflow())),
        GeneratedFile(WORKFLOWS_DIR / "main.yml", _workflow_text(main_workflow(pipeline))),
        GeneratedFile(WORKFLOWS_DIR / "nightly.yml", _workflow_text(nightly_workflow(pipeline))),
        GeneratedFile(WORKFLOWS_DIR / "images.yml",
                      _workflow_text(images_workflow(pipeline))),
        GeneratedFile(ACTIONLINT_CONFIG, yaml_text.dump(actionlint_config(pipeline), HEADER)),
    ]


def _workflow_text(workflow: dict) -> str:
    """The YAML, with the release of every SHA-pinned action as a comment on its line."""
    text = yaml_text.dump(workflow, HEADER)
    for action, release in ACTION_RELEASES.items():
        text = text.replace(f"uses: {action}\n", f"uses: {action}  # {release}\n")
    return text


# -- writing and checking --------------------------------------------------------------------

def write(files: list[GeneratedFile], out_root: Path) -> list[Path]:
    written = []
    for generated in files:
        target = Path(out_root) / generated.path
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(generated.text)
        tmp.replace(target)          # atomic: a reader never sees half a workflow
        written.append(target)
    return written


def stale(files: list[GeneratedFile], out_root: Path) -> str:
    """A unified diff of committed vs generated, empty when they agree. Also reports workflow
    files in .github/workflows/ that the generator does not produce (a hand-written workflow
    would escape every rule above)."""
    chunks: list[str] = []
    produced = {g.path for g in files}
    for generated in files:
        target = Path(out_root) / generated.path
        current = target.read_text() if target.is_file() else ""
        if current != generated.text:
            chunks.extend(difflib.unified_diff(current.splitlines(keepends=True), generated.text.splitlines(keepends=True),
                                               fromfile=f"{generated.path} (committed)",
                                               tofile=f"{generated.path} (from pipelines/)"))
    workflows = Path(out_root) / WORKFLOWS_DIR
    if workflows.is_dir():
        for extra in sorted(workflows.iterdir()):
            if extra.suffix in (".yml", ".yaml") and extra.relative_to(out_root) not in produced:
                chunks.append(f"{extra.relative_to(out_root)}: not generated from pipelines/ (remove it or generate it)\n")
    return "".join(chunks)
