"""The pipeline model every other part of the runner works on.

Built only by mha_ci.model.loader from pipelines/*.yaml after schema validation, so code that
receives these objects can trust them. Frozen: a plan or a job never changes the model.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from mha_ci.errors import EnvironmentProblem

JOB_KINDS = ("correctness", "perf", "checksums", "refresh", "memcheck", "docs")
EVENT_KINDS = ("pull_request", "push", "schedule", "manual")


# Arch.device -> the platform whose environment (lock, image) a job of that arch runs in.
PLATFORM_OF_DEVICE = {"none": "cpu", "nvidia-gpu": "cuda", "amd-gpu": "rocm"}


@dataclass(frozen=True)
class PlatformEnvironment:
    """How one toolchain is installed on one platform (toolchains.yaml `platforms.<p>`)."""

    lock: Path                                   # absolute
    pins: dict[str, str]                         # what the payload's pin check compares
    only: tuple[str, ...] = ()                   # installed over a base image: just these (ROCm: triton)


@dataclass(frozen=True)
class Toolchain:
    """A pinned set of packages (torch, triton, numpy, ...) that payloads run in.

    One toolchain has an environment per platform: `cpu` (interpreter and ahead-of-time
    compiles), `cuda` (sm90) and `rocm` (gfx942, gfx950). `lock` and `pins` are those of
    `platform`; `on(p)` gives the same toolchain on another platform. A job always runs its
    toolchain `on(arch.platform)`, so a GPU job never gets the CPU build of torch.
    """

    name: str                 # "triton-3.4"
    role: str                 # "golden" | "top-of-tree" | free text
    lock: Path                # containers/<name>/requirements.lock (absolute), of `platform`
    container_dir: Path       # containers/<name>/
    pins: dict[str, str] = field(default_factory=dict)  # normalised name -> exact version, from lock
    platform: str = "cpu"
    platforms: dict[str, PlatformEnvironment] = field(default_factory=dict, compare=False, repr=False)

    def on(self, platform: str) -> "Toolchain":
        """This toolchain's environment on `platform`; EnvironmentProblem where none is defined."""
        if platform == self.platform:
            return self
        environment = self.platforms.get(platform)
        if environment is None:
            raise EnvironmentProblem(
                f"toolchain {self.name} defines no {platform} environment (pipelines/toolchains.yaml "
                f"`platforms.{platform}`; defined: {', '.join(sorted(self.platforms)) or 'none'})")
        return replace(self, lock=environment.lock, pins=dict(environment.pins), platform=platform)

    @property
    def installs_only(self) -> tuple[str, ...]:
        """Lock entries installed over a base image on this platform; () = the whole lock."""
        environment = self.platforms.get(self.platform)
        return environment.only if environment else ()


@dataclass(frozen=True)
class ResourceLimits:
    """What one kernel launch may use on an arch (archs.yaml `limits`): a code object above
    either figure cannot launch there, so the checksums job refuses it without a GPU."""

    shared_bytes: int         # shared memory (cuda) / LDS (amd) per block / workgroup
    registers: int            # registers per thread (cuda) / VGPRs incl. AGPRs per lane (amd)


@dataclass(frozen=True)
class Arch:
    """A target the jobs can run on: a GPU architecture or the CPU interpreter."""

    name: str                 # "gfx942" | "gfx950" | "sm90" | "interpreter"
    vendor: str               # "amd" | "nvidia" | "cpu"
    description: str
    device: str               # what a job needs: "amd-gpu" | "nvidia-gpu" | "none"
    runner_labels: tuple[str, ...]   # GitHub self-hosted runner labels
    visible_devices_env: str | None  # HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES / None
    compile_target: tuple | None     # triton GPUTarget args, e.g. ("hip", "gfx950", 64); None = interpreter
    workers: int = 1                 # pytest-xdist workers per shard (one GPU each)
    limits: ResourceLimits | None = None   # per-launch resource limits; None = no GPU

    @property
    def platform(self) -> str:
        return PLATFORM_OF_DEVICE[self.device]


@dataclass(frozen=True)
class KnownFailure:
    test: str                 # pytest node id or fnmatch pattern over node ids
    arch: str
    toolchain: str
    reason: str


@dataclass(frozen=True)
class Job:
    """One unit of work; id is stable and is what `mha-ci run --job ID` takes.

    `toolchain` is "" for a kind that runs no toolchain (docs): its id is then <kind>-<arch>."""

    kind: str
    arch: str
    toolchain: str
    shard: int | None = None      # 1-based
    shards: int | None = None

    @property
    def id(self) -> str:
        base = "-".join(part for part in (self.kind, self.arch, self.toolchain) if part)
        return f"{base}-{self.shard}of{self.shards}" if self.shard is not None else base


@dataclass(frozen=True)
class PlannedJob:
    job: Job
    reason: str               # which rule put it there


@dataclass(frozen=True)
class SkippedJob:
    id: str
    reason: str


@dataclass(frozen=True)
class Plan:
    jobs: tuple[PlannedJob, ...]
    skipped: tuple[SkippedJob, ...]


@dataclass(frozen=True)
class Event:
    """What triggered a plan: labels, changed paths, branch and kind."""

    kind: str = "pull_request"
    labels: frozenset[str] = frozenset()
    changed_files: tuple[str, ...] | None = None   # None = unknown (treated as "everything changed")
    branch: str | None = None
    draft: bool = False
