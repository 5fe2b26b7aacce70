"""pr-gpu.yml: a pull request's GPU jobs, on the one commit a maintainer approved by its SHA.

`issue_comment` and `pull_request_target` run the workflow file of the default branch, never the
pull request's, so nothing a fork edits decides what reaches a self-hosted runner:

1. A maintainer with write access comments `/gpu-approve <sha>` (APPROVAL_COMMAND), naming the
   head commit they reviewed. A label would mark the pull request, not a commit: a push landing
   just before it is clicked would run unreviewed code.
2. `plan` (GitHub-hosted, read-only token) runs the default branch's export/approval.py: it
   refuses (red, with the reason) a malformed comment, an author without write access, a closed
   or draft pull request, and a head that moved past the named SHA. Then it plans with the
   default branch's mha-ci and pipelines/ over the approved commit's changed paths and the labels
   the API returned, so the runner labels and images of the GPU matrix come from there too.
3. Each GPU job asks the API, before it checks anything out, that the head is still the approved
   SHA (APPROVAL_CHECK), then checks out that SHA, named by the plan's output, not by the event.
   Its perf verdict takes the gate settings, shapes and baselines of the default branch, checked
   out beside it (`mha-ci run --gate-from`): a pull request cannot loosen the gate it is judged by.
4. A new push (`pull_request_target`, `synchronize`) lands in the approval's concurrency group and
   cancels the approved run in progress; nothing else runs on it. Any other comment gets a group
   of its own and never cancels an approved run.
5. `gate` runs the default branch's export/gate.py over the results and creates the check run
   GPU_CHECK on the approved SHA (the run's own checks are attached to the base branch). A check
   run, not a commit status: branch protection can require it from the GitHub Actions app, which
   a status posted with a personal token cannot satisfy (CI guide, Trust, says what remains).

Jobs that run the pull request's code get `contents: read` (plus `packages: read` to pull the
image) and no secrets, and no credentials persist in a checkout. Nothing here uses
actions/cache: these runs would write the default branch's cache scope. Nor may
the pull request's code come near the token that writes it: every action (checkout, upload) is
handed ACTIONS_RUNTIME_TOKEN, so the GPU job has no `container:` (its actions would run where the
code ran, the actions' own code mounted writable); the code runs in the `docker run` of one step
(export/steps.py, GPU jobs), and the upload follows once that container is gone.
"""
from __future__ import annotations

from mha_ci.export.approval import COMMAND
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

APPROVAL_COMMAND = COMMAND
GPU_CHECK = "mha-ci / gpu"
APPROVED_SHA = "needs.plan.outputs.sha"
PR_NUMBER = "github.event.issue.number"
READS_APPROVAL = Noted("read", "the approval check reads the pull request's head and labels")
TRIGGER_NOTE = ("zizmor: ignore[dangerous-triggers] the point of it: this file comes from the default branch; "
                "the pull request's code runs only at the SHA a maintainer named, read-only token, "
                "no secrets (docs/ci-guide.md, Trust)")
# Only a comment on a pull request whose first word is the command reaches export/approval.py,
# which checks the rest (the author's access, the SHA, the head).
APPROVAL_EVENT = ("github.event_name == 'issue_comment' && github.event.issue.pull_request "
                  f"&& startsWith(github.event.comment.body, '{APPROVAL_COMMAND} ')")

# Standard library only: it runs before any checkout, in the toolchain image on the GPU runner.
# Any failure (network, API, a moved head) fails the step.
APPROVAL_SCRIPT = """import json, os, sys, urllib.request
env = os.environ
url = f"{env['GITHUB_API_URL']}/repos/{env['GITHUB_REPOSITORY']}/pulls/{env['PR_NUMBER']}"
request = urllib.request.Request(url, headers={"Authorization": f"Bearer {env['GH_TOKEN']}",
                                               "Accept": "application/vnd.github+json"})
with urllib.request.urlopen(request, timeout=60) as response:
    pull = json.load(response)
head = pull["head"]["sha"]
if head != env["APPROVED_SHA"] or pull["state"] != "open":
    sys.exit(f"approval withdrawn: {env['APPROVED_SHA']} was approved, the pull request "
             f"({pull['state']}) has moved to {head}; review the new commits and approve the new head")
print(f"approved: the head is still {head}")
"""
APPROVAL_ENV = ("GH_TOKEN", "PR_NUMBER", "APPROVED_SHA", "GITHUB_API_URL", "GITHUB_REPOSITORY")
# The GPU runner's host need not have Python; the pulled image has.
APPROVAL_CHECK_IN_IMAGE = ('docker run --rm -i ' + " ".join(f"--env {name}" for name in APPROVAL_ENV)
                           + f' "$IMAGE" python - <<\'EOF\'\n{APPROVAL_SCRIPT}EOF\n')


def approval_check_step() -> dict:
    env = {"GH_TOKEN": expr("github.token"), "PR_NUMBER": expr(PR_NUMBER),
           "APPROVED_SHA": expr(APPROVED_SHA), "IMAGE": expr("matrix.image")}
    return {"name": "Approval still holds for this commit", "env": env, "run": APPROVAL_CHECK_IN_IMAGE}


def _approve_step() -> dict:
    return {"name": "The comment approves the head commit", "id": "approval",
            "env": {"GH_TOKEN": expr("github.token"), "PR_NUMBER": expr(PR_NUMBER),
                    "COMMENT_BODY": expr("github.event.comment.body"),
                    "COMMENTER": expr("github.event.comment.user.login")},
            "run": "python -m mha_ci.export.approval --event-out approved-event.json\n"}


def _plan_job() -> dict:
    # The default checkout of these events is the default branch: mha-ci and pipelines/ come from
    # there. The approved commit is checked out beside it only to list changed paths.
    changed = ('git -C approved diff --name-only -z "$BASE_SHA"...HEAD > changed.txt\n'
               "tr '\\0' '\\n' < changed.txt\n")
    plan = ('mha-ci plan --github-event approved-event.json --event pull_request '
            '--changed-files changed.txt --format json > plan.json\ncat plan.json\n')
    matrices = (REGISTRY_FROM_REPOSITORY + "mkdir -p gate\n"
                'mha-ci export matrix --plan plan.json --group-plan gpu gate/plan.json >> "$GITHUB_OUTPUT"\n')
    # The merge base: what the pull request's kernel is measured against on the same GPU, and
    # whose gate settings and baselines judge it (mha-ci run --gate-from/--perf-against).
    merge_base = ('base=$(git -C approved merge-base "$BASE_SHA" HEAD) || exit 1\n'
                  'echo "merge base: $base"\n'
                  'echo "sha=$base" >> "$GITHUB_OUTPUT"\n')
    outputs = {name: expr(f"steps.matrix.outputs.{name}") for name in ("gpu", "gpu_count")}
    outputs["sha"] = expr("steps.approval.outputs.sha")
    outputs["merge_base"] = expr("steps.merge_base.outputs.sha")
    return {
        "name": "plan",
        "if": APPROVAL_EVENT,
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT_PLAN_MIN,
        "permissions": {"contents": "read", "pull-requests": READS_APPROVAL},
        "outputs": outputs,
        "steps": [
            checkout(fetch_depth=0),
            setup_python(),
            install(),
            _approve_step(),
            checkout(fetch_depth=0, ref=expr("steps.approval.outputs.sha"), path="approved",
                     name="Check out the approved commit"),
            {"name": "Changed files", "env": {"BASE_SHA": expr("steps.approval.outputs.base_sha")}, "run": changed},
            {"name": "Merge base", "id": "merge_base", "env": {"BASE_SHA": expr("steps.approval.outputs.base_sha")},
             "run": merge_base},
            {"name": "Plan", "run": plan},
            {"name": "Job matrices", "id": "matrix", "run": matrices},
            {"name": "Keep the plan", "uses": UPLOAD, "with": {"name": "plan", "path": "gate/plan.json"}},
        ],
    }


# The check run is created complete: a run cancelled by a new push leaves none, and the new head
# has none until it is approved.
VERDICT = ("set +e\n"
           'if [ "$GPU_COUNT" = "0" ]; then\n'
           '  echo "No GPU job planned for $APPROVED_SHA." | tee -a "$GITHUB_STEP_SUMMARY"\n'
           "  code=0\n"
           "else\n"
           f"  {gate_command()}\n"
           "  code=$?\n"
           "fi\n"
           'if [ "$code" = "0" ]; then conclusion=success; else conclusion=failure; fi\n'
           'gh api --method POST "repos/$GITHUB_REPOSITORY/check-runs" -f name="$CHECK_NAME" '
           '-f head_sha="$APPROVED_SHA" -f status=completed -f conclusion="$conclusion" '
           '-f details_url="$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/actions/runs/$GITHUB_RUN_ID" '
           '-f "output[title]=approved GPU jobs: $conclusion" '
           '-f "output[summary]=GPU jobs of the approved commit $APPROVED_SHA (pr-gpu.yml)" > /dev/null || code=3\n'
           'exit "$code"\n')


def _gate_job() -> dict:
    return {
        "name": "gate",
        "needs": ["plan", "gpu"],
        "if": "always() && needs.plan.outputs.sha != ''",
        "runs-on": HOSTED_RUNNER,
        "timeout-minutes": TIMEOUT_PLAN_MIN,
        "permissions": {"contents": "read", "checks": Noted("write", "the verdict, a check run on the approved commit")},
        "steps": [
            checkout(),
            setup_python(),
            {"name": "Download results", "uses": DOWNLOAD, "with": {"path": "artifacts"}},
            {"name": "Every planned GPU job passed",
             "env": {"PLAN_RESULT": expr("needs.plan.result"), "GPU_COUNT": expr("needs.plan.outputs.gpu_count"),
                     "PYTHONPATH": "src", "GH_TOKEN": expr("github.token"), "APPROVED_SHA": expr(APPROVED_SHA),
                     "CHECK_NAME": GPU_CHECK},
             "run": VERDICT},
        ],
    }


def pr_gpu_workflow() -> dict:
    # One concurrency group per pull request for the events that change the approval (a new
    # approval by someone who may give one, a new push): the newest cancels the run in progress.
    # Any other comment gets a group of its own and does nothing.
    number = "github.event.issue.number || github.event.pull_request.number"
    may_approve = ("contains(fromJSON('[\"OWNER\", \"MEMBER\", \"COLLABORATOR\"]'), "
                   "github.event.comment.author_association)")
    approval_events = (f"github.event_name == 'pull_request_target' || "
                       f"(startsWith(github.event.comment.body, '{APPROVAL_COMMAND} ') && {may_approve})")
    group = f"pr-gpu-{expr(number)}-" + expr(f"({approval_events}) && 'approval' || github.run_id")
    return {
        "name": "pull request gpu",
        "on": {"issue_comment": {"types": ["created"]},
               Noted("pull_request_target", TRIGGER_NOTE): {"types": ["synchronize"]}},
        "permissions": {"contents": "read"},
        "concurrency": {"group": group, "cancel-in-progress": True},
        "jobs": {
            "plan": _plan_job(),
            "gpu": gpu_job("pull_request", before_checkout=(approval_check_step(),), checkout_ref=expr(APPROVED_SHA),
                           permissions={"pull-requests": READS_APPROVAL}, gate_from_base=True,
                           base_ref=expr("needs.plan.outputs.merge_base")),
            "gate": _gate_job(),
        },
    }
