"""Image tags, build contexts and the container's environment: no docker needed."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mha_ci.containers import check_pins
from mha_ci.containers.context import install_lock_text, lock_entries, pip_download_command
from mha_ci.containers.images import ImageSpec, discover, image_spec
from mha_ci.errors import EnvironmentProblem
from mha_ci.executors.base import PayloadRun
from mha_ci.model.types import Arch, Toolchain


@pytest.fixture
def containers(tmp_path: Path, repo_root: Path) -> Path:
    """A copy of containers/ to edit."""
    shutil.copytree(repo_root / "containers", tmp_path / "containers")
    return tmp_path / "containers"


def spec_of(containers: Path, toolchain: str = "triton-3.4", platform: str = "cpu", **args) -> ImageSpec:
    spec = image_spec(containers / toolchain, toolchain, platform, build_args=args or None)
    assert spec is not None
    return spec


def test_every_toolchain_has_a_cpu_cuda_and_rocm_image_each_with_its_platform_lock(repo_root):
    from mha_ci.model.loader import load_pipeline

    toolchains = load_pipeline(repo_root).toolchains
    found = {(s.toolchain, s.platform): s for s in discover(toolchains.values())}
    assert set(found) == {(t, p) for t in ("triton-3.4", "triton-3.8") for p in ("cpu", "cuda", "rocm")}
    for (toolchain, platform), spec in found.items():
        assert spec.lock == toolchains[toolchain].on(platform).lock
    assert found["triton-3.8", "cuda"].lock.name == "requirements-cuda.lock"


def test_reference_is_content_derived_stable_and_fully_qualified(containers, monkeypatch):
    monkeypatch.delenv("MHA_CI_REGISTRY", raising=False)
    spec = spec_of(containers)
    ref = spec.reference()
    assert ref == spec_of(containers).reference()
    repo, digest = ref.rsplit(":", 1)
    # never a bare mha-ci/...: docker would look for that on Docker Hub
    assert repo == "localhost/mha-ci/triton-3.4-cpu"
    assert len(digest) == 12 and int(digest, 16) >= 0
    monkeypatch.setenv("MHA_CI_REGISTRY", "127.0.0.1:5000/owner/repo")
    assert spec.reference() == f"127.0.0.1:5000/owner/repo/triton-3.4-cpu:{digest}"
    assert spec.reference("ghcr.io/o/r") == f"ghcr.io/o/r/triton-3.4-cpu:{digest}"


@pytest.mark.parametrize("value", ["owner/repo", "mha-ci", "ghcr.io/Owner/Repo", "ghcr.io",
                                   "ghcr.io/o/r:tag", "https://ghcr.io/o/r"])
def test_registry_must_be_fully_qualified_and_lower_case(value):
    from mha_ci.containers.images import registry
    from mha_ci.errors import ConfigError

    with pytest.raises(ConfigError, match="MHA_CI_REGISTRY"):
        registry({"MHA_CI_REGISTRY": value})
    assert registry({"MHA_CI_REGISTRY": "ghcr.io/o/r/"}) == "ghcr.io/o/r"
    assert registry({"MHA_CI_REGISTRY": "localhost:5000/x"}) == "localhost:5000/x"
    assert registry({}) == "localhost/mha-ci"


def test_reference_needs_no_docker_and_no_local_state(containers, monkeypatch):
    """The plan job (no docker) and the build compute it alike: nothing but files goes in."""
    import mha_ci.containers.images as images

    monkeypatch.delitem(sys.modules, "docker", raising=False)
    monkeypatch.setattr("builtins.__import__", _refusing("docker"))
    assert images.content_digest(spec_of(containers)) == images.content_digest(spec_of(containers))


def _refusing(module: str):
    real = __import__

    def guarded(name, *args, **kwargs):
        if name == module or name.startswith(module + "."):
            raise AssertionError(f"the reference must not need {module}")
        return real(name, *args, **kwargs)
    return guarded


def test_reference_changes_with_lock_dockerfile_base_and_build_args(containers):
    spec = spec_of(containers)
    before = spec.reference()
    assert spec_of(containers, BASE_IMAGE="other:tag").reference() != before
    assert spec_of(containers, BASE_IMAGE="other@sha256:" + "0" * 64).reference() != before

    lock = containers / "triton-3.4" / "requirements.lock"
    lock.write_text(lock.read_text().replace("pytest==9.0.3", "pytest==9.0.2"))
    after_lock = spec.reference()
    assert after_lock != before

    dockerfile = containers / "triton-3.4" / "Dockerfile.cpu"
    dockerfile.write_text(dockerfile.read_text() + "\n# a comment is a change too\n")
    assert spec.reference() not in (before, after_lock)


def test_reference_ignores_other_toolchains_and_other_files(containers):
    spec = spec_of(containers)
    before = spec.reference()
    other = containers / "triton-3.8" / "requirements.lock"
    other.write_text(other.read_text() + "\n# unrelated\n")
    (containers / "triton-3.4" / "NOTES.txt").write_text("not part of the image")
    assert spec.reference() == before


def test_reference_includes_extra_context_files(containers, tmp_path):
    spec = spec_of(containers)
    extra = tmp_path / "check_pins.py"
    extra.write_text("one")
    a = spec.reference(extra_files=(extra,))
    extra.write_text("two")
    assert spec.reference(extra_files=(extra,)) != a


def test_wheelhouse_platforms_reach_the_base_images_glibc():
    from mha_ci.containers.context import wheel_platforms

    tags = wheel_platforms(36)
    # nvidia-cuda-cupti 13.0.85 (triton-3.8's cuda lock) has a manylinux_2_25 wheel only
    assert {"manylinux_2_25_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64"} <= set(tags)
    assert "manylinux_2_37_x86_64" not in tags and tags.index("manylinux_2_36_x86_64") == 0


def test_dockerfile_directives(repo_root):
    cpu34 = spec_of(repo_root / "containers", "triton-3.4", "cpu")
    cpu38 = spec_of(repo_root / "containers", "triton-3.8", "cpu")
    rocm = spec_of(repo_root / "containers", "triton-3.8", "rocm")
    # only Triton 3.4's image needs the network at build (apt for lld-19)
    assert cpu34.build_network == "host" and cpu38.build_network is None
    assert cpu34.python_version == "3.11" and cpu34.base_image == "mha-ci/debian-bookworm:base"
    assert rocm.base_image.startswith("rocm/pytorch:") and rocm.directives["replace"] == "triton"


def test_cpu_image_installs_the_whole_lock_rocm_only_triton(repo_root):
    cpu = spec_of(repo_root / "containers", "triton-3.4", "cpu")
    assert install_lock_text(cpu) == cpu.lock.read_text()
    rocm = spec_of(repo_root / "containers", "triton-3.4", "rocm")
    text = install_lock_text(rocm)
    assert "triton==3.4.0" in text and "--hash=sha256:" in text
    assert "torch==" not in text and "numpy==" not in text


def test_replace_of_an_unpinned_package_is_an_environment_problem(containers):
    dockerfile = containers / "triton-3.8" / "Dockerfile.rocm"
    dockerfile.write_text(dockerfile.read_text().replace("mha-ci.replace: triton",
                                                         "mha-ci.replace: triton, jax"))
    with pytest.raises(EnvironmentProblem, match="jax"):
        install_lock_text(spec_of(containers, "triton-3.8", "rocm"))


def test_lock_entries_keep_hash_lines():
    text = "# c\nfoo==1.0 \\\n    --hash=sha256:aa\nBar_Baz==2 \\\n    --hash=sha256:bb \\\n    --hash=sha256:cc\n"
    entries = lock_entries(text)
    assert set(entries) == {"foo", "bar-baz"}
    assert entries["bar-baz"].count("--hash") == 2


def test_wheelhouse_is_downloaded_for_the_image_python_not_the_hosts(tmp_path):
    cmd = pip_download_command(tmp_path / "l", tmp_path / "w", "3.12")
    joined = " ".join(cmd)
    assert "--require-hashes" in cmd and "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert "--python-version 3.12" in joined and "--abi cp312" in joined


def test_check_pins_reports_each_mismatch(monkeypatch):
    pins = check_pins.read_pins("a==1.0 \\\n  --hash=sha256:x\nb==2.0\nc==3\n# d==4\n")
    assert pins == {"a": "1.0", "b": "2.0", "c": "3"}
    installed = {"a": "1.0", "b": "2.1"}

    def version(name):
        if name not in installed:
            raise check_pins.metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(check_pins.metadata, "version", version)
    problems = check_pins.mismatches(pins)
    assert problems == ["b: pinned 2.0, installed 2.1", "c: pinned 3, not installed"]
    assert check_pins.mismatches(pins, only={"a"}) == []


# ---------------------------------------------------------------- the container's side
def _payload(tmp_path: Path, env: dict[str, str] | None = None, device: str = "none") -> PayloadRun:
    toolchain = Toolchain(name="triton-3.8", role="top-of-tree", lock=tmp_path / "l",
                          container_dir=tmp_path, pins={"triton": "3.8.0"})
    arch = Arch(name="x", vendor="cpu", description="", device=device, runner_labels=(),
                visible_devices_env=None, compile_target=None)
    return PayloadRun(module="probe", args=(), toolchain=toolchain, arch=arch,
                      out_dir=tmp_path / "out", env=env or {})


def test_only_listed_variables_pass_into_the_container(tmp_path, monkeypatch):
    from mha_ci.executors.docker import container_environment

    monkeypatch.setenv("MHA_CI_TEST_SECRET", "must-not-leak")
    monkeypatch.setenv("PATH", "/host/only/bin")
    monkeypatch.setenv("HOME", "/host/home")
    monkeypatch.setenv("TRITON_HIP_LLD_PATH", "/host/ld.lld")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    env = container_environment(_payload(tmp_path, {"TRITON_INTERPRET": "1"}), tmp_path)
    assert "MHA_CI_TEST_SECRET" not in env
    assert "PATH" not in env                    # the image's PATH (its venv) stays
    assert env["HOME"] == "/tmp"                # writable for any uid inside
    assert "TRITON_HIP_LLD_PATH" not in env     # the image's own ld.lld stays
    assert env["HIP_VISIBLE_DEVICES"] == "1"    # which GPUs this runner may use
    assert env["TRITON_INTERPRET"] == "1"
    assert env["PYTHONPATH"] == str(tmp_path / "src")
    assert env["MHA_CI_OUT"] == str(tmp_path / "out")
    assert '"triton": "3.8.0"' in env["MHA_CI_PINS"]


def test_a_variable_the_job_lists_passes_even_if_host_only(tmp_path, monkeypatch):
    from mha_ci.executors.docker import container_environment

    monkeypatch.setenv("TRITON_HIP_LLD_PATH", "/host/ld.lld")
    env = container_environment(_payload(tmp_path, {"TRITON_HIP_LLD_PATH": "/usr/bin/ld.lld-19"}),
                                tmp_path)
    assert env["TRITON_HIP_LLD_PATH"] == "/usr/bin/ld.lld-19"


def test_device_access_per_arch(tmp_path):
    from mha_ci.executors.docker import device_options

    amd = device_options(_payload(tmp_path, device="amd-gpu").arch)
    assert amd["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert amd["group_add"] == ["video"] and amd["security_opt"] == ["seccomp=unconfined"]
    assert device_options(_payload(tmp_path, device="none").arch) == {}
    nvidia = device_options(_payload(tmp_path, device="nvidia-gpu").arch)["device_requests"][0]
    assert nvidia["Count"] == -1 and nvidia["Capabilities"] == [["gpu"]]
    with pytest.raises(EnvironmentProblem):
        device_options(_payload(tmp_path, device="tpu").arch)


def test_checkout_read_only_output_writable_at_the_host_paths(tmp_path):
    from mha_ci.executors.docker import mounts

    m = mounts(tmp_path, tmp_path / "out" / "job")
    assert m == {str(tmp_path): {"bind": str(tmp_path), "mode": "ro"},
                 str(tmp_path / "out" / "job"): {"bind": str(tmp_path / "out" / "job"), "mode": "rw"}}
    # the compile cache lies in the machine's cache, outside the checkout: read-only, when it exists
    (tmp_path / "cache" / "triton-3.8").mkdir(parents=True)
    m = mounts(tmp_path / "co", tmp_path / "out", (tmp_path / "cache" / "triton-3.8", tmp_path / "missing"))
    assert m[str(tmp_path / "cache" / "triton-3.8")] == {"bind": str(tmp_path / "cache" / "triton-3.8"), "mode": "ro"}
    assert str(tmp_path / "missing") not in m and len(m) == 3


def test_unreachable_daemon_is_an_environment_problem(monkeypatch):
    from mha_ci.containers.engine import connect
    from mha_ci.errors import ExitCode

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/mha-ci-test.sock")
    with pytest.raises(EnvironmentProblem, match="start dockerd") as info:
        connect()
    assert info.value.exit_code == ExitCode.ENVIRONMENT_ERROR


@pytest.mark.parametrize("command", [
    ["-m", "mha_ci", "containers", "build", "--toolchain", "triton-3.8"],
    ["-m", "mha_ci", "run", "--job", "checksums-interpreter-triton-3.8-1of4", "--executor", "docker"],
], ids=["containers-build", "run"])
@pytest.mark.slow   # over a second (subprocesses): out of `make test-fast`
def test_unreachable_daemon_exits_3_from_the_cli(repo_root, tmp_path, command):
    env = {**os.environ, "PYTHONPATH": str(repo_root / "src"),
           "DOCKER_HOST": "unix:///nonexistent/mha-ci-test.sock"}
    if command[2] == "run":
        command = command + ["--out", str(tmp_path / "out")]
    proc = subprocess.run([sys.executable, *command], cwd=repo_root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "start dockerd" in proc.stderr


def test_publish_without_a_registry_is_a_usage_error(repo_root, monkeypatch, capsys):
    """Checked before docker is asked: publishing to the local-only name would push nowhere."""
    from mha_ci.cli import main

    monkeypatch.delenv("MHA_CI_REGISTRY", raising=False)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert main(["--root", str(repo_root), "containers", "publish", "--platform", "cuda"]) == 2
    assert "needs MHA_CI_REGISTRY" in capsys.readouterr().err


def test_tags_prints_every_reference_without_docker(repo_root, monkeypatch, capsys):
    from mha_ci.cli import main

    monkeypatch.setenv("MHA_CI_REGISTRY", "ghcr.io/o/r")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert main(["--root", str(repo_root), "containers", "tags", "--all"]) == 0
    lines = capsys.readouterr().out.split()
    assert len(lines) == 6 and all(line.startswith("ghcr.io/o/r/triton-3.") for line in lines)
    assert any("-cuda:" in line for line in lines)


class _FakeBuilds:
    """ensure_image and connect of `mha-ci containers build`, without docker: with `together`,
    each build waits until that many have started (so a passing test proves they overlapped),
    else it takes a moment; then it succeeds or raises what `fail` names for its image. The
    most builds in flight at once is kept in `most`."""

    def __init__(self, monkeypatch, fail: dict[str, BaseException] | None = None,
                 together: int | None = 2):
        import threading

        from mha_ci.commands import containers as command

        self.fail, self.started, self.clients = fail or {}, [], 0
        self.together = threading.Barrier(together, timeout=30) if together else None
        self.lock, self.in_flight, self.most = threading.Lock(), 0, 0
        monkeypatch.setattr(command, "connect", self.connect)
        monkeypatch.setattr(command, "ensure_image", self.ensure_image)

    def connect(self):
        self.clients += 1
        return object()

    def ensure_image(self, client, spec, *, force=False, log=print):
        from mha_ci.containers.engine import BuiltImage

        import time

        with self.lock:
            self.started.append(spec.name)
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        if self.together:
            self.together.wait()
        else:
            time.sleep(0.2)
        log(f"building {spec.name}")
        log(f"[build {spec.name}] Step 1/1 : FROM base")
        with self.lock:
            self.in_flight -= 1
        if spec.name in self.fail:
            raise self.fail[spec.name]
        return BuiltImage(spec.reference(), f"sha256:{spec.name}", spec.base_image, "local:x",
                          True, 0.0)


def test_build_jobs_2_builds_the_cpu_images_at_once_and_names_each_line(repo_root, monkeypatch, capsys):
    from mha_ci.cli import main

    fake = _FakeBuilds(monkeypatch)
    assert main(["--root", str(repo_root), "containers", "build", "--jobs", "2"]) == 0
    assert sorted(fake.started) == ["triton-3.4-cpu", "triton-3.8-cpu"]
    assert fake.clients == 3          # one ping up front, then one client per build thread
    out = capsys.readouterr().out.splitlines()
    for name in ("triton-3.4-cpu", "triton-3.8-cpu"):
        assert f"[{name}] building {name}" in out          # mha-ci's own lines get the image's name
        assert f"[build {name}] Step 1/1 : FROM base" in out  # docker's lines keep theirs
        assert sum(line.startswith(f"localhost/mha-ci/{name}:") and "\tbuilt\t" in line for line in out) == 1


def test_build_jobs_a_failed_build_lets_the_other_finish_and_sets_the_exit_code(repo_root, monkeypatch, capsys):
    from mha_ci.cli import main
    from mha_ci.containers.engine import BuildFailed

    fake = _FakeBuilds(monkeypatch, fail={"triton-3.8-cpu": BuildFailed("3.8 failed at Step 4/9")})
    assert main(["--root", str(repo_root), "containers", "build", "--jobs", "2"]) == 3
    captured = capsys.readouterr()
    assert sorted(fake.started) == ["triton-3.4-cpu", "triton-3.8-cpu"]
    assert any(line.startswith("localhost/mha-ci/triton-3.4-cpu:") and "\tbuilt\t" in line
               for line in captured.out.splitlines())
    assert "3.8 failed at Step 4/9" in captured.err


def test_build_jobs_both_failing_raise_the_first_and_print_the_other(repo_root, monkeypatch, capsys):
    from mha_ci.cli import main
    from mha_ci.containers.engine import BuildFailed

    _FakeBuilds(monkeypatch, fail={"triton-3.4-cpu": BuildFailed("3.4 broke"),
                                   "triton-3.8-cpu": RuntimeError("3.8 broke")})
    assert main(["--root", str(repo_root), "containers", "build", "--jobs", "2"]) == 3
    err = capsys.readouterr().err
    assert "mha-ci: 3.4 broke" in err
    assert "mha-ci: also failed: triton-3.8-cpu: RuntimeError: 3.8 broke" in err


def test_build_jobs_1_builds_one_image_after_the_other(repo_root, monkeypatch, capsys):
    from mha_ci.cli import main

    fake = _FakeBuilds(monkeypatch, together=None)
    assert main(["--root", str(repo_root), "containers", "build", "--jobs", "1"]) == 0
    assert fake.started == ["triton-3.4-cpu", "triton-3.8-cpu"] and fake.most == 1


def test_build_jobs_never_runs_more_builds_than_asked(repo_root, monkeypatch, capsys):
    from mha_ci.cli import main

    fake = _FakeBuilds(monkeypatch, together=None)
    assert main(["--root", str(repo_root), "containers", "build", "--all", "--jobs", "2"]) == 0
    assert len(fake.started) == 6 and fake.most <= 2   # 6 unlimited: each build takes 0.2 s


@pytest.mark.parametrize("jobs", ["0", "-1", "two"])
def test_build_jobs_must_be_a_positive_integer(repo_root, jobs, capsys):
    from mha_ci.cli import main

    with pytest.raises(SystemExit) as info:
        main(["--root", str(repo_root), "containers", "build", "--jobs", jobs])
    assert info.value.code == 2
