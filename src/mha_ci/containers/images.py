"""Which image a toolchain needs on a platform, and the tag that names its content.

A tag is derived from everything that decides what ends up in the image: the Dockerfile, the
lock file, the files the build context adds, the build arguments and the base image's id. So an
image is rebuilt exactly when one of those changes, and two machines with the same inputs agree
on the tag without asking each other.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

# Arch.device -> the Dockerfile suffix of the platform image that provides it.
PLATFORM_FOR_DEVICE = {"none": "cpu", "amd-gpu": "rocm", "nvidia-gpu": "cuda"}

DEFAULT_CPU_BASE = "mha-ci/debian-bookworm:base"
TAG_HEX_DIGITS = 12
_TAG_SCHEME = b"mha-ci.image/1"   # bump when the tag recipe itself changes

# A Dockerfile states what it needs from the builder in comment lines like
#   # mha-ci.build-network: host
# so that the need sits next to the RUN line that has it, not in Python.
_DIRECTIVE = re.compile(r"^#\s*mha-ci\.([a-z-]+):\s*(\S.*?)\s*$")
# The base a Dockerfile builds from: `ARG BASE_IMAGE=...` default, overridable by build argument.
_BASE_ARG = re.compile(r"^ARG\s+BASE_IMAGE=(\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class ImageSpec:
    """One buildable image: containers/<toolchain>/Dockerfile.<platform> plus its lock."""

    toolchain: str
    platform: str                 # "cpu" | "rocm" | "cuda"
    dockerfile: Path
    lock: Path
    build_args: dict[str, str] = field(default_factory=dict)

    @property
    def repository(self) -> str:
        return f"mha-ci/{self.toolchain}-{self.platform}"

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

    def tag(self, base_image_id: str = "", extra_files: tuple[Path, ...] = ()) -> str:
        return f"{self.repository}:{content_digest(self, base_image_id, extra_files)}"


def content_digest(spec: ImageSpec, base_image_id: str = "",
                   extra_files: tuple[Path, ...] = ()) -> str:
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
    part("base", (base_image_id or spec.base_image).encode())
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


def discover(containers_root: Path) -> list[ImageSpec]:
    """Every (toolchain, platform) image under containers/, in a stable order."""
    specs = []
    for lock in sorted(containers_root.glob("*/requirements.lock")):
        for dockerfile in sorted(lock.parent.glob("Dockerfile.*")):
            specs.append(ImageSpec(toolchain=lock.parent.name, platform=dockerfile.suffix[1:],
                                   dockerfile=dockerfile, lock=lock))
    return specs
