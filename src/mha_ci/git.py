"""git, run one way for all of mha-ci: `git -C REPO ARGS`, output captured, within a timeout.

Decided here once:
- timeout: DEFAULT_TIMEOUT_S for a command that reads a commit, a ref or the working tree;
  a caller whose command walks history or writes a tree (log and rev-list over a range, archive,
  worktree add, commit) passes LONG_TIMEOUT_S.
- errors: git missing from the PATH (or not startable) and git not finishing within its timeout
  are GitError, an EnvironmentProblem (exit 3): the machine, not the code or the command line.
  A command that ran and failed is the caller's to judge: `run` returns it (returncode, stderr),
  or with check=True raises GitError naming the command and git's message. The `*_or_none`
  helpers answer None wherever git cannot say (no git, not a repository, no such commit).

Standard library plus mha_ci.errors and mha_ci.files only: payload-side code (perf/provenance.py)
runs it inside toolchain environments.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from mha_ci.errors import EnvironmentProblem
from mha_ci.files import write_atomic

DEFAULT_TIMEOUT_S = 60
LONG_TIMEOUT_S = 300
NOT_INSTALLED = "git is not installed"

# The author and committer of the commits mha-ci makes itself (a baseline refresh, a tune proposal).
AUTHOR_NAME = "mha-ci nightly"
AUTHOR_EMAIL = "mha-ci@localhost"


class GitError(EnvironmentProblem):
    """git could not run, did not finish in time, or (check=True) failed: exit 3."""


def run(repo: Path, *args: str, timeout: float = DEFAULT_TIMEOUT_S, check: bool = False, text: bool = True,
        env: dict | None = None, unavailable: str = NOT_INSTALLED) -> subprocess.CompletedProcess:
    """`git -C repo ARGS`, stdout and stderr captured (str, or bytes with text=False).
    `unavailable`: the GitError's message when git cannot be started (says who needs it)."""
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=text, env=env,
                              timeout=timeout, check=False)
    except FileNotFoundError:
        raise GitError(unavailable) from None
    except OSError as exc:
        raise GitError(f"{unavailable}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args)} did not finish within {timeout:g} s") from None
    if check and done.returncode != 0:
        message = _text(done.stderr).strip() or _text(done.stdout).strip()
        raise GitError(f"git {' '.join(args)} failed: {message}")
    return done


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def output(repo: Path, *args: str, timeout: float = DEFAULT_TIMEOUT_S, env: dict | None = None) -> str:
    """stdout of a command that must succeed, stripped; GitError otherwise."""
    return run(repo, *args, timeout=timeout, check=True, env=env).stdout.strip()


def output_or_none(repo: Path, *args: str, timeout: float = DEFAULT_TIMEOUT_S) -> str | None:
    """stdout as git wrote it; None when git fails, is not installed or does not finish."""
    try:
        done = run(repo, *args, timeout=timeout)
    except GitError:
        return None
    return done.stdout if done.returncode == 0 else None


def bytes_or_none(repo: Path, *args: str, timeout: float = DEFAULT_TIMEOUT_S) -> bytes | None:
    """output_or_none's bytes, for output that need not be text (a binary diff, file names)."""
    try:
        done = run(repo, *args, timeout=timeout, text=False)
    except GitError:
        return None
    return done.stdout if done.returncode == 0 else None


def commit_or_none(repo: Path, ref: str = "HEAD") -> str | None:
    """The commit `ref` names in `repo`; None when it names none or git cannot say."""
    found = output_or_none(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    return found.strip() or None if found is not None else None


def head_commit(repo: Path) -> str:
    """The commit HEAD names; GitError when there is none."""
    return output(repo, "rev-parse", "--verify", "HEAD^{commit}")


def uncommitted(repo: Path) -> list[str]:
    """Tracked paths whose working-tree content differs from HEAD (untracked files are not code
    under test: out/, caches)."""
    return [path for path in output(repo, "diff", "--name-only", "-z", "HEAD").split("\0") if path]


def untracked(repo: Path, paths: tuple[str, ...]) -> list[str]:
    """Untracked, not ignored files under `paths` (a new kernel file is code under test too)."""
    out = output(repo, "ls-files", "--others", "--exclude-standard", "-z", "--", *paths)
    return [path for path in out.split("\0") if path]


def file_at(repo: Path, commit: str, path: str) -> str | None:
    """The text of `path` at `commit`; None when git has no such commit or file here."""
    done = run(repo, "show", f"{commit}:{path}")
    return done.stdout if done.returncode == 0 else None


def changed_paths(repo: Path, a: str, b: str, paths: tuple[str, ...]) -> list[str] | None:
    """Files under `paths` that differ between commits a and b; None when git cannot tell
    (a commit not in this clone)."""
    done = run(repo, "diff", "--name-only", a, b, "--", *paths)
    if done.returncode != 0:
        return None
    return [line for line in done.stdout.splitlines() if line]


def branch_exists(repo: Path, branch: str) -> bool:
    return run(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}").returncode == 0


def delete_branch(repo: Path, branch: str) -> None:
    """Best effort, for undoing: a failure leaves the branch, never raises."""
    with contextlib.suppress(GitError):
        run(repo, "branch", "-D", branch)


def remove_worktree(repo: Path, worktree: Path) -> None:
    """Best effort, for cleaning up: a failure leaves the worktree, never raises."""
    with contextlib.suppress(GitError):
        run(repo, "worktree", "remove", "--force", str(worktree))


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)


def commit_on_new_branch(repo: Path, branch: str, base: str, files: dict[str, bytes], message: str,
                         date: str | None = None) -> str:
    """Create `branch` at `base` holding one new commit that writes `files` (repo-relative path ->
    content), without touching the current checkout; returns the commit id. GitError if the branch
    exists or git fails.

    `git worktree add -b BRANCH TMP BASE` gives a second working tree on a new branch; files are
    written and committed there, then the worktree is removed and only the branch remains. The
    checkout's files, index and branch never change, so this runs in a checkout with local edits.
    Any failure or interrupt (KeyboardInterrupt included) before the commit is done rolls back:
    the worktree and the branch are removed, so nothing half-written survives anywhere."""
    repo = Path(repo)
    if branch_exists(repo, branch):
        raise GitError(f"branch {branch} already exists; delete it or wait for tomorrow's refresh")
    scratch = Path(tempfile.mkdtemp(prefix="mha-ci-refresh-"))
    worktree = scratch / "worktree"
    created = False
    try:
        output(repo, "worktree", "add", "--quiet", "-b", branch, str(worktree), base, timeout=LONG_TIMEOUT_S)
        created = True
        for rel, data in sorted(files.items()):
            _write_file(worktree / rel, data)
        output(worktree, "add", "--", *sorted(files), timeout=LONG_TIMEOUT_S)
        env = {**os.environ, "GIT_AUTHOR_NAME": AUTHOR_NAME, "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
               "GIT_COMMITTER_NAME": AUTHOR_NAME, "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL}
        if date:
            env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
        # --no-verify: the repository's own hooks are not this bot's business; no signing either.
        output(worktree, "-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify", "-m", message, env=env,
               timeout=LONG_TIMEOUT_S)
        commit = head_commit(worktree)
    except BaseException:
        # Roll back: the worktree first (a branch checked out in a worktree cannot be deleted).
        if created:
            remove_worktree(repo, worktree)
            delete_branch(repo, branch)
        shutil.rmtree(scratch, ignore_errors=True)
        with contextlib.suppress(GitError):
            run(repo, "worktree", "prune")
        raise
    output(repo, "worktree", "remove", "--force", str(worktree))
    shutil.rmtree(scratch, ignore_errors=True)
    return commit
