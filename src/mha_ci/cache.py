"""Where mha-ci keeps what it builds and reuses between runs: toolchain environments, compile
caches and image build contexts (CI may cache the folder; the Makefile exports $MHA_CI_CACHE)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root(root: Path) -> Path:
    """$MHA_CI_CACHE, else <root>/.cache/mha-ci, `root` being the checkout."""
    override = os.environ.get("MHA_CI_CACHE")
    return Path(override).resolve() if override else Path(root) / ".cache" / "mha-ci"
