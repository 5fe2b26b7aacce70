"""The docker executor against a real dockerd (marker `docker`; CI starts one with
.ci/docker-setup.sh). These tests fail, never skip, when the daemon is unreachable: a CI that
meant to run them must not pass without them.

Building the two CPU images cold is most of the time here (~3 min each on 2 cores); later runs
reuse them while their content tag is unchanged.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from mha_ci.containers.engine import connect, ensure_image
from mha_ci.containers.images import image_spec
from mha_ci.errors import EnvironmentProblem
from mha_ci.executors.base import PayloadRun
from mha_ci.executors.docker import DockerExecutor
from mha_ci.model.types import Arch, Toolchain

pytestmark = pytest.mark.docker

TOOLCHAINS = ("triton-3.4", "triton-3.8")

# A payload of a throwaway checkout: what the container lets it see and do.
PROBE = '''
import errno, json, os, sys, time
from pathlib import Path
mode, out = sys.argv[1], Path(os.environ["MHA_CI_OUT"])
if mode == "inspect":
    try:
        Path(sys.argv[2], "written-by-payload").write_text("x")
        checkout = "writable"
    except OSError as e:
        checkout = errno.errorcode.get(e.errno, str(e.errno))
    (out / "inspect.json").write_text(json.dumps({
        "checkout": checkout, "env": dict(os.environ), "cwd": os.getcwd(),
        "uid": os.getuid(), "gid": os.getgid(),
        "host_root_visible": sorted(p.name for p in Path("/").iterdir())}))
elif mode == "sleep":
    print("sleeping", flush=True)
    time.sleep(float(sys.argv[2]))
elif mode == "alloc":
    blocks = [bytearray(1 << 20) for _ in range(int(sys.argv[2]))]
    print("allocated", len(blocks), flush=True)
elif mode == "exit":
    print("exiting with", sys.argv[2], flush=True)
    sys.exit(int(sys.argv[2]))
'''


@pytest.fixture(scope="module")
def client():
    return connect()     # EnvironmentProblem, i.e. a failure, when dockerd is not running


@pytest.fixture(scope="module")
def fake_root():
    """A checkout with one payload module (mha_ci.payloads.probe) and nothing else. Readable by
    every uid (pytest's own tmp folders are 0700): one test runs the payload as another user."""
    root = Path(tempfile.mkdtemp(prefix="mha-ci-checkout-"))
    root.chmod(0o755)
    yield from _filled(root)
    shutil.rmtree(root, ignore_errors=True)


def _filled(root: Path):
    pkg = root / "src" / "mha_ci" / "payloads"
    pkg.mkdir(parents=True)
    (root / "src" / "mha_ci" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "probe.py").write_text(textwrap.dedent(PROBE))
    for path in (root / "src", root / "src" / "mha_ci", pkg):
        path.chmod(0o755)
    yield root


CPU = Arch(name="interpreter", vendor="cpu", description="CPU interpreter", device="none",
           runner_labels=(), visible_devices_env=None, compile_target=None)


def toolchain(repo_root: Path, name: str, pins: dict[str, str] | None = None) -> Toolchain:
    from mha_ci.model.lockfile import read_pins

    lock = repo_root / "containers" / name / "requirements.lock"
    return Toolchain(name=name, role="test", lock=lock, container_dir=lock.parent,
                     pins=read_pins(lock) if pins is None else pins)


def probe(repo_root, out_dir: Path, *args: str, timeout_s=None, prefix=None) -> PayloadRun:
    return PayloadRun(module="probe", args=args, toolchain=toolchain(repo_root, "triton-3.8"),
                      arch=CPU, out_dir=out_dir, timeout_s=timeout_s,
                      log_prefix=prefix or f"probe-{uuid.uuid4().hex[:8]}")


def containers_of(client, prefix: str) -> list:
    return client.containers.list(all=True, filters={"label": f"mha-ci.log-prefix={prefix}"})


@pytest.mark.parametrize("name", TOOLCHAINS)
def test_cpu_image_builds_and_holds_the_pinned_versions(client, repo_root, name, tmp_path):
    spec = image_spec(repo_root / "containers" / name, name, "cpu")
    t0 = time.monotonic()
    built = ensure_image(client, spec)
    print(f"{built.tag}: {'built' if built.built else 'reused'} in {time.monotonic() - t0:.0f} s")
    assert client.images.get(built.tag).id == built.id
    # the real payload contract: pincheck enforces the lock's pins inside the image
    run = PayloadRun(module="pincheck", args=("--record", "versions.json"),
                     toolchain=toolchain(repo_root, name), arch=CPU, out_dir=tmp_path / "out",
                     log_prefix=f"pincheck {name}")
    result = DockerExecutor(repo_root).run(run)
    assert (result.exit_code, result.error) == (0, None)
    versions = json.loads((tmp_path / "out" / "versions.json").read_text())
    assert versions["triton"] == name.removeprefix("triton-") + ".0"
    assert versions["torch"] == "2.13.0+cpu"
    assert result.provenance["image_id"] == built.id
    assert result.provenance["base_digest"].startswith(("local:sha256:", "sha256:", "mha-ci"))


def test_pin_mismatch_in_the_image_is_an_environment_problem(repo_root, tmp_path):
    wrong = toolchain(repo_root, "triton-3.8", pins={"triton": "3.7.0"})
    run = PayloadRun(module="pincheck", args=(), toolchain=wrong, arch=CPU,
                     out_dir=tmp_path / "out")
    with pytest.raises(EnvironmentProblem, match="pins triton==3.7.0 but the environment has triton 3.8.0"):
        DockerExecutor(repo_root).run(run)


def test_checkout_is_read_only_output_writable_nothing_else_leaks(client, repo_root, fake_root,
                                                                   tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_CI_TEST_SECRET", "must-not-leak")
    out = tmp_path / "out"
    run = probe(repo_root, out, "inspect", str(fake_root / "src"))
    result = DockerExecutor(fake_root).run(run)
    assert (result.exit_code, result.error) == (0, None)
    seen = json.loads((out / "inspect.json").read_text())
    assert seen["checkout"] == "EROFS"
    assert not (fake_root / "src" / "written-by-payload").exists()
    assert "MHA_CI_TEST_SECRET" not in seen["env"]
    assert seen["env"]["PYTHONPATH"] == str(fake_root / "src")   # same paths as on the host
    assert seen["cwd"] == str(fake_root)
    assert (seen["uid"], seen["gid"]) == (os.getuid(), os.getgid())
    assert not containers_of(client, run.log_prefix), "container left behind"


def test_files_in_out_belong_to_the_host_user(repo_root, fake_root, tmp_path, monkeypatch):
    # Pretend the caller is an unprivileged user (uid 4321): the payload runs as that uid, so
    # what it writes is that user's, not root's.
    import mha_ci.executors.docker as docker_executor

    monkeypatch.setattr(docker_executor.os, "getuid", lambda: 4321)
    monkeypatch.setattr(docker_executor.os, "getgid", lambda: 4321)
    out = fake_root / "out-other-user"
    out.mkdir()
    out.chmod(0o777)      # the real user owns their output folder; here root made it
    result = DockerExecutor(fake_root).run(probe(repo_root, out, "inspect", str(fake_root)))
    assert result.exit_code == 0
    st = (out / "inspect.json").stat()
    assert (st.st_uid, st.st_gid) == (4321, 4321)


def test_exit_code_is_passed_through(repo_root, fake_root, tmp_path):
    lines = []
    result = DockerExecutor(fake_root, log=lines.append).run(
        probe(repo_root, tmp_path / "out", "exit", "7", prefix="exit-job"))
    assert (result.exit_code, result.timed_out, result.error) == (7, False, None)
    assert "[exit-job] exiting with 7" in lines


def test_timeout_kills_and_removes_the_container(client, repo_root, fake_root, tmp_path):
    run = probe(repo_root, tmp_path / "out", "sleep", "300", timeout_s=5)
    t0 = time.monotonic()
    result = DockerExecutor(fake_root).run(run)
    assert result.timed_out and "timed out after 5 s" in result.error
    assert time.monotonic() - t0 < 60
    assert not containers_of(client, run.log_prefix), "container left behind"


def test_oom_kill_is_reported_as_an_error(client, repo_root, fake_root, tmp_path):
    run = probe(repo_root, tmp_path / "out", "alloc", "1024")      # 1 GiB against 64 MiB
    result = DockerExecutor(fake_root, mem_limit="64m").run(run)
    assert result.exit_code != 0 and not result.timed_out
    assert result.error and "OOM" in result.error and "64m" in result.error
    assert not containers_of(client, run.log_prefix), "container left behind"


def test_ctrl_c_removes_the_container(client, repo_root, fake_root, tmp_path):
    prefix = f"ctrl-c-{uuid.uuid4().hex[:8]}"
    # A shell that starts jobs in the background (CI runners, `cmd &`) hands them SIGINT
    # ignored, and Python then keeps it ignored: restore the default so SIGINT is Ctrl-C.
    script = textwrap.dedent(f"""
        import signal
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from pathlib import Path
        from test_docker import probe
        from mha_ci.executors.docker import DockerExecutor
        DockerExecutor(Path({str(fake_root)!r})).run(
            probe(Path({str(repo_root)!r}), Path({str(tmp_path / 'out')!r}), "sleep", "300",
                  prefix={prefix!r}))
    """)
    # this file's folder on the path: the script imports `probe` from it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo_root / "src"), str(Path(__file__).parent)])}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 120
        while not any(c.status == "running" for c in containers_of(client, prefix)):
            assert time.monotonic() < deadline, "the payload's container never started"
            assert proc.poll() is None, "the executor exited before its container ran"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not containers_of(client, prefix), "container left behind after Ctrl-C"
