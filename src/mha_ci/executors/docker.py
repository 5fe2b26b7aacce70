"""The docker executor: a payload in its toolchain's image, through the Docker Engine API.

What the container sees of the host, and why:
- the checkout, read-only, and the job's output folder, writable, each at the SAME absolute
  path as on the host. Arguments, PYTHONPATH, pytest node ids and any path a payload writes
  into its results are then byte-for-byte what the venv executor gives, so a job's verdict and
  checksums do not depend on the executor (docs/architecture.md, Executors). The payload's
  caches (PayloadRun.caches: the compile cache, in the machine's cache folder) are mounted
  read-only, so a container reads hits as the venv executor does but writes none. Nothing else
  of the host is mounted.
- no network: payloads need none, and none means results cannot depend on it.
- only the variables of PayloadRun.env, plus PYTHONPATH and HOME (the image's own ENV, e.g.
  TRITON_HIP_LLD_PATH, stays).
- the host user's uid:gid, so files in the output folder are not owned by root.
- the devices the arch needs (amd-gpu: /dev/kfd, /dev/dri; nvidia-gpu: all GPUs).
The container is always removed, also on timeout, OOM kill and Ctrl-C.
"""
from __future__ import annotations

import collections
import os
import sys
import threading
import time
import uuid
from pathlib import Path

from mha_ci.containers.engine import BuildFailed, connect, ensure_image
from mha_ci.containers.images import spec_for
from mha_ci.errors import EnvironmentProblem, ExitCode
from mha_ci.executors.base import Executor, PayloadResult, PayloadRun
from mha_ci.executors.local_process import payload_environment
from mha_ci.model.types import Arch

CONTAINER_HOME = "/tmp"     # writable for any uid: Triton's cache (~/.triton) lands there
EXIT_KILLED = 137           # 128 + SIGKILL, what docker reports for a killed container


# Variables that local_process passes from the caller but that name things of the host, not
# of the container: the image's PATH, its ld.lld and a writable HOME are used instead.
HOST_ONLY = ("PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TERM", "TRITON_HIP_LLD_PATH",
             "TRITON_CACHE_DIR")


def container_environment(payload: PayloadRun, root: Path, pin_mode: str = "enforce") -> dict[str, str]:
    """Exactly what passes into the container: the payload contract of the venv executor
    (PYTHONPATH=<root>/src, MHA_CI_OUT, MHA_CI_PINS, ...) and the payload's listed variables;
    of the caller's environment only what selects devices or locale, never PATH or HOME."""
    env = payload_environment(payload, root, pin_mode)
    for name in HOST_ONLY:
        if name not in payload.env:
            env.pop(name, None)
    env.setdefault("HOME", CONTAINER_HOME)
    return env


def device_options(arch: Arch) -> dict:
    """docker run options that give the container the devices `arch` needs."""
    if arch.device == "amd-gpu":
        # ROCm needs the kernel driver (/dev/kfd) and the render nodes; the video group owns
        # them, and its NUMA memory calls are refused by docker's default seccomp profile (the
        # same options as CI's: export/matrix.py says what bounds it).
        return {"devices": ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"],
                "group_add": ["video"], "security_opt": ["seccomp=unconfined"]}
    if arch.device == "nvidia-gpu":
        import docker.types  # optional: the docker SDK
        return {"device_requests": [docker.types.DeviceRequest(count=-1,
                                                               capabilities=[["gpu"]])]}
    if arch.device == "none":
        return {}
    raise EnvironmentProblem(f"arch {arch.name}: unknown device kind {arch.device!r}")


def mounts(root: Path, out_dir: Path, caches: tuple[Path, ...] = ()) -> dict:
    # The daemon mounts parents before children, so an output folder inside the checkout
    # (out/<job>) is writable even though the checkout around it is read-only.
    # A cache is read-only: what the container writes could only be trusted after a recheck, and
    # a missing folder is left out (the daemon would create it on the host, as root).
    volumes = {str(c): {"bind": str(c), "mode": "ro"} for c in caches if Path(c).is_dir()}
    return {**volumes, str(root): {"bind": str(root), "mode": "ro"},
            str(out_dir): {"bind": str(out_dir), "mode": "rw"}}


class _LogPump(threading.Thread):
    """Copies the container's output to our stdout, one prefixed line at a time."""

    def __init__(self, container, prefix: str, sink) -> None:
        super().__init__(daemon=True)
        self.container, self.prefix, self.sink = container, prefix, sink
        self.tail: collections.deque[str] = collections.deque(maxlen=8)

    def run(self) -> None:
        pending = b""
        try:
            for chunk in self.container.logs(stream=True, follow=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._emit(line)
        except Exception:   # the container went away under us (removed after a kill)
            pass
        if pending:
            self._emit(pending)

    def _emit(self, raw: bytes) -> None:
        line = raw.decode(errors="replace").rstrip("\r")
        self.tail.append(line)
        self.sink(self.prefix + line)


def _print_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)     # where the venv executor streams too


class DockerExecutor(Executor):
    name = "docker"

    def __init__(self, root: Path | None = None, *, mem_limit: str | None = None,
                 build: bool = True, log=_print_line) -> None:
        """root: the checkout (default: derived from the toolchain's containers/ folder).
        mem_limit: docker memory limit for each container (e.g. "16g"); None = no limit.
        build: build a missing image on demand (False: an image neither here nor in the
        registry is an error)."""
        self.root = root
        self.mem_limit = mem_limit
        self.build = build
        self.log = log
        self._client = None

    @property
    def client(self):
        if self._client is None:
            self._client = connect()
        return self._client

    def image_for(self, payload: PayloadRun):
        """The toolchain's image on the job's platform (toolchain.platform follows the arch):
        local, else pulled by its reference (MHA_CI_REGISTRY), else built when allowed."""
        spec = spec_for(payload.toolchain)
        if spec is None:
            raise EnvironmentProblem(
                f"no image for {payload.toolchain.name} on {payload.arch.name}: "
                f"{payload.toolchain.container_dir}/Dockerfile.{payload.toolchain.platform} does not "
                f"exist (run this job with --executor venv or host)")
        return ensure_image(self.client, spec, build=self.build, log=self.log)

    def run(self, payload: PayloadRun) -> PayloadResult:
        root = (self.root or payload.toolchain.container_dir.parent.parent).resolve()
        out_dir = payload.out_dir.resolve()
        out_dir.mkdir(parents=True, exist_ok=True)
        try:
            image = self.image_for(payload)
        except BuildFailed as e:
            return PayloadResult(exit_code=int(e.exit_code), error=str(e),
                                 provenance={"executor": self.name})
        provenance = {"executor": self.name, "image": image.tag, "image_id": image.id,
                      "base_image": image.base_ref, "base_digest": image.base_digest,
                      "docker_server": self.client.version().get("Version")}

        import docker.errors  # optional: the docker SDK
        import requests.exceptions  # optional: the docker SDK

        name = f"mha-ci-{payload.module}-{uuid.uuid4().hex[:10]}"
        command = ["python3", "-m", f"mha_ci.payloads.{payload.module}", *payload.args]
        try:
            container = self.client.containers.create(
                image.id, command, name=name, environment=container_environment(payload, root),
                volumes=mounts(root, out_dir, payload.caches), working_dir=str(root), network_mode="none",
                user=f"{os.getuid()}:{os.getgid()}", labels={"mha-ci.payload": payload.module,
                                              "mha-ci.log-prefix": payload.log_prefix},
                mem_limit=self.mem_limit, memswap_limit=self.mem_limit,
                **device_options(payload.arch))
        except docker.errors.APIError as e:
            raise EnvironmentProblem(f"docker could not create the container: {e}") from e

        pump = _LogPump(container, f"[{payload.log_prefix}] " if payload.log_prefix else "", self.log)
        timed_out, exit_code = False, None
        started = time.monotonic()
        try:
            try:
                container.start()
            except docker.errors.APIError as e:   # e.g. a device the arch needs is not there
                raise EnvironmentProblem(f"docker could not start the container for "
                                         f"{payload.arch.name}: {e}") from e
            pump.start()
            deadline = None if payload.timeout_s is None else time.monotonic() + payload.timeout_s
            while exit_code is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    timed_out = True
                    try:
                        container.kill()
                    except docker.errors.APIError:   # it exited in the meantime
                        pass
                    exit_code = container.wait(timeout=60).get("StatusCode", EXIT_KILLED)
                    break
                try:
                    # waits are chunked: the SDK's wait needs a finite HTTP read timeout
                    exit_code = container.wait(timeout=max(1, min(left or 300, 300)))["StatusCode"]
                except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                    continue
            container.reload()
            oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
            pump.join(timeout=10)
        finally:
            try:
                container.remove(force=True)
            except docker.errors.APIError as e:   # already gone is fine; anything else: say so
                if getattr(e, "status_code", None) != 404:
                    self.log(f"{payload.log_prefix}warning: could not remove container {name}: {e}")

        if exit_code == ExitCode.ENVIRONMENT_ERROR and not oom:
            # same contract as the venv executor: the payload's pin check refused to run
            raise EnvironmentProblem(f"payload {payload.module} for toolchain {payload.toolchain.name} "
                                     f"in {image.tag} reported an environment problem (exit 3):\n"
                                     + "\n".join(pump.tail))
        provenance["wall_s"] = round(time.monotonic() - started, 3)
        error = None
        if timed_out:
            error = f"timed out after {payload.timeout_s:g} s; container killed"
        elif oom:
            error = (f"killed by the kernel's OOM killer (memory limit "
                     f"{self.mem_limit or 'none, host memory exhausted'})")
        return PayloadResult(exit_code=exit_code, timed_out=timed_out, error=error,
                             provenance=provenance)
