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
import subprocess
import tarfile
from pathlib import Path

from mha_ci.errors import ConfigError, EnvironmentProblem

KERNEL_PACKAGE = "src/mha"
HARNESS_PACKAGE = "src/mha_ci"


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=120)
    except FileNotFoundError:
        raise EnvironmentProblem("--against needs git on the PATH") from None


def resolve(repo: Path, ref: str, option: str = "--against") -> str:
    """The commit `ref` names in `repo`; a ConfigError (exit 2) on `option` when it names none."""
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0:
        raise ConfigError(f"'{ref}' names no commit in {repo} (a branch, tag or sha is expected)", key=option)
    return done.stdout.decode().strip()


def materialise(repo: Path, ref: str, dest: Path) -> str:
    """Write the base side for `ref` into `dest` (replaced if it exists); returns the commit."""
    repo, dest = Path(repo).resolve(), Path(dest)
    sha = resolve(repo, ref)
    archive = _git(repo, "archive", "--format=tar", sha, KERNEL_PACKAGE)
    if archive.returncode != 0:
        raise ConfigError(f"'{ref}' ({sha[:12]}) has no {KERNEL_PACKAGE} to measure: "
                          f"{archive.stderr.decode().strip()}", key="--against")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    shutil.copytree(repo / HARNESS_PACKAGE, dest / HARNESS_PACKAGE,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (dest / "BASE_COMMIT").write_text(f"{sha}\n")
    return sha
