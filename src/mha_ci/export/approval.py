"""The approval of a pull request's GPU jobs: a comment `/gpu-approve <sha>` naming one commit.

A label marks the pull request, not a commit: a push landing just before a maintainer clicks it
would run code nobody read. The comment names the commit the maintainer reviewed, so the approval
holds for that SHA only. pr-gpu.yml's plan job runs `python -m mha_ci.export.approval` (the
default branch's copy) on every such comment; it refuses, with the reason, unless

  - the comment's first line is the command and one full 40-character SHA (a short one could
    name two commits),
  - its author has write access to the repository (admin, maintain or write; the API's
    `permission` field reads maintain as write),
  - the pull request is open, not a draft, and its head is that very SHA (a head that moved past
    it is new, unreviewed code).

On success it writes `sha` and `base_sha` to $GITHUB_OUTPUT and the pull request, as the API returned
it, to the file --event-out in the shape of a pull_request event, for `mha-ci plan --github-event`
(labels, base branch and draft state as of the check). Standard library only.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.request
from pathlib import Path

COMMAND = "/gpu-approve"
WRITE_ACCESS = frozenset({"admin", "write"})
_SHA = re.compile(r"[0-9a-f]{40}")


class Refused(Exception):
    """The comment does not approve anything; the message says why."""


def named_sha(body: str) -> str:
    first = (body.strip().splitlines() or [""])[0].split()
    if len(first) != 2 or first[0] != COMMAND or not _SHA.fullmatch(first[1].lower()):
        raise Refused(f"not an approval: the first line must be `{COMMAND} <sha>` with the full 40-character SHA "
                      "of the head commit you reviewed")
    return first[1].lower()


def check(sha: str, commenter: str, permission: str, pull: dict) -> None:
    """Raises Refused unless `commenter` (with `permission`) may approve `sha` of `pull` now."""
    if permission not in WRITE_ACCESS:
        raise Refused(f"{commenter} has {permission!r} access: approving GPU jobs needs write access")
    if pull.get("state") != "open":
        raise Refused(f"the pull request is {pull.get('state')!r}, not open")
    if pull.get("draft") is not False:
        raise Refused("the pull request is a draft: mark it ready for review, then approve its head")
    head = (pull.get("head") or {}).get("sha")
    if head != sha:
        raise Refused(f"the head moved past the approved commit: {commenter} approved {sha}, the head is now "
                      f"{head}; review the new commits and approve the new head")


def _get(api: str, path: str, token: str) -> dict:
    request = urllib.request.Request(f"{api}/{path}", headers={"Authorization": f"Bearer {token}",
                                                               "Accept": "application/vnd.github+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            found = json.load(response)
    except OSError as exc:             # HTTPError (404: no such user or pull request), URLError, timeout
        raise Refused(f"cannot read {path} from the GitHub API: {exc}") from None
    except ValueError:
        raise Refused(f"the GitHub API's answer for {path} is not JSON") from None
    if not isinstance(found, dict):
        raise Refused(f"unexpected answer from {path}")
    return found


def approve(env: dict[str, str], event_out: Path) -> dict:
    """The approved pull request, as the API returned it; raises Refused. `env`: the step's environment (export/approved_gpu.py)."""
    sha = named_sha(env["COMMENT_BODY"])
    api, repository, token = env["GITHUB_API_URL"], env["GITHUB_REPOSITORY"], env["GH_TOKEN"]
    commenter, number = env["COMMENTER"], env["PR_NUMBER"]
    permission = _get(api, f"repos/{repository}/collaborators/{commenter}/permission", token).get("permission")
    pull = _get(api, f"repos/{repository}/pulls/{number}", token)
    check(sha, commenter, str(permission), pull)
    event_out.write_text(json.dumps({"pull_request": pull}))
    return pull


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_ci.export.approval", description=__doc__.splitlines()[0])
    parser.add_argument("--event-out", type=Path, required=True, help="write the approved pull request here")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    try:
        pull = approve(env, args.event_out)
    except Refused as exc:
        print(f"::error::GPU jobs not approved: {exc}", file=sys.stderr)
        if env.get("GITHUB_STEP_SUMMARY"):
            with open(env["GITHUB_STEP_SUMMARY"], "a") as handle:
                handle.write(f"GPU jobs not approved: {exc}\n")
        return 1
    if env.get("GITHUB_OUTPUT"):
        with open(env["GITHUB_OUTPUT"], "a") as handle:
            handle.write(f"sha={pull['head']['sha']}\nbase_sha={pull['base']['sha']}\n")
    print(f"approved: {pull['head']['sha']} by {env['COMMENTER']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
