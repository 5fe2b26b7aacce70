"""Where mha-ci keeps what it builds and reuses between runs: toolchain environments, compile
caches and image build contexts, and, apart from it, the state that vouches for what is in it.

The cache is the machine's, not the checkout's: $MHA_CI_CACHE, else $XDG_CACHE_HOME/mha-ci
(~/.cache/mha-ci), so every clone reuses what another one built. Entries are named by what made
them (a lock's digest, a compile's full key) and written under a lock or by an atomic rename
(mha_ci.executors.venv, mha_ci.checksums.cache), so clones and runs may share it at once;
`mha-ci cache info/prune` (mha_ci.cache_entries) show and trim it.

The cache is input from others: CI restores it from another run's upload, and clones may share
one. Nothing in it can vouch for itself, so what a cached entry is checked against lives in the
checkout (the lock files' wheel hashes) or in the state folder, which is this user's and never
inside the cache root: the file manifests of the toolchain environments (derived from the
wheels their locks pin), the stat fingerprint of each environment's last full content check,
and the bytecode compiled for the payloads that run in them.
"""
from __future__ import annotations

import os
from pathlib import Path

from mha_ci.errors import ConfigError


def cache_root(root: Path | None = None) -> Path:
    """$MHA_CI_CACHE, else $XDG_CACHE_HOME/mha-ci, else ~/.cache/mha-ci. `root` (the checkout
    asking) does not choose it: every clone of the machine shares the one folder."""
    override = os.environ.get("MHA_CI_CACHE")
    if override:
        return Path(override).resolve()
    base = os.environ.get("XDG_CACHE_HOME", "")
    # the XDG rule: a relative $XDG_CACHE_HOME is invalid and ignored (it would follow the cwd)
    if not base or not Path(base).is_absolute():
        base = str(Path.home() / ".cache")
    return Path(base).resolve() / "mha-ci"


def state_root(cache: Path) -> Path:
    """$MHA_CI_STATE, else $XDG_STATE_HOME/mha-ci, else ~/.local/state/mha-ci; a ConfigError
    when it lies inside `cache` (the cache would then vouch for itself)."""
    override = os.environ.get("MHA_CI_STATE")
    if override:
        state = Path(override)
    else:
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        state = Path(base) / "mha-ci"
    state, cache = state.resolve(), Path(cache).resolve()
    if state == cache or state.is_relative_to(cache):
        raise ConfigError(f"the state folder {state} is inside the cache {cache}: whoever can write the cache "
                          "could then write what it is checked against; set MHA_CI_STATE (or XDG_STATE_HOME) "
                          "to a folder outside it", key="MHA_CI_STATE")
    return state
