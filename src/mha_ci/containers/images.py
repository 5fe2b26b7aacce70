"""Which image a toolchain needs on a platform, and the one reference that names it.

A reference is `<registry>/<toolchain>-<platform>:<content digest>`. The digest is derived from
everything that decides what ends up in the image and is written in the checkout: the
Dockerfile, the lock file, the files the build context adds, the build arguments and the base
image's reference as the Dockerfile (or a build argument) writes it. Nothing of the local docker
daemon goes in, so the workflow's plan job (no docker) and the image build compute the same
reference, and an image is rebuilt exactly when one of those inputs changes. The base image's
actual digest is not part of the tag: it is recorded as a label and in every result instead (a
base pinned `@sha256:` in the Dockerfile is part of the reference string, hence of the tag).

The registry is fully qualified (`ghcr.io/<owner>/<repo>` in GitHub, `MHA_CI_REGISTRY`), never a
bare `mha-ci/...`: docker resolves an unqualified name on Docker Hub, where anyone can register
that namespace. Without MHA_CI_REGISTRY, images are named under `localhost/mha-ci`, which docker
treats as a registry host of this machine: a missing local image can never be pulled from
someone else's account.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from mha_ci.errors import ConfigError

REGISTRY_ENV = "MHA_CI_REGISTRY"
LOCAL_REGISTRY = "localhost/mha-ci"
DEFAULT_CPU_BASE = "mha-ci/debian-bookworm:base"
TAG_HEX_DIGITS = 12
# Bump when the tag recipe or what an image must carry changes (3: the content-digest label that
# engine.ensure_image checks; images of 2 lack it).
_TAG_SCHEME = b"mha-ci.image/3"

# Files (besides Dockerfile and lock) whose content the build context puts into every image.
CHECK_PINS = Path(__file__).with_name("check_pins.py")
CONTEXT_FILES = (CHECK_PINS,)

# A Dockerfile states what it needs from the builder in comment lines like
#   # mha-ci.build-network: host
# so that the need sits next to the RUN line that has it, not in Python.
_DIRECTIVE = re.compile(r"^#\s*mha-ci\.([a-z-]+):\s*(\S.*?)\s*$")
# The base a Dockerfile builds from: `ARG BASE_IMAGE=...` default, overridable by build argument.
_BASE_ARG = re.compile(r"^ARG\s+BASE_IMAGE=(\S+)\s*$", re.MULTILINE)
# registry host[:port] followed by at least one path component, lower case: the grammar of the
# distribution project's reference package. A path component is alphanumerics joined by one '.',
# one or two '_' or any number of '-', so '..', '.', '' and leading or trailing separators are not.
_HOST_PART = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REGISTRY = re.compile(rf"^{_HOST_PART}(?:\.{_HOST_PART})*(?::(?P<port>[0-9]{{1,5}}))?(?:/{_PATH_PART})+$")
_MAX_NAME = 255          # the longest repository name a registry must take


def registry(environ: dict[str, str] | None = None) -> str:
    """Where images are named and published: $MHA_CI_REGISTRY, else the local-only prefix."""
    value = (environ if environ is not None else os.environ).get(REGISTRY_ENV, "").strip().rstrip("/")
    if not value:
        return LOCAL_REGISTRY
    host = value.split("/", 1)[0]
    match = _REGISTRY.match(value)
    # A first component without a dot, colon or "localhost" is a Docker Hub user, not a registry.
    if (not match or int(match.group("port") or 0) > 65535 or len(value) > _MAX_NAME
            or not ("." in host or ":" in host or host == "localhost")):
        raise ConfigError(f"{REGISTRY_ENV}={value[:300]!r} is not a fully qualified, lower-case registry path "
                          "(e.g. ghcr.io/owner/repo or 127.0.0.1:5000/owner/repo; each path component is "
                          "letters and digits joined by '.', '_', '__' or '-')")
    return value


@dataclass(frozen=True)
class ImageSpec:
    """One buildable image: containers/<toolchain>/Dockerfile.<platform> plus its lock."""

    toolchain: str
    platform: str                 # "cpu" | "rocm" | "cuda"
    dockerfile: Path
    lock: Path
    build_args: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.toolchain}-{self.platform}"

    @property
    def directives(self) -> dict[str, str]:
        found = {}
        for line in self.dockerfile.read_text().splitlines():
            m = _DIRECTIVE.match(line.strip())
            if m:
                found[m.group(1)] = m.group(2)
        return found

    @property
    def build_network(self) -> str | None:
        """Network mode the build needs (None: the default bridge; pip is offline anyway)."""
        return self.directives.get("build-network")

    @property
    def python_version(self) -> str:
        """Python of the image's toolchain environment: the wheelhouse is downloaded for it."""
        return self.directives.get("python", "3.11")

    @property
    def base_image(self) -> str:
        if "BASE_IMAGE" in self.build_args:
            return self.build_args["BASE_IMAGE"]
        m = _BASE_ARG.search(self.dockerfile.read_text())
        return m.group(1) if m else DEFAULT_CPU_BASE

    def repository(self, registry_prefix: str | None = None) -> str:
        return f"{registry_prefix or registry()}/{self.name}"

    def reference(self, registry_prefix: str | None = None,
                  extra_files: tuple[Path, ...] = CONTEXT_FILES) -> str:
        """The image's one name: what the build tags, the registry holds and jobs pull."""
        return f"{self.repository(registry_prefix)}:{content_digest(self, extra_files)}"


def content_digest(spec: ImageSpec, extra_files: tuple[Path, ...] = CONTEXT_FILES) -> str:
    """Hex digest of what decides the image's content (see module docstring)."""
    h = hashlib.sha256(_TAG_SCHEME)

    def part(label: str, data: bytes) -> None:
        # length-prefixed so that moving bytes between parts cannot give the same digest
        h.update(f"\0{label}\0{len(data)}\0".encode())
        h.update(data)

    part("dockerfile", spec.dockerfile.read_bytes())
    part("lock", spec.lock.read_bytes())
    for f in sorted(extra_files, key=lambda p: p.name):
        part(f"file:{f.name}", f.read_bytes())
    for k in sorted(spec.build_args):
        part(f"arg:{k}", spec.build_args[k].encode())
    part("base", spec.base_image.encode())
    return h.hexdigest()[:TAG_HEX_DIGITS]


def image_spec(container_dir: Path, toolchain: str, platform: str,
               build_args: dict[str, str] | None = None, lock: Path | None = None) -> ImageSpec | None:
    """The spec for containers/<toolchain>/Dockerfile.<platform>, or None if there is none.
    `lock`: the platform's lock (Toolchain.on(platform).lock); default requirements.lock."""
    dockerfile = container_dir / f"Dockerfile.{platform}"
    if not dockerfile.is_file():
        return None
    return ImageSpec(toolchain=toolchain, platform=platform, dockerfile=dockerfile,
                     lock=lock or container_dir / "requirements.lock", build_args=dict(build_args or {}))


def spec_for(toolchain) -> ImageSpec | None:
    """The image of a model Toolchain on its current platform (Toolchain.on(p)), with that
    platform's lock; None when containers/<toolchain>/ has no Dockerfile for it."""
    return image_spec(toolchain.container_dir, toolchain.name, toolchain.platform, lock=toolchain.lock)


def discover(toolchains) -> list[ImageSpec]:
    """Every (toolchain, platform) image of the pipeline's toolchains (model Toolchain objects,
    in pipeline order) that has a Dockerfile, each with its platform's lock."""
    specs = []
    for toolchain in toolchains:
        for platform in sorted(toolchain.platforms or {toolchain.platform: None}):
            spec = spec_for(toolchain.on(platform))
            if spec is not None:
                specs.append(spec)
    return specs
