"""The changed paths of a local checkout, from git, for `mha-ci plan` / `mha-ci run` (and so
`make ci`) when the command line names none (no --changed-files, no --github-event, no --all).

What counts as changed is what a pull request from this checkout would show, plus what is not
committed yet: the commits since the merge base with the default branch, the staged and unstaged
edits, and untracked files that .gitignore does not hide. Renames count as a deletion and an
addition, so moving a kernel file out of src/mha/ still counts as a change under src/mha/.

A gate must never go green on nothing. Whenever there is nothing to compare against (not a git
checkout, no default branch, no merge base, or no change at all: HEAD is the default branch with
a clean tree, as in the fresh clone of main that CI's `make test` runs), every path counts as
changed, and `note` says why. A plan made from git always says which base it used and how many
paths changed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mha_ci.git import output_or_none as _git

# Tried in this order when origin/HEAD is not set (a clone made with `git init` + fetch, or a
# remote whose HEAD was never fetched). A remote branch first: it is what a pull request targets.
DEFAULT_BRANCH_CANDIDATES = ("origin/main", "origin/master", "main", "master")


@dataclass(frozen=True)
class LocalChanges:
    paths: tuple[str, ...] | None     # None: every path counts as changed
    note: str                         # one line for the plan output: the base used, or why none


def default_branch(root: Path) -> str | None:
    """The default branch as a ref git resolves (e.g. `origin/main`): origin/HEAD when the remote
    says, else the first of DEFAULT_BRANCH_CANDIDATES that exists; None when there is none."""
    head = _git(root, "symbolic-ref", "-q", "--short", "refs/remotes/origin/HEAD")
    if head and head.strip():
        return head.strip()
    for candidate in DEFAULT_BRANCH_CANDIDATES:
        if _git(root, "rev-parse", "-q", "--verify", f"{candidate}^{{commit}}") is not None:
            return candidate
    return None


def _nul_list(text: str) -> list[str]:
    return [entry for entry in text.split("\0") if entry]


def local_changes(root: Path) -> LocalChanges:
    everything = "every path counts as changed"
    if _git(root, "rev-parse", "--is-inside-work-tree") is None:
        return LocalChanges(None, f"changed files: {everything} (not a git checkout)")
    base = default_branch(root)
    if base is None:
        return LocalChanges(None, f"changed files: {everything} (no default branch: no origin/HEAD, main or master)")
    merge_base = _git(root, "merge-base", base, "HEAD")
    if merge_base is None:
        return LocalChanges(None, f"changed files: {everything} (no merge base of HEAD and {base})")
    merge_base = merge_base.strip()
    # -z: names unquoted and NUL-separated (plain --name-only quotes non-ASCII names);
    # --relative: paths relative to `root`, which may sit below the git top level.
    # Against the merge base's tree, the working tree covers committed, staged and unstaged edits.
    committed_and_edited = _git(root, "diff", "--name-only", "-z", "--no-renames", "--relative", merge_base)
    untracked = _git(root, "ls-files", "-z", "--others", "--exclude-standard")
    if committed_and_edited is None or untracked is None:
        return LocalChanges(None, f"changed files: {everything} (git diff against {base} failed)")
    paths = tuple(dict.fromkeys([*_nul_list(committed_and_edited), *_nul_list(untracked)]))
    if not paths:
        return LocalChanges(None, f"changed files: {everything} (no change against {base}: HEAD is its "
                                  "merge base and the tree is clean, nothing to compare against)")
    return LocalChanges(paths, f"changed files: {len(paths)} against {base} (merge base {merge_base[:12]}; "
                               "commits since, staged, unstaged and untracked files)")
