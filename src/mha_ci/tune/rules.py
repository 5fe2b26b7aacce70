"""The kernel's config guards, judged on the orchestrating side.

mha.guards is standard library only. It is loaded from the checkout being tuned (`root`), like
that checkout's config files, rather than from the installed `mha`: the tuner applies exactly the
rules that checkout's kernel applies at launch.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from mha_ci.errors import ConfigError
from mha_ci.perf.buckets import select_bucket


def guards_module(root: Path):
    path = Path(root) / "src" / "mha" / "guards.py"
    spec = importlib.util.spec_from_file_location("mha_guards_by_path", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot load the config guards: {path} is not a Python module", key="--arch")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config_file(root: Path, arch: str) -> Path:
    return Path(root) / "src" / "mha" / "configs" / f"{arch}-MHA-DEFAULT.json"


def load_config(root: Path, arch: str) -> dict:
    path = config_file(root, arch)
    if not path.is_file():
        raise ConfigError(f"no kernel config for arch {arch!r}: {path} does not exist", key="--arch")
    return json.loads(path.read_text())


def guard_verdict(module, guards: list[dict], pass_: str, bucket: str, cfg: dict,
                  triton_version: str | None) -> tuple[str | None, list[str]]:
    """(why the candidate is pruned, or None; notes of replacements that will act on some of the
    bucket's problems)."""
    notes: list[str] = []
    for guard in guards:
        if not module.applies(guard, pass_, triton_version):
            continue
        bad = module.violations(guard, cfg)
        if not bad or not module.reaches_bucket(guard, bucket, select_bucket):
            continue
        if "fallback" not in guard:
            return f"guard {guard['id']}: {guard['why']}", notes
        notes.append(f"guard {guard['id']} replaces {bad} by {guard['fallback']} where it applies "
                     f"({guard.get('when', {})})")
    return None, notes
