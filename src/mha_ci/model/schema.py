"""The schema of pipelines/{toolchains,archs,jobs,triggers,known_failures}.yaml.

One pydantic model per file, every mapping `extra="forbid"` so a misspelt key is an error with
the closest valid key (yaml_source turns pydantic errors into ConfigErrors). Names that refer to
another file (an arch in triggers.yaml, a toolchain in known_failures.yaml) are plain strings
here; the loader checks them against the other files, where it can suggest the closest name.
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, StringConstraints, model_validator

# No '-' in arch names: job ids are <kind>-<arch>-<toolchain>[-<i>of<N>] and must split back.
ArchName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.]*$")]
ToolchainName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]*[a-z0-9]$")]
NonEmpty = Annotated[str, StringConstraints(min_length=1, strip_whitespace=True)]
# pydantic's lax mode reads YAML's `true` as 1 for an int field; strict ints take only integers.
# Shared with the schemas of the other pipelines files.
StrictCount = Annotated[int, Strict(), Field(ge=1)]
StrictPositive = Annotated[int, Strict(), Field(gt=0)]
# YAML's `"yes"` or `1` is not a boolean setting (pydantic's lax mode would take both).
Flag = Annotated[bool, Strict()]
# GitHub runs at most 256 jobs of one matrix: 64 shards of one arch, times two toolchains, is half.
MAX_SHARDS = 64


def _no_expression(label: str) -> str:
    # A label is copied into the workflows' `runs-on`; an expression there would be evaluated with
    # the event's context (a pull request's title, a branch name) and pick the runner.
    if "${{" in label or "}}" in label:
        raise ValueError(f"runner label {label!r} holds a ${{{{ }}}} expression: labels are plain names")
    return label


RunnerLabel = Annotated[NonEmpty, AfterValidator(_no_expression)]


def _plain_label(label: str) -> str:
    # A label with a Cyrillic letter, a zero-width space or a fullwidth colon looks like another
    # one on GitHub's page and in a review; triggers.yaml's labels must be what they look like.
    if not (label.isascii() and label.isprintable()):
        raise ValueError(f"label {label!r} holds non-ASCII or invisible characters: labels are plain ASCII")
    return label


LabelName = Annotated[NonEmpty, AfterValidator(_plain_label)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# toolchains.yaml ---------------------------------------------------------------------------

class PlatformSpec(_Strict):
    lock: NonEmpty                       # relative to the checkout root
    # Only these lock entries are installed, over a base image that brings the rest (ROCm torch is not
    # on PyPI): only they are pinned; the others are recorded. Empty: the whole lock.
    only: list[NonEmpty] = []


class ToolchainSpec(_Strict):
    role: NonEmpty
    lock: NonEmpty                       # the cpu platform's lock, relative to the checkout root
    platforms: dict[Literal["cuda", "rocm"], PlatformSpec] = {}
    description: str = ""


class ToolchainsFile(_Strict):
    toolchains: dict[ToolchainName, ToolchainSpec] = Field(min_length=1)


# archs.yaml --------------------------------------------------------------------------------

_DEVICE_OF_VENDOR = {"amd": "amd-gpu", "nvidia": "nvidia-gpu", "cpu": "none"}


class CompileTargetSpec(_Strict):
    backend: Literal["hip", "cuda"]
    arch: Union[Annotated[int, Strict()], str]   # "gfx950" for hip, 90 for cuda (GPUTarget's own types)
    warp_size: Literal[32, 64]

    @model_validator(mode="after")
    def _arch_matches_backend(self) -> "CompileTargetSpec":
        if self.backend == "cuda" and not isinstance(self.arch, int):
            raise ValueError(f"cuda targets take a compute capability number like 90, not {self.arch!r}")
        if self.backend == "hip" and not str(self.arch).startswith("gfx"):
            raise ValueError(f"hip targets take a gfx name like 'gfx950', not {self.arch!r}")
        return self


class LimitsSpec(_Strict):
    shared_bytes: StrictPositive
    registers: StrictPositive


class ArchSpec(_Strict):
    vendor: Literal["amd", "nvidia", "cpu"]
    description: NonEmpty
    device: Literal["amd-gpu", "nvidia-gpu", "none"]
    runner_labels: list[RunnerLabel] = Field(min_length=1)
    visible_devices_env: str | None
    compile_target: CompileTargetSpec | None
    workers: StrictCount
    correctness_shards: StrictCount = Field(le=MAX_SHARDS)
    limits: LimitsSpec | None = None

    @model_validator(mode="after")
    def _device_matches_vendor(self) -> "ArchSpec":
        # A mismatch here would send a job to a runner without the device it needs.
        if _DEVICE_OF_VENDOR[self.vendor] != self.device:
            raise ValueError(f"vendor '{self.vendor}' needs device '{_DEVICE_OF_VENDOR[self.vendor]}', not '{self.device}'")
        has_gpu = self.device != "none"
        if has_gpu != (self.visible_devices_env is not None):
            raise ValueError("visible_devices_env is set exactly when the arch has a GPU device")
        if has_gpu != (self.compile_target is not None):
            raise ValueError("compile_target is set exactly when the arch has a GPU device")
        if self.limits is not None and self.compile_target is None:
            raise ValueError("limits apply to compiled code objects: set them only with a compile_target")
        return self


class ArchsFile(_Strict):
    archs: dict[ArchName, ArchSpec] = Field(min_length=1)


# jobs.yaml ---------------------------------------------------------------------------------

ArchSelection = Union[Literal["all"], list[str]]


class KindSpec(_Strict):
    archs: list[str] = Field(min_length=1)
    sharded: Flag = False
    # With `sharded`: this kind's own shard count on every arch (default: the arch's
    # correctness_shards).
    shards: Annotated[int, Strict(), Field(ge=1, le=64)] | None = None
    unavailable: dict[str, NonEmpty] = {}
    # false: the kind runs no toolchain code (docs), so one job per arch instead of one per toolchain
    per_toolchain: Flag = True
    description: str = ""


class KindsSpec(_Strict):
    """One field per job kind of model.types.JOB_KINDS, so a misspelt kind gets a suggestion."""

    correctness: KindSpec
    perf: KindSpec
    checksums: KindSpec
    refresh: KindSpec
    memcheck: KindSpec
    docs: KindSpec | None = None        # absent: the kind exists on no arch


class RunSpec(_Strict):
    kinds: list[str] = Field(min_length=1)
    archs: ArchSelection


class EventSpec(_Strict):
    runs: list[RunSpec] = []
    branches: list[NonEmpty] | None = None
    labels: Literal["add", "replace", "ignore"] = "ignore"
    paths: Literal["apply", "ignore"] = "ignore"
    skip_draft: Flag = False
    documentation_only_kinds: list[str] | None = None


class EventsSpec(_Strict):
    """One field per event kind of model.types.EVENT_KINDS."""

    pull_request: EventSpec
    push: EventSpec
    schedule: EventSpec
    manual: EventSpec


class JobsFile(_Strict):
    kinds: KindsSpec
    events: EventsSpec


# triggers.yaml -----------------------------------------------------------------------------

class LabelRuleSpec(_Strict):
    kinds: list[str] = Field(min_length=1)
    archs: Union[Literal["all", "selected"], list[str]]
    description: str = ""


class PathRuleSpec(_Strict):
    patterns: list[NonEmpty] = Field(min_length=1)
    kinds: list[str] = Field(min_length=1)
    archs: ArchSelection = "all"
    description: str = ""


class TriggersFile(_Strict):
    label_prefix: LabelName
    labels: dict[LabelName, LabelRuleSpec] = {}
    documentation: list[NonEmpty] = []
    paths: list[PathRuleSpec] = []


# known_failures.yaml -----------------------------------------------------------------------

class KnownFailureSpec(_Strict):
    test: NonEmpty
    arch: NonEmpty
    toolchain: NonEmpty
    reason: NonEmpty


class KnownFailuresFile(_Strict):
    known_failures: list[KnownFailureSpec]
