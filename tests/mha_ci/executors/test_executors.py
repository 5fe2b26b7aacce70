"""The venv and host executors: clean environment, pin check as exit 3, streaming, timeouts, and
the venv cache (named by lock hash, built atomically, built once under concurrency, checked against
pip's RECORD before reuse, stale build folders removed).

The venv tests build tiny environments from a one-package lock (iniconfig, a few seconds each);
the real toolchain environments are built by the slow tests in test_run_correctness.py.
"""
from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from mha_ci.errors import EnvironmentProblem
from mha_ci.executors.base import PayloadRun
from mha_ci.executors.host import HostExecutor
from mha_ci.executors.local_process import payload_environment
from mha_ci.executors.venv import MARKER, VenvExecutor
from mha_ci.model.types import Arch, Toolchain

REPO = Path(__file__).resolve().parents[3]
INTERPRETER = Arch(name="interpreter", vendor="cpu", description="", device="none", runner_labels=(),
                   visible_devices_env=None, compile_target=None, workers=1)
TINY_LOCK = ("iniconfig==2.3.1 \\\n"
             "    --hash=sha256:9121e2c1fdb355232495be3194c8dfe87ccc2d5dee45947b78e68f499790d7a7\n")


def _toolchain(name: str, pins: dict, lock: Path | None = None) -> Toolchain:
    lock = lock or REPO / "containers" / "triton-3.4" / "requirements.lock"
    return Toolchain(name=name, role="test", lock=lock, container_dir=lock.parent, pins=pins)


def _payload(tmp_path: Path, toolchain: Toolchain, module: str = "pincheck", args: tuple = (), **kw) -> PayloadRun:
    return PayloadRun(module=module, args=args, toolchain=toolchain, arch=INTERPRETER, out_dir=tmp_path / "out",
                      **kw)


def _checkout(tmp_path: Path, test_source: str) -> Path:
    """A checkout root whose tests/mha holds one test file; src/ is this repository's."""
    root = tmp_path / "checkout"
    (root / "tests" / "mha").mkdir(parents=True)
    (root / "src").symlink_to(REPO / "src")
    (root / "tests" / "mha" / "test_tiny.py").write_text(test_source)
    return root


# --------------------------------------------------------------------------- environment

def test_payload_environment_is_clean(tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_CI_SECRET_OF_THE_SHELL", "leak")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "2,3")
    payload = _payload(tmp_path, _toolchain("triton-3.4", {"triton": "3.4.0"}), env={"TRITON_INTERPRET": "1"})
    env = payload_environment(payload, REPO)
    assert "MHA_CI_SECRET_OF_THE_SHELL" not in env
    assert env["HIP_VISIBLE_DEVICES"] == "2,3"        # the GPUs this runner was given pass through
    assert env["TRITON_INTERPRET"] == "1"
    assert env["PYTHONPATH"] == str(REPO / "src")
    assert env["MHA_CI_OUT"] == str(tmp_path / "out")
    assert '"triton": "3.4.0"' in env["MHA_CI_PINS"] and '"mode": "enforce"' in env["MHA_CI_PINS"]
    assert "PATH" in env


# --------------------------------------------------------------------------- host executor

def test_host_executor_pin_mismatch_is_an_environment_problem(tmp_path):
    stream = io.StringIO()
    executor = HostExecutor(REPO, stream=stream)
    with pytest.raises(EnvironmentProblem) as info:
        executor.run(_payload(tmp_path, _toolchain("triton-3.4", {"pytest": "0.0.1"}), log_prefix="job-x"))
    assert "toolchain triton-3.4 pins pytest==0.0.1 but the environment has pytest" in str(info.value)
    assert info.value.exit_code == 3
    assert "[job-x] mha-ci pin check:" in stream.getvalue()     # streamed with the job's prefix


def test_host_toolchain_only_records(tmp_path):
    stream = io.StringIO()
    result = HostExecutor(REPO, stream=stream).run(
        _payload(tmp_path, _toolchain("host", {"pytest": "0.0.1"}), log_prefix="p"))
    assert result.exit_code == 0 and not result.timed_out
    assert result.provenance["executor"] == "host"
    assert '"pytest":' in stream.getvalue()


@pytest.mark.slow   # over a second (subprocesses): out of `make test-fast`
def test_timeout_kills_the_payload_and_says_so(tmp_path):
    root = _checkout(tmp_path, "import time\n\ndef test_hangs():\n    time.sleep(60)\n")
    out = tmp_path / "out"
    (out / "j").mkdir(parents=True)
    (out / "j" / "tests.txt").write_text("tests/mha/test_tiny.py::test_hangs\n")
    payload = PayloadRun(module="correctness", args=("run", "--tests", "j/tests.txt", "--junit", "j/x.xml",
                                                     "--report", "j/r.json"),
                         toolchain=_toolchain("host", {}), arch=INTERPRETER, out_dir=out, timeout_s=3)
    result = HostExecutor(root, stream=io.StringIO()).run(payload)
    assert result.timed_out
    assert "timed out after 3 s" in result.error
    assert result.provenance["wall_s"] < 30


# --------------------------------------------------------------------------- venv executor

@pytest.fixture
def tiny_lock(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("MHA_CI_STATE", str(tmp_path / "state"))
    lock = tmp_path / "containers" / "tiny" / "requirements.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(TINY_LOCK)
    (tmp_path / "src").symlink_to(REPO / "src")      # tmp_path is the checkout root of these tests
    return lock


@pytest.mark.slow
def test_venv_is_built_once_reused_and_named_by_lock_hash(tmp_path, tiny_lock):
    stream = io.StringIO()
    executor = VenvExecutor(tmp_path, cache=tmp_path / "cache", stream=stream)
    toolchain = _toolchain("tiny", {"iniconfig": "2.3.1"}, lock=tiny_lock)
    paths: list[Path] = []
    threads = [threading.Thread(target=lambda: paths.append(executor.ensure_env(toolchain))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(paths)) == 1
    env = paths[0]
    assert env.name.startswith("tiny-") and len(env.name) == len("tiny-") + 12
    assert stream.getvalue().count("creating venv for tiny from containers/tiny/requirements.lock ...") == 1
    assert "done in" in stream.getvalue()
    assert (env / MARKER).is_file()
    # exactly the pinned wheel: no pip of its own, no bytecode; its manifest kept outside the cache
    site = next(env.glob("lib/python*/site-packages"))
    assert sorted(p.name for p in site.iterdir()) == ["iniconfig", "iniconfig-2.3.1.dist-info"]
    assert not list(env.rglob("*.pyc"))
    assert len(list((tmp_path / "state" / "venv-manifests").glob("*.json"))) == 1

    # the payload really runs in it, with the pins checked
    result = executor.run(_payload(tmp_path, toolchain))
    assert result.exit_code == 0 and result.provenance["venv"] == str(env)
    assert stream.getvalue().count("creating venv for tiny from") == 1     # reused

    # a half-built environment (no completion marker) is never used: it is rebuilt
    (env / MARKER).unlink()
    assert executor.ensure_env(toolchain) == env
    assert stream.getvalue().count("creating venv for tiny from") == 2

    # a changed lock file is a different environment
    tiny_lock.write_text(TINY_LOCK + "# touched\n")
    assert executor.env_path(toolchain) != env
    assert not [p for p in (tmp_path / "cache" / "venvs").iterdir() if ".building-" in p.name]


@pytest.mark.slow
def test_venv_build_failure_leaves_nothing_behind(tmp_path, tiny_lock):
    tiny_lock.write_text(TINY_LOCK.replace("9121e2c1", "00000000"))      # wrong hash: pip must refuse
    executor = VenvExecutor(tmp_path, cache=tmp_path / "cache", stream=io.StringIO())
    toolchain = _toolchain("tiny", {"iniconfig": "2.3.1"}, lock=tiny_lock)
    with pytest.raises(EnvironmentProblem) as info:
        executor.ensure_env(toolchain)
    assert "creating the venv for toolchain tiny failed" in str(info.value)
    venvs = tmp_path / "cache" / "venvs"
    assert not executor.env_path(toolchain).exists()
    assert not [p for p in venvs.iterdir() if p.is_dir()]              # no temp folder left


def test_venv_cache_follows_mha_ci_cache(tmp_path, monkeypatch, tiny_lock):
    monkeypatch.setenv("MHA_CI_CACHE", str(tmp_path / "elsewhere"))
    executor = VenvExecutor(tmp_path)
    assert executor.venvs == (tmp_path / "elsewhere" / "venvs").resolve()
    monkeypatch.delenv("MHA_CI_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # the machine's, not the checkout's: another clone gets the same folder
    assert VenvExecutor(tmp_path).venvs == (tmp_path / "xdg").resolve() / "mha-ci" / "venvs"
    assert VenvExecutor(tmp_path / "other-clone").venvs == VenvExecutor(tmp_path).venvs
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")       # invalid under the XDG rule: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert VenvExecutor(tmp_path).venvs == (tmp_path / "home").resolve() / ".cache" / "mha-ci" / "venvs"


def test_missing_lock_file_is_an_environment_problem(tmp_path):
    executor = VenvExecutor(tmp_path, cache=tmp_path / "cache", stream=io.StringIO())
    with pytest.raises(EnvironmentProblem, match="does not exist"):
        executor.ensure_env(_toolchain("gone", {}, lock=tmp_path / "nope.lock"))


# The checks of a cached environment against its lock's wheels, with a stand-in for pip:
# tests/mha_ci/fault_injection/test_forged_caches.py.


# --------------------------------------------------------------------------- docker image choice

class _Image:
    def __init__(self, client: "_Docker", id_: str, labels: dict[str, str]) -> None:
        self.client, self.id, self.labels, self.attrs = client, id_, labels, {}

    def tag(self, repository: str, tag: str) -> None:
        self.client.images.store[f"{repository}:{tag}"] = self


class _Images:
    def __init__(self, client: "_Docker") -> None:
        self.client, self.store, self.registry = client, {}, {}

    def get(self, reference: str) -> _Image:
        import docker.errors
        if reference not in self.store:
            raise docker.errors.ImageNotFound(reference)
        return self.store[reference]

    def pull(self, reference: str) -> _Image:
        import docker.errors
        if reference not in self.registry:
            raise docker.errors.NotFound(f"manifest unknown: {reference}")
        self.store[reference] = self.registry[reference]
        return self.store[reference]


class _Docker:
    """What ensure_image asks of a docker client, with images held in dictionaries."""

    def __init__(self) -> None:
        self.images = _Images(self)


@pytest.fixture
def image_setup(pipeline_root, tmp_path, monkeypatch):
    from mha_ci.containers import engine
    from mha_ci.containers.images import content_digest, discover
    from mha_ci.model.loader import load_pipeline
    monkeypatch.setenv("MHA_CI_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MHA_CI_REGISTRY", raising=False)
    spec = discover(load_pipeline(pipeline_root).toolchains.values())[0]
    client = _Docker()
    client.images.store[spec.base_image] = _Image(client, "sha256:base", {})
    builds: list[str] = []

    def build(client_, spec_, base, tag, t0, log):
        builds.append(tag)
        client_.images.store[tag] = _Image(client_, "sha256:fresh", {engine.LABEL_CONTENT_DIGEST: content_digest(spec_)})
        return engine.BuiltImage(tag, "sha256:fresh", spec_.base_image, "d", True, 0.0)
    monkeypatch.setattr(engine, "_build_locked", build)
    return client, spec, builds, content_digest(spec)


def test_a_local_image_is_used_when_its_content_digest_matches(image_setup):
    from mha_ci.containers.engine import LABEL_CONTENT_DIGEST, ensure_image
    client, spec, builds, digest = image_setup
    client.images.store[spec.reference()] = _Image(client, "sha256:ok", {LABEL_CONTENT_DIGEST: digest})
    assert ensure_image(client, spec, build=False, log=lambda line: None).id == "sha256:ok" and builds == []


@pytest.mark.parametrize("labels", [{}, {"mha-ci.content-digest": "0123456789ab"}], ids=["unlabelled", "other"])
def test_a_local_image_whose_digest_differs_is_rebuilt_or_refused(image_setup, labels):
    from mha_ci.containers.engine import ensure_image
    client, spec, builds, digest = image_setup
    client.images.store[spec.reference()] = _Image(client, "sha256:planted", labels)
    with pytest.raises(EnvironmentProblem, match=f"content digest .*{digest}"):
        ensure_image(client, spec, build=False, log=lambda line: None)
    lines: list[str] = []
    assert ensure_image(client, spec, log=lines.append).id == "sha256:fresh" and builds == [spec.reference()]
    assert any("rebuilding" in line for line in lines), lines


def test_a_pulled_image_whose_digest_differs_is_not_used(image_setup, monkeypatch):
    from mha_ci.containers.engine import ensure_image
    client, spec, builds, digest = image_setup
    monkeypatch.setenv("MHA_CI_REGISTRY", "ghcr.io/owner/repo")
    client.images.registry[spec.reference()] = _Image(client, "sha256:from-a-pull-request", {})
    with pytest.raises(EnvironmentProblem, match="content digest"):
        ensure_image(client, spec, build=False, log=lambda line: None)


def test_a_long_build_step_says_it_is_still_running_and_returns_its_output(tmp_path):
    import subprocess
    import sys

    stream = io.StringIO()
    executor = VenvExecutor(tmp_path, cache=tmp_path / "cache", stream=stream)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.7); print('done')"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, _ = executor._waited(proc, "downloading the wheels of x.lock", every_s=0.2)
    assert out.strip() == "done" and proc.returncode == 0
    lines = [line for line in stream.getvalue().splitlines() if "still running" in line]
    assert len(lines) >= 2 and lines[0].startswith("  downloading the wheels of x.lock: still running, ")


def test_an_interrupted_build_step_does_not_outlive_the_build(tmp_path, monkeypatch):
    import subprocess
    import sys

    executor = VenvExecutor(tmp_path, cache=tmp_path / "cache", stream=io.StringIO())
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    calls = []

    def interrupted(timeout=None):
        calls.append(timeout)
        raise KeyboardInterrupt

    monkeypatch.setattr(proc, "communicate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        executor._waited(proc, "installing", every_s=0.1)
    assert proc.poll() is not None and calls == [0.1]
