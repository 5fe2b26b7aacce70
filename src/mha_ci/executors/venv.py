"""The default executor: one virtual environment per toolchain, built from its lock file.

Environments live under <cache>/venvs/<toolchain>-<sha256(lock)[:12]>, where <cache> is the
machine's (mha_ci.cache.cache_root: $MHA_CI_CACHE, else ~/.cache/mha-ci). The name changes whenever the lock file does, so an
environment is reused exactly while the pins that made it are unchanged.

Building is atomic: the environment is made in a temporary sibling folder and renamed into
place only after `pip install` succeeded and a completion marker was written; a folder without
the marker (a build killed halfway) is never used. A file lock per environment keeps two
concurrent runs (or clones sharing one cache) from building the same one twice, and one that
must go is renamed out of the way before it is deleted, so nobody sees half of it. A payload
holds the same lock shared while it runs, so neither a rebuild nor `mha-ci cache prune` takes
the environment from under it; the lock file's mtime is the environment's last use. The
environment is always entered as `<env>/bin/python -m ...`, never through bin/ scripts, whose
shebang lines still name the temporary folder.

A build killed with SIGKILL cannot remove its temporary folder (most of a gigabyte); the next
build removes every `.<env>.building-*` folder whose environment's lock nobody holds.

The cache folder can be written by others (CI restores it from another run's upload; clones may
share it), so a cached environment is checked before its first use in a run against what cannot
be forged from there (mha_ci.executors.wheel_manifest), and rebuilt when it differs (exit 3 when
it still differs after that):
- bin/python must resolve to the base interpreter that builds environments, pyvenv.cfg must
  name that interpreter's folder as home (the standard library comes from there) and keep the
  system site-packages out, and no bin/pyvenv.cfg may stand beside it (site.py reads that one
  first). A script planted as bin/python is never started: nothing here runs it. The rest of
  bin/ (console scripts), include/ and share/ are not looked at: nothing runs or imports them.
- site-packages must hold exactly the files of the wheels whose sha256 the lock pins, byte for
  byte. The manifest of those files is derived from the wheels themselves (their RECORD) when
  the environment is built, or, on a machine that did not build it (a restored CI cache), from
  the same wheels downloaded again (`pip download --require-hashes`; pip's own cache makes that
  a copy); it is kept in the state folder (mha_ci.cache.state_root), outside the cache.
- Hashing every byte (1.7 GB for triton-3.8's CPU environment) takes seconds, so it happens on a
  machine's first use of an environment; the stat fingerprint of that check (device, inode,
  size, mtime and ctime of every file) goes to the state folder, and a later run whose walk
  gives the same fingerprint skips the hashing. Writing a file moves its ctime, replacing it
  its inode, and neither can be set back by whoever writes the cache.
- Python's bytecode is not checked: payloads run with PYTHONPYCACHEPREFIX in the state folder,
  so the interpreter never reads a `__pycache__` folder of the environment. pip installs with
  --no-compile, and the environment has no pip of its own (pip runs from the interpreter that
  runs mha-ci, with --python naming the environment).
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from mha_ci.cache import cache_root, state_root
from mha_ci.errors import EnvironmentProblem
from mha_ci.executors.base import Executor, PayloadResult, PayloadRun
from mha_ci.executors.local_process import run_python_payload
from mha_ci.executors.wheel_manifest import Manifest, ManifestError, content_problem, derive, layout_problem, walk
from mha_ci.files import write_atomic
from mha_ci.model.lockfile import lock_sha256, read_hashes
from mha_ci.model.types import Toolchain

MARKER = "mha-ci-env.json"     # written last; its presence means "complete"
BUILDING = ".building-"        # infix of the temporary folder a build works in
PIP_TAIL_LINES = 15
# How often a long build step says it is still running (seconds).
HEARTBEAT_S = 20.0

# What the base interpreter says about itself: what `python -m venv` writes into an environment.
_BASE_PROBE = ("import json, os, sys; exe = sys._base_executable; print(json.dumps({"
               "'version': sys.version.split()[0], 'executable': os.path.realpath(exe), "
               "'home': os.path.dirname(os.path.abspath(exe)), 'platlibdir': sys.platlibdir}))")


@dataclasses.dataclass(frozen=True)
class BaseInterpreter:
    version: str          # 3.11.7
    executable: str       # the binary bin/python must resolve to
    home: str             # pyvenv.cfg's home
    platlibdir: str       # lib, or lib64 on some distributions

    @property
    def site_rel(self) -> str:
        major, minor = self.version.split(".")[:2]
        return f"lib/python{major}.{minor}/site-packages"


class VenvExecutor(Executor):
    name = "venv"

    def __init__(self, root: Path, *, cache: Path | None = None, base_python: str | None = None,
                 stream: TextIO | None = None) -> None:
        self.root = Path(root).resolve()
        cache = cache or cache_root(self.root)
        self.venvs = cache / "venvs"
        self.state = state_root(cache)
        # The interpreter the environments are made from; the lock files are resolved for 3.11.
        self.base_python = base_python or os.environ.get("MHA_CI_BASE_PYTHON") or sys.executable
        self.stream = stream or sys.stderr
        self._verified: set[Path] = set()     # checked in this run
        self._manifests: dict[str, Manifest] = {}

    # ----------------------------------------------------------------- environments
    def env_path(self, toolchain: Toolchain) -> Path:
        # The cpu environments keep their historical names, so existing caches stay valid.
        platform = "" if toolchain.platform == "cpu" else f"-{toolchain.platform}"
        return self.venvs / f"{toolchain.name}{platform}-{lock_sha256(toolchain.lock)[:12]}"

    def ensure_env(self, toolchain: Toolchain) -> Path:
        """The toolchain's environment, built first if it does not exist yet or is not what its
        lock's wheels install."""
        if toolchain.installs_only:
            raise EnvironmentProblem(
                f"toolchain {toolchain.name} on {toolchain.platform} installs only "
                f"{', '.join(toolchain.installs_only)} over a base image that brings the rest (torch for "
                f"{toolchain.platform} is not on PyPI): run this job with --executor docker, or --executor "
                "host inside such an environment")
        if not toolchain.lock.is_file():
            raise EnvironmentProblem(f"toolchain {toolchain.name}: lock file {toolchain.lock} does not exist")
        target = self.env_path(toolchain)
        if self._complete(target) and (target in self._verified or not self._problem(target, toolchain)):
            self._verified.add(target)
            return target
        self.venvs.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path(target.name), "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)   # released when the file closes
            self._remove_stale_builds(target.name)
            if self._complete(target):              # another run built it while we waited, or it differs
                problem = self._problem(target, toolchain)
                if not problem:
                    self._verified.add(target)
                    return target
                self.stream.write(f"venv {target.name} is not what its lock's wheels install ({problem}): "
                                  "rebuilding it\n")
            if target.exists() or target.is_symlink():   # left behind by a build that died after rename
                self._set_aside(target)
            self._build(toolchain, target)
            problem = self._problem(target, toolchain)
            if problem:
                raise EnvironmentProblem(f"venv {target} is not what its lock's wheels install right after it "
                                         f"was built ({problem}); see {self.venvs / (target.name + '.install.log')}")
        self._verified.add(target)
        return target

    def _lock_path(self, env_name: str) -> Path:
        return self.venvs / f".{env_name}.lock"

    def _set_aside(self, target: Path) -> None:
        """Rename out of the way (as a stale build folder: the next build removes it if this one
        cannot), then delete: a concurrent reader never sees half of it under its name."""
        aside = Path(tempfile.mkdtemp(prefix=f".{target.name}{BUILDING}old-", dir=self.venvs))
        os.rename(target, aside / "env")
        shutil.rmtree(aside, ignore_errors=True)

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

    def _complete(self, target: Path) -> bool:
        marker = target / MARKER
        if not marker.is_file() or not (target / "bin" / "python").exists():
            return False
        try:
            return json.loads(marker.read_text()).get("base_python_version") == self._base_version()
        except (OSError, ValueError):
            return False

    # ----------------------------------------------------------------- the check
    def _problem(self, target: Path, toolchain: Toolchain) -> str | None:
        """What makes `target` other than an environment of the base interpreter holding exactly
        the files of the lock's wheels (None when nothing does)."""
        problem = self._interpreter_problem(target)
        if problem:
            return problem
        base = self._base()
        site = target / base.site_rel
        if not site.is_dir():
            return f"no {base.site_rel} folder"
        manifest = self._manifest(toolchain)
        found = walk(site)
        problem = layout_problem(found, manifest)
        if problem:
            return problem
        record = self.state / "venv-checks" / f"{target.name}-{hashlib.sha256(str(target).encode()).hexdigest()[:12]}.json"
        expected = {"venv": str(target), "manifest": manifest.digest, "fingerprint": found.fingerprint()}
        try:
            if json.loads(record.read_text()) == expected:
                return None                       # nothing changed since its last full check
        except (OSError, ValueError):
            pass
        started = time.monotonic()
        problem = content_problem(site, found, manifest)
        if problem:
            return problem
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(record, json.dumps(expected, indent=1) + "\n")
        except (OSError, EnvironmentProblem) as exc:     # the next run hashes again: slower, not wrong
            self.stream.write(f"venv: cannot keep the check of {target.name} in {record.parent}: {exc}\n")
        size = sum(st.st_size for st in found.files.values())
        self.stream.write(f"venv {target.name}: {len(found.files)} files ({size / 1e6:.0f} MB) match the wheels "
                          f"{_relative(toolchain.lock, self.root)} pins ({time.monotonic() - started:.1f} s)\n")
        return None

    def _interpreter_problem(self, target: Path) -> str | None:
        base = self._base()
        python = target / "bin" / "python"
        if os.path.realpath(python) != base.executable:
            return f"bin/python is {os.path.realpath(python)}, not the base interpreter {base.executable}"
        beside = target / "bin" / "pyvenv.cfg"
        if beside.exists() or beside.is_symlink():
            return "bin/pyvenv.cfg exists (site.py would read it instead of the environment's)"
        try:
            lines = (target / "pyvenv.cfg").read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            return f"pyvenv.cfg cannot be read: {exc}"
        settings: dict[str, list[str]] = {}
        for line in lines:
            key, equals, value = line.partition("=")
            if equals:
                settings.setdefault(key.strip().lower(), []).append(value.strip())
        home = settings.get("home", [""])[0]        # the interpreter takes the first one
        if not home or os.path.realpath(home) != os.path.realpath(base.home):
            return f"pyvenv.cfg names home {home!r}, not the base interpreter's {base.home}"
        if settings.get("include-system-site-packages", []) != ["false"]:
            return "pyvenv.cfg does not keep the system site-packages out"
        for libdir in {"lib64", base.platlibdir} - {"lib"}:
            path = target / libdir
            if (path.exists() or path.is_symlink()) and not (path.is_symlink() and os.readlink(path) == "lib"):
                return f"{libdir} is not the link to lib that venv makes"
        return None

    def _base(self) -> BaseInterpreter:
        if not hasattr(self, "_base_cache"):
            out = subprocess.run([self.base_python, "-I", "-c", _BASE_PROBE], capture_output=True, text=True)
            if out.returncode != 0:
                raise EnvironmentProblem(f"cannot run base python {self.base_python}: {out.stderr.strip()}")
            self._base_cache = BaseInterpreter(**json.loads(out.stdout))
        return self._base_cache

    def _base_version(self) -> str:
        return self._base().version

    # ----------------------------------------------------------------- the manifest
    def _manifest(self, toolchain: Toolchain) -> Manifest:
        """The files the lock's wheels install: from the state folder, else derived from the
        wheels downloaded again (one download at a time per lock, whatever the clone)."""
        key = f"{lock_sha256(toolchain.lock)}-py{self._base_version()}"
        if key in self._manifests:
            return self._manifests[key]
        path = self.state / "venv-manifests" / f"{key}.json"
        manifest = _read_manifest(path)
        if manifest is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.with_name(f".{key}.lock"), "w") as lock_file:
                fcntl.flock(lock_file, fcntl.LOCK_EX)
                manifest = _read_manifest(path)
                if manifest is None:
                    shown = _relative(toolchain.lock, self.root)
                    self.stream.write(f"venv: no file manifest of {shown} in {path.parent} yet: deriving it "
                                      "from its pinned wheels ...\n")
                    self.stream.flush()
                    started = time.monotonic()
                    with tempfile.TemporaryDirectory(prefix="mha-ci-wheels-") as wheels:
                        manifest = self._derive(toolchain, self._download_wheels(toolchain.lock, Path(wheels),
                                                                                 self.base_python))
                    self._store_manifest(toolchain, manifest)
                    self.stream.write(f"venv: manifest of {shown}: {len(manifest.files)} files "
                                      f"({time.monotonic() - started:.1f} s)\n")
        self._manifests[key] = manifest
        return manifest

    def _derive(self, toolchain: Toolchain, wheels: list[Path]) -> Manifest:
        try:
            return derive(wheels, read_hashes(toolchain.lock), self._base().site_rel)
        except ManifestError as exc:
            raise EnvironmentProblem(f"toolchain {toolchain.name}: the wheels of {toolchain.lock} make no file "
                                     f"manifest: {exc}") from None
        except (OSError, ValueError) as exc:        # a zip that does not open, a RECORD that does not parse
            raise EnvironmentProblem(f"toolchain {toolchain.name}: cannot read the wheels of {toolchain.lock}: "
                                     f"{exc}") from None

    def _store_manifest(self, toolchain: Toolchain, manifest: Manifest) -> None:
        key = f"{lock_sha256(toolchain.lock)}-py{self._base_version()}"
        path = self.state / "venv-manifests" / f"{key}.json"
        self._manifests[key] = manifest
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, manifest.to_text() + "\n")
        except (OSError, EnvironmentProblem) as exc:     # the next run derives it again: slower, not wrong
            self.stream.write(f"venv: cannot keep the manifest of {toolchain.lock} in {path.parent}: {exc}\n")

    def _download_wheels(self, lock: Path, dest: Path, python: str) -> list[Path]:
        """`pip download` of exactly the lock's files for `python`, with the pip of the interpreter
        running mha-ci (never one from the cache); pip checks each against the lock's hashes."""
        cmd = [sys.executable, "-m", "pip", "--python", python, "download", "--no-input", "--no-deps",
               "--require-hashes", "--progress-bar", "off", "-r", str(lock), "-d", str(dest)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)
        out, err = self._waited(proc, f"downloading the wheels of {lock.name}")
        if proc.returncode != 0:
            tail = "\n".join((out + err).strip().splitlines()[-PIP_TAIL_LINES:])
            raise EnvironmentProblem(f"`pip download -r {lock}` for {python} failed (exit {proc.returncode}):\n{tail}")
        return sorted(dest.iterdir())

    # ----------------------------------------------------------------- building
    def _waited(self, proc: subprocess.Popen, what: str, every_s: float = HEARTBEAT_S):
        """Wait for `proc`, saying every `every_s` seconds that `what` is still running: a first
        build downloads and unpacks gigabytes (torch), minutes with nothing else on the screen."""
        started = time.monotonic()
        try:
            while True:
                try:
                    return proc.communicate(timeout=every_s)
                except subprocess.TimeoutExpired:
                    self.stream.write(f"  {what}: still running, {time.monotonic() - started:.0f} s so far\n")
                    self.stream.flush()
        except BaseException:          # Ctrl-C or a signal: the step must not outlive the build
            proc.kill()
            proc.wait()
            raise

    def _build(self, toolchain: Toolchain, target: Path) -> None:
        shown_lock = _relative(toolchain.lock, self.root)
        self.stream.write(f"creating venv for {toolchain.name} from {shown_lock} ...\n")
        self.stream.flush()
        started = time.monotonic()
        temp = Path(tempfile.mkdtemp(prefix=f".{target.name}{BUILDING}", dir=self.venvs))
        log_path = self.venvs / f"{target.name}.install.log"
        python = str(temp / "bin" / "python")
        try:
            with open(log_path, "w") as log, tempfile.TemporaryDirectory(prefix="mha-ci-wheels-") as wheelhouse:
                self._step([self.base_python, "-m", "venv", "--without-pip", str(temp)], log, log_path, toolchain)
                # pip finds torch's CPU wheel through its configured find-links (/opt/wheels here),
                # so the caller's pip configuration stays in the environment of these steps.
                log.write(f"$ pip --python {python} download --require-hashes -r {toolchain.lock}\n")
                try:
                    wheels = self._download_wheels(toolchain.lock, Path(wheelhouse), python)
                except EnvironmentProblem as exc:
                    log.write(f"{exc}\n")
                    raise EnvironmentProblem(f"creating the venv for toolchain {toolchain.name} failed at the "
                                             f"download of its wheels; full log: {log_path}\n{exc}") from None
                log.write("downloaded: " + " ".join(w.name for w in wheels) + "\n")
                size = sum(w.stat().st_size for w in wheels)
                self.stream.write(f"  {len(wheels)} wheels ({size / 1e6:.0f} MB) downloaded and checked against the "
                                  f"lock's hashes in {time.monotonic() - started:.0f} s; installing ...\n")
                self.stream.flush()
                self._store_manifest(toolchain, self._derive(toolchain, wheels))
                self._step([sys.executable, "-m", "pip", "--python", python, "install", "--no-input", "--no-deps",
                            "--require-hashes", "--no-index", "--no-compile", "--find-links", wheelhouse,
                            "-r", str(toolchain.lock)], log, log_path, toolchain)
            write_atomic(temp / MARKER, json.dumps({
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
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._waited(proc, f"`{' '.join(Path(c).name if i == 0 else c for i, c in enumerate(cmd[:4]))} ...`")
        if proc.returncode != 0:
            log.flush()
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-PIP_TAIL_LINES:])
            raise EnvironmentProblem(f"creating the venv for toolchain {toolchain.name} failed at "
                                     f"`{' '.join(cmd[:4])} ...` (exit {proc.returncode}); full log: {log_path}\n{tail}")

    # ----------------------------------------------------------------- running
    def run(self, payload: PayloadRun) -> PayloadResult:
        # Bytecode goes to (and is read from) the state folder: never from the cache's __pycache__.
        payload = dataclasses.replace(payload, env={**payload.env, "PYTHONPYCACHEPREFIX": str(self.state / "pycache")})
        while True:
            env = self.ensure_env(payload.toolchain)
            with self.in_use(env):
                if self._complete(env):
                    return run_python_payload(str(env / "bin" / "python"), payload, self.root, executor=self.name,
                                              stream=self.stream, provenance={"venv": str(env)})
            self._verified.discard(env)     # pruned between its check and its use: build it again

    @contextlib.contextmanager
    def in_use(self, env: Path) -> Iterator[None]:
        """Hold `env`'s lock shared while a payload runs in it (a build or `mha-ci cache prune`
        takes it exclusively, so neither pulls the environment away), and mark it used now: the
        lock file's mtime is the environment's last use."""
        with open(self._lock_path(env.name), "a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_SH)
            try:
                os.utime(lock_file.name)
            except OSError:
                pass                        # not our file: the last use shown is older, nothing else
            yield


def _read_manifest(path: Path) -> Manifest | None:
    try:
        return Manifest.from_text(path.read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _relative(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)
