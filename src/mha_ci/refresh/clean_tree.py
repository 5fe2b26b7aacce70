"""Whether the working tree is HEAD's: a baseline is stored as the measurement of HEAD, whether
this machine measures it (`perf refresh`, the refresh job) or stores documents measured
elsewhere (`perf refresh --measurement`, mha_ci.refresh.measured_code). One rule for both.

The tree differs from HEAD when a tracked file differs (the kernels, the harness, and
pipelines/, whose perf.yaml and workloads.yaml decide what is measured and how the refresh judges
it), or when an untracked file lies under src/ (a new kernel file is code under test too; out/
folders and caches elsewhere are not).
"""
from __future__ import annotations

from pathlib import Path

from mha_ci import git
from mha_ci.errors import ConfigError

SOURCE_PATHS = ("src",)


def tree_changes(root: Path) -> tuple[list[str], list[str]]:
    """(tracked files that differ from HEAD, untracked files under src/); both empty when the
    working tree is HEAD's."""
    return git.uncommitted(root), git.untracked(root, SOURCE_PATHS)


def unclean(root: Path) -> str | None:
    """Why the working tree is not HEAD's, or None."""
    tracked, new = tree_changes(root)
    parts = [f"{len(paths)} {what} file(s) ({', '.join(paths[:5])}{', ...' if len(paths) > 5 else ''})"
             for paths, what in ((tracked, "tracked"), (new, "untracked")) if paths]
    return f"the working tree differs from HEAD in {' and '.join(parts)}" if parts else None


def refuse_unclean(root: Path) -> None:
    """A ConfigError (exit 2) when the working tree is not HEAD's."""
    why = unclean(root)
    if why:
        raise ConfigError(f"{why}; a baseline is measured from a commit: commit or stash them first")
