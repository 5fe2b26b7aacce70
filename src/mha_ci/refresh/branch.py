"""Commit files on a new branch without touching the current checkout.

`git worktree add -b BRANCH TMP BASE` gives a second working tree on a new branch; files are
written and committed there, then the worktree is removed and only the branch remains. The
current checkout's files, index and branch never change, so a refresh can run in a checkout
that has local edits, and a baseline is never overwritten in place.

Any failure or interrupt (KeyboardInterrupt included) before the commit is done rolls back:
the worktree and the branch are removed, so nothing half-written survives anywhere.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from mha_ci.errors import EnvironmentProblem

AUTHOR_NAME = "mha-ci nightly"
AUTHOR_EMAIL = "mha-ci@localhost"


def _git(repo: Path, *args: str, env: dict | None = None) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=False)
    except FileNotFoundError:
        raise EnvironmentProblem("git is not installed") from None
    if done.returncode != 0:
        raise EnvironmentProblem(f"git {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def head_commit(repo: Path) -> str:
    return _git(repo, "rev-parse", "--verify", "HEAD^{commit}")


def uncommitted(repo: Path) -> list[str]:
    """Tracked paths whose working-tree content differs from HEAD (untracked files are not code
    under test: out/, caches)."""
    return [path for path in _git(repo, "diff", "--name-only", "-z", "HEAD").split("\0") if path]


def untracked(repo: Path, paths: tuple[str, ...]) -> list[str]:
    """Untracked, not ignored files under `paths` (a new kernel file is code under test too)."""
    out = _git(repo, "ls-files", "--others", "--exclude-standard", "-z", "--", *paths)
    return [path for path in out.split("\0") if path]


def file_at(repo: Path, commit: str, path: str) -> str | None:
    """The text of `path` at `commit`; None when git has no such commit or file here."""
    done = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"],
                          capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else None


def changed_paths(repo: Path, a: str, b: str, paths: tuple[str, ...]) -> list[str] | None:
    """Files under `paths` that differ between commits a and b; None when git cannot tell
    (a commit not in this clone)."""
    done = subprocess.run(["git", "-C", str(repo), "diff", "--name-only", a, b, "--", *paths],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None
    return [line for line in done.stdout.splitlines() if line]


def branch_exists(repo: Path, branch: str) -> bool:
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
                          capture_output=True, text=True, check=False)
    return done.returncode == 0


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def commit_on_new_branch(repo: Path, branch: str, base: str, files: dict[str, bytes], message: str,
                         date: str | None = None) -> str:
    """Create `branch` at `base` holding one new commit that writes `files` (repo-relative path ->
    content); returns the commit id. Raises EnvironmentProblem if the branch exists or git fails."""
    repo = Path(repo)
    if branch_exists(repo, branch):
        raise EnvironmentProblem(f"branch {branch} already exists; delete it or wait for tomorrow's refresh")
    scratch = Path(tempfile.mkdtemp(prefix="mha-ci-refresh-"))
    worktree = scratch / "worktree"
    created = False
    try:
        _git(repo, "worktree", "add", "--quiet", "-b", branch, str(worktree), base)
        created = True
        for rel, data in sorted(files.items()):
            _write_atomic(worktree / rel, data)
        _git(worktree, "add", "--", *sorted(files))
        env = {**os.environ, "GIT_AUTHOR_NAME": AUTHOR_NAME, "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
               "GIT_COMMITTER_NAME": AUTHOR_NAME, "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL}
        if date:
            env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
        # --no-verify: the repository's own hooks are not this bot's business; no signing either.
        _git(worktree, "-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify", "-m", message, env=env)
        commit = head_commit(worktree)
    except BaseException:
        # Roll back: the worktree first (a branch checked out in a worktree cannot be deleted).
        if created:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(worktree)],
                           capture_output=True, check=False)
            subprocess.run(["git", "-C", str(repo), "branch", "-D", branch], capture_output=True, check=False)
        shutil.rmtree(scratch, ignore_errors=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True, check=False)
        raise
    _git(repo, "worktree", "remove", "--force", str(worktree))
    shutil.rmtree(scratch, ignore_errors=True)
    return commit
