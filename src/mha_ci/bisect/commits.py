"""The commits a bisect searches: good, then bad's first-parent chain back to good, oldest first.

First parent only: on a main branch that merges pull requests, the first-parent chain is what
was on main, one commit per merge; a merge's side branch is searched as that one merge commit.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from mha_ci.errors import ConfigError, EnvironmentProblem
from mha_ci.git import LONG_TIMEOUT_S
from mha_ci.git import run as run_git

KERNEL_TREE = "src/mha"
# What the report's diff stat shows of the first commit that moved: the code, and the stored
# code objects a refresh of that commit would have changed.
STAT_PATHS = ("src", "perf_baselines/code_objects")


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    tree: str              # the git tree of src/mha: equal trees are one build without a compile

    def to_dict(self) -> dict:
        return {"sha": self.sha, "subject": self.subject, "tree": self.tree}

    @classmethod
    def from_dict(cls, data: dict) -> "Commit":
        return cls(data["sha"], data["subject"], data["tree"])


# mha_ci.git.run as bisect runs it: over a range of history, and saying who needs git.
_git = partial(run_git, timeout=LONG_TIMEOUT_S, unavailable="perf bisect needs git on the PATH")


def commit_range(repo: Path, good: str, bad: str) -> list[Commit]:
    """[good, ..., bad]: bad's first-parent chain down to good's history, oldest first. A usage
    error when good is not an ancestor of bad or is bad itself (nothing to search)."""
    if good == bad:
        raise ConfigError(f"--good and --bad name the same commit {good[:12]}: nothing to search", key="--bad")
    if _git(repo, "merge-base", "--is-ancestor", good, bad).returncode != 0:
        raise ConfigError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}: bisect searches the "
                          "history between them (swap them, or pick a good commit on bad's history)", key="--good")
    listed = _git(repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}")
    if listed.returncode != 0:
        raise EnvironmentProblem(f"git rev-list {good[:12]}..{bad[:12]} failed: {listed.stderr.strip()}")
    return [describe(repo, sha) for sha in [good, *listed.stdout.split()]]


def describe(repo: Path, sha: str) -> Commit:
    subject = _git(repo, "log", "-1", "--format=%s", sha).stdout.strip()
    tree = _git(repo, "rev-parse", "--verify", "--quiet", f"{sha}:{KERNEL_TREE}")
    # A commit without the kernel package has no build; its tree is named so that it stays apart.
    return Commit(sha, subject, tree.stdout.strip() if tree.returncode == 0 else f"no {KERNEL_TREE}")


def diff_stat(repo: Path, sha: str) -> str:
    """`git diff --stat` of `sha` against its first parent, limited to STAT_PATHS."""
    done = _git(repo, "diff", "--stat", f"{sha}^1", sha, "--", *STAT_PATHS)
    return done.stdout.rstrip() if done.returncode == 0 else f"(git diff failed: {done.stderr.strip()})"
