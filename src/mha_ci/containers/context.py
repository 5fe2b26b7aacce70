"""Build context of an image: Dockerfile, lock, pin check and a host-downloaded wheelhouse.

Why a wheelhouse: pip inside a container reaches the package index only with --network host
and the host's CA bundle (docs/facts.md). Downloading on the host with `--require-hashes` and
installing in the image with `--no-index --require-hashes` keeps the image build offline for
Python packages and checks every wheel twice against the lock's sha256.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mha_ci.cache import cache_root
from mha_ci.containers.images import CONTEXT_FILES, ImageSpec
from mha_ci.errors import EnvironmentProblem


def contexts_dir(spec: ImageSpec) -> Path:
    """Where image build contexts are assembled: in the cache the venv executor uses too."""
    return cache_root(spec.dockerfile.resolve().parents[2]) / "contexts"


def lock_entries(lock_text: str) -> dict[str, str]:
    """Requirement entries of a lock (name -> the entry's text with its --hash lines)."""
    entries: dict[str, str] = {}
    current: list[str] = []
    for line in lock_text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current.append(line)
        if not line.rstrip().endswith("\\"):
            name = re.split(r"[=<>!~\[ ;]", current[0].strip(), maxsplit=1)[0]
            entries[re.sub(r"[-_.]+", "-", name).lower()] = "\n".join(current)
            current = []
    return entries


def install_lock_text(spec: ImageSpec) -> str:
    """What pip installs in the image: the whole lock, or only the entries the Dockerfile
    replaces in its base (`# mha-ci.replace: triton`, the ROCm image keeps the base's torch)."""
    text = spec.lock.read_text()
    replace = spec.directives.get("replace")
    if not replace:
        return text
    entries = lock_entries(text)
    names = [n.strip().lower() for n in replace.split(",") if n.strip()]
    missing = [n for n in names if n not in entries]
    if missing:
        raise EnvironmentProblem(f"{spec.dockerfile}: replaces {', '.join(missing)}, "
                                 f"which {spec.lock} does not pin")
    header = f"# Entries of {spec.lock.parent.name}/requirements.lock this image installs.\n"
    return header + "\n".join(entries[n] for n in names) + "\n"


# glibc of the images' Debian bookworm base: a manylinux_2_N wheel installs there for N <= 36.
# Every N, not a few: wheels carry one tag each (nvidia-cuda-cupti 13.0.85 is manylinux_2_25
# only), and a tag missing here makes pip report the pinned version as not existing.
IMAGE_GLIBC_MINOR = 36


def wheel_platforms(glibc_minor: int = IMAGE_GLIBC_MINOR) -> list[str]:
    """pip --platform tags an x86_64 image with glibc 2.<glibc_minor> accepts, newest first."""
    tags = [f"manylinux_2_{n}_x86_64" for n in range(glibc_minor, 4, -1)]
    return tags + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64",
                   "linux_x86_64", "any"]


def pip_download_command(lock: Path, dest: Path, python_version: str) -> list[str]:
    """`pip download` of exactly the lock's wheels for the image's Python (cp311 for bookworm)."""
    py = python_version.replace(".", "")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
           "--only-binary=:all:", "--disable-pip-version-check", "--progress-bar", "off",
           "--python-version", python_version, "--implementation", "cp",
           "--abi", f"cp{py}", "--abi", "abi3", "--abi", "none"]
    for plat in wheel_platforms():
        cmd += ["--platform", plat]
    return cmd + ["-r", str(lock), "-d", str(dest)]


@dataclass(frozen=True)
class BuildContext:
    path: Path
    wheelhouse_s: float        # seconds spent downloading (0 when the wheelhouse was reused)


def assemble(spec: ImageSpec, log=print) -> BuildContext:
    """Write the context folder for `spec`; the wheelhouse is reused while install.lock and the
    target Python are unchanged (a stamp file records what it was downloaded for)."""
    install = install_lock_text(spec)
    key = hashlib.sha256(f"{spec.python_version}\0{install}".encode()).hexdigest()[:16]
    ctx = contexts_dir(spec) / f"{spec.toolchain}-{spec.platform}"
    wheelhouse, stamp = ctx / "wheelhouse", ctx / "wheelhouse.stamp"
    ctx.mkdir(parents=True, exist_ok=True)
    (ctx / "install.lock").write_text(install)
    shutil.copyfile(spec.dockerfile, ctx / "Dockerfile")
    shutil.copyfile(spec.lock, ctx / "requirements.lock")
    for f in CONTEXT_FILES:
        shutil.copyfile(f, ctx / f.name)
    (ctx / ".dockerignore").write_text("wheelhouse.stamp\n")

    spent = 0.0
    if not (stamp.is_file() and stamp.read_text() == key and wheelhouse.is_dir()):
        shutil.rmtree(wheelhouse, ignore_errors=True)   # wheels of an older lock must not leak in
        wheelhouse.mkdir()
        cmd = pip_download_command(ctx / "install.lock", wheelhouse, spec.python_version)
        log(f"wheelhouse: {' '.join(cmd[1:4])} ... -r install.lock -d {wheelhouse}")
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        spent = time.monotonic() - t0
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise EnvironmentProblem(
                f"pip download of {spec.lock} for Python {spec.python_version} failed "
                f"(a lock hashed for another Python needs the hash of this Python's wheel "
                f"added to its entry):\n{tail}")
        stamp.write_text(key)
        log(f"wheelhouse: {len(list(wheelhouse.iterdir()))} wheels in {spent:.1f} s")
    return BuildContext(path=ctx, wheelhouse_s=spent)
