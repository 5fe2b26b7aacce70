"""The base side of a base-vs-head measurement (`mha-ci perf measure --against REF`).

Machines differ: one GPU of a pool can run some shapes a few per cent slower than the rest
(docs/perf-method.md, "Noise between runs and machines"), more than a gate that still catches a
5 % slowdown can absorb when a pull request is judged against a baseline stored from other
machines. Measuring the base commit and the working tree on one GPU, taking turns shape by shape
(mha_ci.perf.lockstep), cancels that.

The base side is a folder shaped like a checkout: `src/mha` (the kernel package under test) as
committed at REF, and `src/mha_ci` copied from the working tree, so that one harness (payload,
timer, statistics) measures both kernels and only the kernel differs between the sides.
"""
from __future__ import annotations

import io
import shutil
import tarfile
from functools import partial
from pathlib import Path

from mha_ci.errors import ConfigError
from mha_ci.files import tree_digest
from mha_ci.git import LONG_TIMEOUT_S
from mha_ci.git import run as run_git

KERNEL_PACKAGE = "src/mha"
HARNESS_PACKAGE = "src/mha_ci"
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


# mha_ci.git.run as the base side runs it: bytes (a tar archive of the kernel package), and
# saying who needs git.
_git = partial(run_git, text=False, timeout=LONG_TIMEOUT_S, unavailable="--against needs git on the PATH")


def resolve(repo: Path, ref: str, option: str = "--against") -> str:
    """The commit `ref` names in `repo`; a ConfigError (exit 2) on `option` when it names none."""
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0:
        raise ConfigError(f"'{ref}' names no commit in {repo} (a branch, tag or sha is expected)", key=option)
    return done.stdout.decode().strip()


def resolve_base(repo: Path, base: str, dest: Path) -> str:
    """Write the base side for `base` into `dest`: a folder holding a checkout (its src/mha, e.g.
    the base branch beside a pull request's commit) or a git ref of `repo`. Returns what it
    measured: the folder's commit when git can say (else the folder's path), or the ref's commit."""
    folder = Path(base)
    if folder.is_dir():
        return materialise_folder(repo, folder, dest)
    return materialise(repo, base, dest)


def materialise_folder(repo: Path, folder: Path, dest: Path) -> str:
    """The base side from a folder holding a checkout: its src/mha, and the harness from `repo`."""
    repo, folder, dest = Path(repo).resolve(), Path(folder).resolve(), Path(dest)
    kernel = folder / KERNEL_PACKAGE
    if not (kernel / "__init__.py").is_file():
        raise ConfigError(f"{folder} holds no {KERNEL_PACKAGE} package to measure as the base", key="--perf-against")
    if folder == repo:
        raise ConfigError(f"{folder} is the checkout itself: a base must be another tree", key="--perf-against")
    done = _git(folder, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    commit = done.stdout.decode().strip() if done.returncode == 0 else str(folder)
    _fresh(dest)
    shutil.copytree(kernel, dest / KERNEL_PACKAGE, ignore=IGNORED)
    return _with_harness(repo, dest, commit)


def host_code_digest(package: Path) -> str:
    """sha256 of the kernel package's Python sources (files.tree_digest): its tuning configs are
    JSON, so the digest is equal on both sides of an A/B whose change touches only configs, which
    reach the GPU only through the code objects they select."""
    return tree_digest(package)


def unchanged_host(base_side: Path, repo: Path) -> bool:
    """Whether the base side written by resolve_base/materialise runs the same host code as `repo`."""
    return host_code_digest(Path(base_side) / KERNEL_PACKAGE) == host_code_digest(Path(repo) / KERNEL_PACKAGE)


def _fresh(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)


def _with_harness(repo: Path, dest: Path, commit: str) -> str:
    """Finish a base side whose kernel package is in `dest`: the working tree's harness, and the
    commit it stands for."""
    shutil.copytree(repo / HARNESS_PACKAGE, dest / HARNESS_PACKAGE, ignore=IGNORED)
    (dest / "BASE_COMMIT").write_text(f"{commit}\n")
    return commit


def materialise(repo: Path, ref: str, dest: Path) -> str:
    """Write the base side for `ref` into `dest` (replaced if it exists); returns the commit."""
    repo, dest = Path(repo).resolve(), Path(dest)
    sha = resolve(repo, ref)
    archive = _git(repo, "archive", "--format=tar", sha, KERNEL_PACKAGE)
    if archive.returncode != 0:
        raise ConfigError(f"'{ref}' ({sha[:12]}) has no {KERNEL_PACKAGE} to measure: "
                          f"{archive.stderr.decode().strip()}", key="--against")
    _fresh(dest)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return _with_harness(repo, dest, sha)
