"""Images through a real registry: `mha-ci containers publish` pushes an image under
its reference, and a job whose image is not on the machine pulls it by the reference the GPU
matrix names (export/matrix.py image_reference). The registry is Debian's docker-registry
(distribution 2.8), started here on 127.0.0.1 with its storage in a temporary folder; docker
talks plain HTTP to 127.0.0.0/8 registries without configuration.

The triton-3.8 CPU image stands in for the GPU ones: the reference is computed by the same
function for every platform, and pushing a 10 GB CUDA image would add minutes for nothing more.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from mha_ci.containers.engine import connect, ensure_image
from mha_ci.containers.images import LOCAL_REGISTRY, spec_for
from mha_ci.executors.base import PayloadRun
from mha_ci.executors.docker import DockerExecutor
from mha_ci.export.matrix import image_reference
from mha_ci.model.loader import load_pipeline

pytestmark = [pytest.mark.docker]

TOOLCHAIN = "triton-3.8"
REGISTRY_PATH = "owner/repo"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """host:port of a fresh registry on 127.0.0.1 (fails, not skips, without docker-registry:
    .ci/docker-setup.sh installs it)."""
    binary = shutil.which("docker-registry")
    assert binary, "docker-registry missing: apt-get install docker-registry (.ci/docker-setup.sh)"
    folder = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = folder / "config.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {folder / 'data'}\n"
                      f"http:\n  addr: 127.0.0.1:{port}\nlog:\n  level: warn\n")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=open(folder / "log", "w"))
    address = f"127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://{address}/v2/", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"docker-registry did not answer on {address}: {(folder / 'log').read_text()[-2000:]}")
    yield address
    proc.terminate()
    proc.wait(timeout=10)


def tags_in(address: str, name: str) -> list[str]:
    try:
        with urllib.request.urlopen(f"http://{address}/v2/{REGISTRY_PATH}/{name}/tags/list", timeout=5) as r:
            return json.load(r).get("tags") or []
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise


def test_published_image_is_pulled_by_the_matrix_reference(registry, repo_root, tmp_path, monkeypatch):
    client = connect()
    pipeline = load_pipeline(repo_root)
    toolchain = pipeline.toolchains[TOOLCHAIN]
    cpu_arch = next(a for a in pipeline.archs.values() if a.device == "none")
    spec = spec_for(toolchain.on(cpu_arch.platform))
    monkeypatch.delenv("MHA_CI_REGISTRY", raising=False)
    local = ensure_image(client, spec)      # the local build (`make containers`) is the start

    monkeypatch.setenv("MHA_CI_REGISTRY", f"{registry}/{REGISTRY_PATH}")
    reference = image_reference(toolchain, cpu_arch)
    assert reference == spec.reference() == f"{registry}/{REGISTRY_PATH}/{spec.name}:{reference.rsplit(':', 1)[1]}"
    digest = reference.rsplit(":", 1)[1]
    assert tags_in(registry, spec.name) == []

    env = {**os.environ, "PYTHONPATH": str(repo_root / "src")}
    publish = [sys.executable, "-m", "mha_ci", "--root", str(repo_root), "containers", "publish",
               "--toolchain", TOOLCHAIN, "--platform", "cpu"]
    first = subprocess.run(publish, env=env, capture_output=True, text=True, timeout=1200)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"{reference}\t" in first.stdout and "pushed" in first.stdout
    assert tags_in(registry, spec.name) == [digest]
    # content-addressed: the same inputs are not pushed twice
    again = subprocess.run(publish, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and f"{reference}\talready in the registry" in again.stdout

    # Take the image off this machine (both names), then let a job find it.
    local_name = spec.reference(LOCAL_REGISTRY)
    # force: a stopped container of another test may still hold the image; its layers then
    # stay, but the job still has to resolve the reference through the registry
    client.images.remove(reference, force=True)
    client.images.remove(local_name, force=True)
    try:
        assert not client.images.list(name=reference.rsplit(":", 1)[0])
        run = PayloadRun(module="pincheck", args=("--record", "versions.json"),
                         toolchain=toolchain.on(cpu_arch.platform), arch=cpu_arch,
                         out_dir=tmp_path / "out", log_prefix="pincheck via registry")
        lines: list[str] = []
        result = DockerExecutor(repo_root, build=False, log=lines.append).run(run)
        assert (result.exit_code, result.error) == (0, None), "\n".join(lines[-20:])
        assert f"pulling {reference}" in lines
        assert result.provenance["image"] == reference
        assert result.provenance["image_id"] == local.id      # the very image that was pushed
        versions = json.loads((tmp_path / "out" / "versions.json").read_text())
        assert versions["triton"] == "3.8.0"
    finally:
        # leave the machine's local name in place for the other docker tests
        pulled = client.images.list(name=reference.rsplit(":", 1)[0])
        if pulled:
            pulled[0].tag(local_name.rsplit(":", 1)[0], digest)
            client.images.remove(reference)


def test_a_job_without_image_and_build_off_names_what_to_build(registry, repo_root, tmp_path, monkeypatch):
    """The registry is asked and lacks the reference (another registry path): a clear exit 3."""
    from mha_ci.errors import EnvironmentProblem

    pipeline = load_pipeline(repo_root)
    cpu_arch = next(a for a in pipeline.archs.values() if a.device == "none")
    toolchain = pipeline.toolchains[TOOLCHAIN].on(cpu_arch.platform)
    monkeypatch.setenv("MHA_CI_REGISTRY", f"{registry}/nobody/empty")
    run = PayloadRun(module="pincheck", args=(), toolchain=toolchain, arch=cpu_arch,
                     out_dir=tmp_path / "out", log_prefix="no image")
    # the local-only name would be re-tagged: hide it by asking for a digest nobody built
    spec = spec_for(toolchain)
    client = connect()
    if client.images.list(name=spec.reference(LOCAL_REGISTRY).rsplit(":", 1)[0]):
        client.images.get(spec.reference(LOCAL_REGISTRY)).tag("localhost/mha-ci-test/hidden", "x")
        client.images.remove(spec.reference(LOCAL_REGISTRY))
    try:
        with pytest.raises(EnvironmentProblem, match="neither here nor in its registry"):
            DockerExecutor(repo_root, build=False, log=lambda line: None).run(run)
    finally:
        hidden = client.images.list(name="localhost/mha-ci-test/hidden")
        if hidden:
            hidden[0].tag(*spec.reference(LOCAL_REGISTRY).rsplit(":", 1))
            client.images.remove("localhost/mha-ci-test/hidden:x")
