"""Fault injection, forged caches (issue 34): whoever can write the cache folder (a CI cache
restored from another run, a cache shared between clones) must not be able to run code in a
payload or pass a gate with it.

Toolchain environments: each case forges or tampers with a cached environment of a one-wheel
toolchain, then runs a payload through the venv executor as `mha-ci run` would. No code planted
in the cache may run, and an environment that is not exactly what its lock's wheels install is
rebuilt. The wheel is made here and pinned by its sha256 in a lock file; pip is stood in for by
copying the wheel (download) and unpacking it into a real `venv` (build), so each case takes
well under a second. tests/mha_ci/executors/test_executors.py builds real ones with pip.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import json
import os
import shutil
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from mha_ci.executors.base import PayloadRun
from mha_ci.executors.venv import MARKER, VenvExecutor
from mha_ci.model.types import Arch, Toolchain

REPO = Path(__file__).resolve().parents[3]
INTERPRETER = Arch(name="interpreter", vendor="cpu", description="", device="none", runner_labels=(),
                   visible_devices_env=None, compile_target=None, workers=1)
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"
SOURCE = b"VALUE = 1\n"
# A .pth in a wheel is legitimate (setuptools ships one); this one imports the package at every
# interpreter start, so bytecode planted for it would run before any payload code.
WHEEL_FILES = {"tinypkg/__init__.py": SOURCE, "tinypkg.pth": b"import tinypkg\n"}


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def make_wheel(folder: Path, files: dict[str, bytes], name: str = "tinypkg", version: str = "1.0") -> Path:
    """A wheel as a build backend writes it: the files, METADATA, WHEEL and a RECORD of them all."""
    dist = f"{name}-{version}.dist-info"
    files = {**files, f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={_b64(hashlib.sha256(data).digest())},{len(data)}\n" for path, data in files.items())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
        archive.writestr(f"{dist}/RECORD", record + f"{dist}/RECORD,,\n")
    return path


def install_like_pip(wheel: Path, target: Path) -> None:
    """What `python -m venv --without-pip` and `pip install --no-compile` of the wheel leave."""
    venv.EnvBuilder(symlinks=True, with_pip=False).create(target)
    site = target / "lib" / PY / "site-packages"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    info = site / "tinypkg-1.0.dist-info"
    (info / "INSTALLER").write_text("pip\n")
    with open(info / "RECORD", "a") as record:
        record.write("tinypkg-1.0.dist-info/INSTALLER,,\n")


class TinyToolchain:
    """A checkout whose one toolchain pins one wheel made here, with pip stood in for."""

    def __init__(self, tmp_path: Path, monkeypatch, pycache: Path) -> None:
        self.root = tmp_path
        (tmp_path / "src").symlink_to(REPO / "src")      # payloads import mha_ci from <root>/src
        self.wheel = make_wheel(tmp_path / "wheels", WHEEL_FILES)
        self.lock = tmp_path / "containers" / "tiny" / "requirements.lock"
        self.lock.parent.mkdir(parents=True)
        self.lock.write_text(f"tinypkg==1.0 \\\n    --hash=sha256:{hashlib.sha256(self.wheel.read_bytes()).hexdigest()}\n")
        self.toolchain = Toolchain(name="tiny", role="test", lock=self.lock, container_dir=self.lock.parent,
                                   pins={"tinypkg": "1.0"})
        self.canary = tmp_path / "planted-code-ran"
        self.builds: list[Path] = []
        monkeypatch.setenv("MHA_CI_STATE", str(tmp_path / "state"))     # what vouches for the cache: outside it
        # the payloads' bytecode (the standard library's too) compiled once for the module, not per case
        (tmp_path / "state").mkdir()
        (tmp_path / "state" / "pycache").symlink_to(pycache)
        # pip download: the wheel the lock pins (a test may swap in another)
        monkeypatch.setattr(VenvExecutor, "_download_wheels",
                            lambda executor, lock, dest, python: [Path(shutil.copy(self.wheel, dest))])

    def executor(self) -> VenvExecutor:
        """A new executor: a new `mha-ci run` (nothing verified yet in this process)."""
        executor = VenvExecutor(self.root, cache=self.root / "cache", stream=io.StringIO())

        def build(toolchain, target):
            self.builds.append(target)
            install_like_pip(self.wheel, target)
            (target / MARKER).write_text(json.dumps({"base_python_version": executor._base_version()}))
        executor._build = build      # type: ignore[method-assign]
        return executor

    def run(self, executor: VenvExecutor | None = None):
        executor = executor or self.executor()
        payload = PayloadRun(module="pincheck", args=(), toolchain=self.toolchain, arch=INTERPRETER,
                             out_dir=self.root / "out")
        return executor.run(payload), executor

    def env(self) -> Path:
        return self.executor().env_path(self.toolchain)

    def site(self) -> Path:
        return self.env() / "lib" / PY / "site-packages"


@pytest.fixture(scope="module")
def pycache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pycache")


@pytest.fixture
def setup(tmp_path, monkeypatch, pycache) -> TinyToolchain:
    return TinyToolchain(tmp_path, monkeypatch, pycache)


def planter(canary: Path) -> str:
    return f"import pathlib; pathlib.Path({str(canary)!r}).write_text('ran')\n"


# Each case changes a cached environment; `built` is whether it was built by mha-ci before.
def script_as_python(s: TinyToolchain) -> None:
    """The issue's probe: a folder that was never built, holding the completion marker, an empty
    RECORD per pinned package and a script as bin/python."""
    env = s.env()
    info = env / "lib" / PY / "site-packages" / "tinypkg-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "RECORD").write_text("")
    (env / "bin").mkdir()
    (env / "bin" / "python").write_text(f"#!/bin/sh\necho ran > {s.canary}\nexit 0\n")
    (env / "bin" / "python").chmod(0o755)
    (env / MARKER).write_text(json.dumps({"base_python_version": s.executor()._base_version()}))


def same_size_edit_with_its_record(s: TinyToolchain) -> None:
    """Code edited to the same size, and RECORD rewritten to match: the cache vouches for itself."""
    init = s.site() / "tinypkg" / "__init__.py"
    init.write_bytes(SOURCE.replace(b"1", b"2"))
    record = s.site() / "tinypkg-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text().replace(_b64(hashlib.sha256(SOURCE).digest()),
                                                 _b64(hashlib.sha256(init.read_bytes()).digest())))


def pth_added(s: TinyToolchain) -> None:
    """A .pth line that starts with `import` runs at every interpreter start."""
    (s.site() / "zz-planted.pth").write_text(planter(s.canary))


def sitecustomize_added(s: TinyToolchain) -> None:
    (s.site() / "sitecustomize.py").write_text(planter(s.canary))


def pth_symlinked_from_outside(s: TinyToolchain) -> None:
    outside = s.root / "outside.pth"
    outside.write_text(planter(s.canary))
    (s.site() / "zz-planted.pth").symlink_to(outside)


def bytecode_planted(s: TinyToolchain) -> None:
    """Bytecode for tinypkg/__init__.py whose header matches the source (mtime and size), so the
    import system takes it instead of the source."""
    source = s.site() / "tinypkg" / "__init__.py"
    code = compile(planter(s.canary) + "VALUE = 1\n", str(source), "exec")
    stat = source.stat()
    data = importlib._bootstrap_external._code_to_timestamp_pyc(code, int(stat.st_mtime), stat.st_size)  # type: ignore[attr-defined]
    target = Path(importlib.util.cache_from_source(str(source)))
    if sys.pycache_prefix:      # this process's own prefix says nothing about the payload's
        target = source.parent / "__pycache__" / target.name
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(data)


def home_moved(s: TinyToolchain) -> None:
    """pyvenv.cfg's home names where the interpreter takes its standard library from."""
    cfg = s.env() / "pyvenv.cfg"
    elsewhere = s.root / "elsewhere" / "bin"
    elsewhere.mkdir(parents=True)
    lines = [f"home = {elsewhere}" if line.startswith("home") else line for line in cfg.read_text().splitlines()]
    cfg.write_text("\n".join(lines) + "\n")


def cfg_beside_the_interpreter(s: TinyToolchain) -> None:
    """site.py reads bin/pyvenv.cfg before the one in the environment's root."""
    (s.env() / "bin" / "pyvenv.cfg").write_text("include-system-site-packages = true\n")


def installed_file_removed(s: TinyToolchain) -> None:
    (s.site() / "tinypkg" / "__init__.py").unlink()


# (case, was the environment built by mha-ci first, what the rebuild names; None: not rebuilt)
CASES = [
    (script_as_python, False, "bin/python is "),
    (same_size_edit_with_its_record, True, "tinypkg/__init__.py differs from the file its wheel installs"),
    (pth_added, True, "zz-planted.pth is not installed by any wheel the lock pins"),
    (sitecustomize_added, True, "sitecustomize.py is not installed by any wheel the lock pins"),
    (pth_symlinked_from_outside, True, "zz-planted.pth is a symlink or special file"),
    (bytecode_planted, True, None),        # never read (PYTHONPYCACHEPREFIX): nothing to rebuild
    (home_moved, True, "pyvenv.cfg names home"),
    (cfg_beside_the_interpreter, True, "bin/pyvenv.cfg exists"),
    (installed_file_removed, True, "tinypkg/__init__.py is missing"),
]


@pytest.mark.parametrize("tamper, built, reason", CASES, ids=[c[0].__name__ for c in CASES])
def test_a_forged_environment_never_runs_planted_code(setup, tamper, built, reason):
    if built:
        result, _ = setup.run()
        assert result.exit_code == 0 and len(setup.builds) == 1
    tamper(setup)
    result, executor = setup.run()
    shown = executor.stream.getvalue()          # type: ignore[attr-defined]
    assert not setup.canary.exists(), f"code planted in the cache ran ({tamper.__name__})"
    assert result.exit_code == 0, shown
    assert len(setup.builds) == int(built) + int(reason is not None), shown
    if reason is not None:
        assert f"is not what its lock's wheels install ({reason}" in shown and "rebuilding it" in shown, shown


def test_an_environment_still_differing_after_its_rebuild_is_an_environment_problem(setup):
    from mha_ci.errors import EnvironmentProblem

    executor = setup.executor()
    build = executor._build

    def broken_build(toolchain, target):
        build(toolchain, target)
        (target / "lib" / PY / "site-packages" / "tinypkg" / "__init__.py").unlink()
    executor._build = broken_build      # type: ignore[method-assign]
    with pytest.raises(EnvironmentProblem, match="right after it was built .tinypkg/__init__.py is missing"):
        setup.run(executor)


def test_a_wheel_other_than_the_pinned_one_makes_no_manifest(setup):
    from mha_ci.errors import EnvironmentProblem

    setup.run()
    pinned = hashlib.sha256(setup.wheel.read_bytes()).hexdigest()
    setup.wheel = make_wheel(setup.root / "other", {**WHEEL_FILES, "tinypkg/__init__.py": b"VALUE = 2\n"})
    shutil.rmtree(setup.root / "state" / "venv-manifests")       # a machine that did not build it
    with pytest.raises(EnvironmentProblem, match=f"has sha256 [0-9a-f]{{64}}; the lock pins tinypkg to {pinned}"):
        setup.run()


def test_a_source_distribution_makes_no_manifest(setup):
    from mha_ci.errors import EnvironmentProblem

    setup.run()
    setup.wheel = setup.root / "sdist" / "tinypkg-1.0.tar.gz"
    setup.wheel.parent.mkdir()
    setup.wheel.write_bytes(b"a source distribution")
    shutil.rmtree(setup.root / "state" / "venv-manifests")
    with pytest.raises(EnvironmentProblem, match="tinypkg-1.0.tar.gz is not a wheel"):
        setup.run()


def test_the_manifest_and_the_check_are_kept_outside_the_cache_and_reused(setup, monkeypatch):
    from mha_ci.executors import wheel_manifest

    downloads: list[Path] = []
    download = VenvExecutor._download_wheels
    monkeypatch.setattr(VenvExecutor, "_download_wheels",
                        lambda executor, lock, dest, python: downloads.append(dest) or download(executor, lock, dest, python))
    hashed: list[Path] = []
    file_sha256 = wheel_manifest.file_sha256
    monkeypatch.setattr(wheel_manifest, "file_sha256", lambda path: hashed.append(Path(path)) or file_sha256(path))

    setup.run()                 # built here: the manifest is derived (one download) and every file hashed
    assert len(downloads) == 1 and hashed
    state = setup.root / "state"
    assert [p.name for p in (state / "venv-manifests").glob("*.json")] and list((state / "venv-checks").glob("*.json"))
    assert not list((setup.root / "cache").rglob("venv-*"))
    hashed.clear()
    setup.run()                 # a later run: same files, same inodes and ctimes: no hashing, no download
    assert hashed == [] and len(downloads) == 1

    init = setup.site() / "tinypkg" / "__init__.py"
    before = init.stat()
    init.write_bytes(SOURCE)                           # same content, but written: ctime moves
    os.utime(init, ns=(before.st_atime_ns, before.st_mtime_ns))   # mtime set back; ctime cannot be
    setup.run()
    assert init in hashed and len(setup.builds) == 1   # hashed again, found equal, kept

    shutil.rmtree(state / "venv-manifests")             # a restored CI cache on a fresh machine
    hashed.clear()
    setup.run()
    assert len(downloads) == 2 and len(setup.builds) == 1


def test_the_state_folder_may_not_lie_inside_the_cache(setup, monkeypatch):
    from mha_ci.errors import ConfigError

    monkeypatch.setenv("MHA_CI_STATE", str(setup.root / "cache" / "state"))
    with pytest.raises(ConfigError, match="inside the cache"):
        setup.executor()


def test_stale_build_folders_are_removed_but_not_one_in_progress(setup):
    import fcntl

    executor = setup.executor()
    venvs = executor.venvs
    venvs.mkdir(parents=True)
    name = executor.env_path(setup.toolchain).name
    killed_here = venvs / f".{name}.building-abc123"            # this environment's build, killed
    killed_other = venvs / ".other-0123456789ab.building-def456"  # an older lock's build, killed
    in_progress = venvs / ".busy-0123456789ab.building-ghi789"   # another process builds it now
    for folder in (killed_here, killed_other, in_progress):
        (folder / "lib").mkdir(parents=True)
    with open(venvs / ".busy-0123456789ab.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        executor.ensure_env(setup.toolchain)
        assert not killed_here.exists() and not killed_other.exists()
        assert in_progress.is_dir()
