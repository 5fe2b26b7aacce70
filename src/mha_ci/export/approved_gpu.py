"""pr-gpu.yml: a pull request's GPU jobs, on the head commit a maintainer approved.

`pull_request_target` runs the workflow file of the default branch, never the pull request's,
so nothing a fork edits decides what reaches a self-hosted runner:

1. A maintainer adds APPROVAL_LABEL. The label event carries the pull request's head SHA at that
   moment: that SHA, and nothing else, is what the GPU jobs check out.
2. `plan` (GitHub-hosted, read-only token) runs the default branch's mha-ci and pipelines/ over
   the approved commit's changed paths and the pull request's labels. The runner labels and
   images of the GPU matrix therefore come from the default branch too.
3. Each GPU job asks the API, before it checks anything out, that the pull request's head is
   still the approved SHA and still carries the label (APPROVAL_CHECK), then runs that SHA. Its
   perf verdict takes the gate settings, shapes and baselines of the default branch, checked out
   beside it (`mha-ci run --gate-from`): a pull request cannot loosen the gate it is judged by,
   and the verdict names what it changes there.
4. A new push (`synchronize`) removes the label (`revoke`) and, in the same concurrency group,
   cancels the approved run in progress; removing the label by hand cancels it too. Other label
   events get a group of their own, so adding `ci:perf` never cancels an approved run.
5. `gate` runs the default branch's export/gate.py over the results and posts the verdict as the
   commit status GPU_STATUS on the approved SHA. A `pull_request_target` run's own checks are
   attached to the base branch, so this status is what branch protection can require; a new push
   has none until it is approved again.

Jobs that run the pull request's code get `contents: read` (plus `packages: read` to pull the
image) and no secrets, and no credentials persist in a checkout. Nothing here uses
actions/cache: a `pull_request_target` run would write the default branch's cache scope. Nor may
the pull request's code come near the token that writes it: every action (checkout, upload) is
handed ACTIONS_RUNTIME_TOKEN, so the GPU job has no `container:` (its actions would run where the
code ran, the actions' own code mounted writable); the code runs in the `docker run` of one step
(export/steps.py, GPU jobs), and the upload follows once that container is gone.
"""
from __future__ import annotations

from mha_ci.export.images_workflow import REGISTRY_FROM_REPOSITORY
from mha_ci.export.yaml_text import Noted
from mha_ci.export.steps import (
    DOWNLOAD,
    HOSTED_RUNNER,
    TIMEOUT_PLAN_MIN,
    UPLOAD,
    checkout,
    expr,
    gate_command,
    gpu_job,
    install,
    setup_python,
)

# Not `ci:`-prefixed: `mha-ci plan` reads ci: labels as job selections, and this one selects
# nothing; it approves one commit for the GPU runners.
APPROVAL_LABEL = "gpu-approved"
GPU_STATUS = "mha-ci / gpu"
APPROVED_SHA = "github.event.pull_request.head.sha"
READS_APPROVAL = Noted("read", "the approval check reads the pull request's head and labels")
TRIGGER_NOTE = ("zizmor: ignore[dangerous-triggers] the point of it: this file comes from the default branch; "
                "the pull request's code runs only at the SHA a maintainer labelled, read-only token, "
                "no secrets (docs/ci-guide.md, Trust)")
APPROVAL_EVENT = f"github.event.action == 'labeled' && github.event.label.name == '{APPROVAL_LABEL}'"

# Standard library only: it runs on the hosted plan runner and, before any checkout, in the
# toolchain image on the GPU runner. Any failure (network, API, a changed head) fails the step.
APPROVAL_SCRIPT = """import json, os, sys, urllib.request
env = os.environ
url = f"{env['GITHUB_API_URL']}/repos/{env['GITHUB_REPOSITORY']}/pulls/{env['PR_NUMBER']}"
request = urllib.request.Request(url, headers={"Authorization": f"Bearer {env['GH_TOKEN']}",
                                               "Accept": "application/vnd.github+json"})
with urllib.request.urlopen(request, timeout=60) as response:
    pull = json.load(response)
head, labels = pull["head"]["sha"], [label["name"] for label in pull["labels"]]
if head != env["APPROVED_SHA"] or env["APPROVAL_LABEL"] not in labels:
    sys.exit(f"approval withdrawn: {env['APPROVAL_LABEL']} was given to {env['APPROVED_SHA']}, "
             f"the pull request's head is now {head} with labels {labels}")
print(f"approved: {head} carries {env['APPROVAL_LABEL']}")
"""
APPROVAL_ENV = ("GH_TOKEN", "PR_NUMBER", "APPROVED_SHA", "APPROVAL_LABEL", "GITHUB_API_URL", "GITHUB_REPOSITORY")
APPROVAL_CHECK = f"python - <<'EOF'\n{APPROVAL_SCRIPT}EOF\n"
# The GPU runner's host need not have Python; the pulled image has.
APPROVAL_CHECK_IN_IMAGE = ('docker run --rm -i ' + " ".join(f"--env {name}" for name in APPROVAL_ENV)
                           + f' "$IMAGE" python - <<\'EOF\'\n{APPROVAL_SCRIPT}EOF\n')


def approval_check_step(in_image: bool = False) -> dict:
    env = {"GH_TOKEN": expr("github.token"), "PR_NUMBER": expr("github.event.pull_request.number"),
           "APPROVED_SHA": expr(APPROVED_SHA), "APPROVAL_LABEL": APPROVAL_LABEL}
    if in_image:
        env["IMAGE"] = expr("matrix.image")
    return {"name": "Approval still holds for this commit", "env": env,
            "run": APPROVAL_CHECK_IN_IMAGE if in_image else APPROVAL_CHECK}


def _revoke_job() -> dict:
    on_push = f"contains(github.event.pull_request.labels.*.name, '{APPROVAL_LABEL}')"
    return {
        "name": "a new push withdraws the approval",
        "if": f"github.event.action == 'synchronize' && {on_push}",
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT_PLAN_MIN,
        "permissions": {"pull-requests": Noted("write", "removes the approval label")},
        "steps": [{"name": f"Remove {APPROVAL_LABEL}",
                   "env": {"GH_TOKEN": expr("github.token"), "PR_NUMBER": expr("github.event.pull_request.number"),
                           "APPROVAL_LABEL": APPROVAL_LABEL},
                   "run": 'gh api --method DELETE "repos/$GITHUB_REPOSITORY/issues/$PR_NUMBER/labels/$APPROVAL_LABEL"\n'}],
    }


def _plan_job() -> dict:
    # The default checkout of pull_request_target is the default branch: mha-ci and pipelines/
    # come from there. The approved commit is checked out beside it only to list changed paths.
    changed = ('git -C approved diff --name-only -z "$BASE_SHA"...HEAD > changed.txt\n'
               "tr '\\0' '\\n' < changed.txt\n")
    plan = ('mha-ci plan --github-event "$GITHUB_EVENT_PATH" --event pull_request '
            '--changed-files changed.txt --format json > plan.json\ncat plan.json\n')
    matrices = (REGISTRY_FROM_REPOSITORY + "mkdir -p gate\n"
                'mha-ci export matrix --plan plan.json --group-plan gpu gate/plan.json >> "$GITHUB_OUTPUT"\n')
    return {
        "name": "plan",
        "if": f"{APPROVAL_EVENT} && github.event.pull_request.draft == false",
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT_PLAN_MIN,
        "permissions": {"contents": "read", "pull-requests": READS_APPROVAL},
        "outputs": {name: expr(f"steps.matrix.outputs.{name}") for name in ("gpu", "gpu_count")},
        "steps": [
            checkout(fetch_depth=0),
            setup_python(),
            install(),
            approval_check_step(),
            checkout(fetch_depth=0, ref=expr(APPROVED_SHA), path="approved", name="Check out the approved commit"),
            {"name": "Changed files", "env": {"BASE_SHA": expr("github.event.pull_request.base.sha")}, "run": changed},
            {"name": "Plan", "run": plan},
            {"name": "Job matrices", "id": "matrix", "run": matrices},
            {"name": "Keep the plan", "uses": UPLOAD, "with": {"name": "plan", "path": "gate/plan.json"}},
        ],
    }


def _gate_job() -> dict:
    verdict = ("set +e\n"
               'if [ "$GPU_COUNT" = "0" ]; then\n'
               '  echo "No GPU job planned for $APPROVED_SHA." | tee -a "$GITHUB_STEP_SUMMARY"\n'
               "  code=0\n"
               "else\n"
               f"  {gate_command()}\n"
               "  code=$?\n"
               "fi\n"
               'if [ "$code" = "0" ]; then state=success; else state=failure; fi\n'
               'gh api --method POST "repos/$GITHUB_REPOSITORY/statuses/$APPROVED_SHA" -f state="$state" '
               '-f context="$CONTEXT" -f description="approved GPU jobs: $state" '
               '-f target_url="$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/actions/runs/$GITHUB_RUN_ID" || code=3\n'
               'exit "$code"\n')
    return {
        "name": "gate",
        "needs": ["plan", "gpu"],
        "if": "always() && needs.plan.result != 'skipped'",
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT_PLAN_MIN,
        "permissions": {"contents": "read", "statuses": Noted("write", "posts the verdict on the approved commit")},
        "steps": [
            checkout(),
            setup_python(),
            {"name": "Download results", "uses": DOWNLOAD, "with": {"path": "artifacts"}},
            {"name": "Every planned GPU job passed",
             "env": {"PLAN_RESULT": expr("needs.plan.result"), "GPU_COUNT": expr("needs.plan.outputs.gpu_count"),
                     "PYTHONPATH": "src", "GH_TOKEN": expr("github.token"), "APPROVED_SHA": expr(APPROVED_SHA),
                     "CONTEXT": GPU_STATUS},
             "run": verdict},
        ],
    }


def pr_gpu_workflow() -> dict:
    # One concurrency group per pull request for the events that change the approval (the label
    # added or removed, a new push): the newest cancels the run in progress. Any other label
    # event gets a group of its own and does nothing.
    approval_events = f"github.event.action == 'synchronize' || github.event.label.name == '{APPROVAL_LABEL}'"
    group = ("pr-gpu-${{ github.event.pull_request.number }}-"
             + expr(f"({approval_events}) && 'approval' || github.run_id"))
    return {
        "name": "pull request gpu",
        "on": {Noted("pull_request_target", TRIGGER_NOTE): {"types": ["labeled", "unlabeled", "synchronize"]}},
        "permissions": {"contents": "read"},
        "concurrency": {"group": group, "cancel-in-progress": True},
        "jobs": {
            "revoke": _revoke_job(),
            "plan": _plan_job(),
            "gpu": gpu_job(before_checkout=(approval_check_step(in_image=True),), checkout_ref=expr(APPROVED_SHA),
                           permissions={"pull-requests": READS_APPROVAL}, gate_from_base=True),
            "gate": _gate_job(),
        },
    }
