"""The default executor: one virtual environment per toolchain, built from its lock file.

Environments live under <cache>/venvs/<toolchain>-<sha256(lock)[:12]>, where <cache> is
$MHA_CI_CACHE or <root>/.cache/mha-ci. The name changes whenever the lock file does, so an
environment is reused exactly while the pins that made it are unchanged.

Building is atomic: the environment is made in a temporary sibling folder and renamed into
place only after `pip install` succeeded and a completion marker was written; a folder without
the marker (a build killed halfway) is never used. A file lock per environment keeps two
concurrent runs from building the same one twice. The environment is always entered as
`<env>/bin/python -m ...`, never through bin/ scripts, whose shebang lines still name the
temporary folder.

A build killed with SIGKILL cannot remove its temporary folder (most of a gigabyte); the next
build removes every `.<env>.building-*` folder whose environment's lock nobody holds. A cached
environment is checked before its first use in a run: every file pip's RECORD lists for a pinned
package must be there with its recorded size (compiled .pyc files aside: Python rewrites those).
A damaged one (a deleted torch/__init__.py) is rebuilt; one still damaged after that is exit 3.
"""
from __future__ import annotations

import csv
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from mha_ci.cache import cache_root
from mha_ci.errors import EnvironmentProblem
from mha_ci.executors.base import Executor, PayloadResult, PayloadRun
from mha_ci.executors.local_process import run_python_payload
from mha_ci.model.lockfile import lock_sha256, normalise
from mha_ci.model.types import Toolchain

MARKER = "mha-ci-env.json"     # written last; its presence means "complete"
BUILDING = ".building-"        # infix of the temporary folder a build works in


class VenvExecutor(Executor):
    name = "venv"

    def __init__(self, root: Path, *, cache: Path | None = None, base_python: str | None = None,
                 stream: TextIO | None = None) -> None:
        self.root = Path(root).resolve()
        self.venvs = (cache or cache_root(self.root)) / "venvs"
        # The interpreter the environments are made from; the lock files are resolved for 3.11.
        self.base_python = base_python or os.environ.get("MHA_CI_BASE_PYTHON") or sys.executable
        self.stream = stream or sys.stderr
        self._verified: set[Path] = set()     # checked in this run: the check costs a stat per file

    # ----------------------------------------------------------------- environments
    def env_path(self, toolchain: Toolchain) -> Path:
        # The cpu environments keep their historical names, so existing caches stay valid.
        platform = "" if toolchain.platform == "cpu" else f"-{toolchain.platform}"
        return self.venvs / f"{toolchain.name}{platform}-{lock_sha256(toolchain.lock)[:12]}"

    def ensure_env(self, toolchain: Toolchain) -> Path:
        """The toolchain's environment, built first if it does not exist yet."""
        if toolchain.installs_only:
            raise EnvironmentProblem(
                f"toolchain {toolchain.name} on {toolchain.platform} installs only "
                f"{', '.join(toolchain.installs_only)} over a base image that brings the rest (torch for "
                f"{toolchain.platform} is not on PyPI): run this job with --executor docker, or --executor "
                "host inside such an environment")
        if not toolchain.lock.is_file():
            raise EnvironmentProblem(f"toolchain {toolchain.name}: lock file {toolchain.lock} does not exist")
        target = self.env_path(toolchain)
        if self._complete(target) and (target in self._verified or not self._damage(target, toolchain)):
            self._verified.add(target)
            return target
        self.venvs.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path(target.name), "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)   # released when the file closes
            self._remove_stale_builds(target.name)
            if self._complete(target):              # another run built it while we waited, or damaged
                damage = self._damage(target, toolchain)
                if not damage:
                    self._verified.add(target)
                    return target
                self.stream.write(f"venv {target.name} is damaged ({damage}): rebuilding it\n")
            if target.exists():                      # left behind by a build that died after rename
                shutil.rmtree(target)
            self._build(toolchain, target)
            damage = self._damage(target, toolchain)
            if damage:
                raise EnvironmentProblem(f"venv {target} is damaged right after it was built ({damage}); "
                                         f"see {self.venvs / (target.name + '.install.log')}")
        self._verified.add(target)
        return target

    def _lock_path(self, env_name: str) -> Path:
        return self.venvs / f".{env_name}.lock"

    def _remove_stale_builds(self, own: str) -> None:
        """Remove the temporary folders of builds that died. The caller holds `own`'s lock, so its
        folders are stale; another environment's are stale when its lock can be taken."""
        for folder in self.venvs.glob(f".*{BUILDING}*"):
            env_name = folder.name[1:].split(BUILDING, 1)[0]
            if env_name == own:
                shutil.rmtree(folder, ignore_errors=True)
                continue
            with open(self._lock_path(env_name), "a") as other:
                try:
                    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue                          # that build is running now
                shutil.rmtree(folder, ignore_errors=True)

    def _damage(self, target: Path, toolchain: Toolchain) -> str | None:
        """What is missing from the installed pinned packages (None when nothing is)."""
        sites = sorted(target.glob("lib/python*/site-packages"))
        if not sites:
            return "no site-packages folder"
        site = str(sites[0])
        records = {normalise(info.name.split("-", 1)[0]): info / "RECORD" for info in sites[0].glob("*.dist-info")}
        for package in toolchain.pins:
            record = records.get(package)
            if record is None or not record.is_file():
                return f"{package}: no installed RECORD"
            problem = _record_problem(site, record)
            if problem:
                return f"{package}: {problem}"
        return None

    def _complete(self, target: Path) -> bool:
        marker = target / MARKER
        if not marker.is_file() or not (target / "bin" / "python").exists():
            return False
        try:
            return json.loads(marker.read_text()).get("base_python_version") == self._base_version()
        except (OSError, ValueError):
            return False

    def _base_version(self) -> str:
        if not hasattr(self, "_base_version_cache"):
            out = subprocess.run([self.base_python, "-c", "import sys; print(sys.version.split()[0])"],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise EnvironmentProblem(f"cannot run base python {self.base_python}: {out.stderr.strip()}")
            self._base_version_cache = out.stdout.strip()
        return self._base_version_cache

    def _build(self, toolchain: Toolchain, target: Path) -> None:
        shown_lock = _relative(toolchain.lock, self.root)
        self.stream.write(f"creating venv for {toolchain.name} from {shown_lock} ...\n")
        self.stream.flush()
        started = time.monotonic()
        temp = Path(tempfile.mkdtemp(prefix=f".{target.name}{BUILDING}", dir=self.venvs))
        log_path = self.venvs / f"{target.name}.install.log"
        try:
            with open(log_path, "w") as log:
                self._step([self.base_python, "-m", "venv", str(temp)], log, log_path, toolchain)
                # pip finds torch's CPU wheel through its configured find-links (/opt/wheels here),
                # so the caller's pip configuration stays in the environment of this step.
                self._step([str(temp / "bin" / "python"), "-m", "pip", "install", "--no-input",
                            "--require-hashes", "--no-deps", "-r", str(toolchain.lock)], log, log_path, toolchain)
            (temp / MARKER).write_text(json.dumps({
                "toolchain": toolchain.name, "platform": toolchain.platform, "lock": str(toolchain.lock), "lock_sha256": lock_sha256(toolchain.lock),
                "base_python": self.base_python, "base_python_version": self._base_version(),
                "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }, indent=2) + "\n")
            os.rename(temp, target)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        self.stream.write(f"creating venv for {toolchain.name}: done in {time.monotonic() - started:.0f} s ({target})\n")
        self.stream.flush()

    def _step(self, cmd: list[str], log: TextIO, log_path: Path, toolchain: Toolchain) -> None:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            log.flush()
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
            raise EnvironmentProblem(f"creating the venv for toolchain {toolchain.name} failed at "
                                     f"`{' '.join(cmd[:4])} ...` (exit {proc.returncode}); full log: {log_path}\n{tail}")

    # ----------------------------------------------------------------- running
    def run(self, payload: PayloadRun) -> PayloadResult:
        env = self.ensure_env(payload.toolchain)
        return run_python_payload(str(env / "bin" / "python"), payload, self.root, executor=self.name,
                                  stream=self.stream, provenance={"venv": str(env)})


def _record_problem(site: str, record: Path) -> str | None:
    """The first file of a RECORD that is missing or has another size than recorded."""
    with open(record, newline="", encoding="utf-8", errors="replace") as handle:
        for row in csv.reader(handle):
            if not row or "__pycache__" in row[0] or row[0].endswith(".pyc"):
                continue
            try:
                size = os.stat(os.path.join(site, row[0])).st_size
            except OSError:
                return f"{row[0]} is missing"
            if len(row) > 2 and row[2].isdigit() and int(row[2]) != size:
                return f"{row[0]} has {size} bytes, {row[2]} when installed"
    return None


def _relative(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)
