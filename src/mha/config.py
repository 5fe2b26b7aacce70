"""Kernel launch configs: one JSON file per arch, one section per pass, buckets per problem kind.

The bucket rule (`select_bucket`) is the only place that maps a problem to a bucket. Settings
known to be bad are data: the `guards` of each config file (rules and format: mha.guards),
checked when the file is loaded and applied at every launch.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

from . import guards as guards_mod
from .arch import KNOWN_ARCHS

CONFIG_DIR = Path(__file__).parent / "configs"
PASSES = ("forward", "backward")
BUCKETS = ("default", "small_head", "large_head", "pe", "dropout_or_fp32", "large_head_dropout_or_fp32")
# Above this head dim the padded tile width doubles to 256: the tiles of the other buckets no
# longer fit shared memory / LDS (sm90 d256 forward needed 458752 bytes, twice the limit).
LARGE_HEAD_DIM = 128
REQUIRED_KEYS = {
    "forward": ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"),
    "backward": ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "num_warps", "num_stages"),
}
# Keys a bucket may leave out. `warp_specialize` (true/false, absent = false): the forward runs
# mha.kernels.forward_ws, the variant Triton's Hopper warp-specialization pass acts on (sm90,
# num_warps 4; docs/configs.md). A boolean, the only key that is not an integer.
OPTIONAL_KEYS: dict[str, tuple[str, ...]] = {"forward": ("warp_specialize",), "backward": ()}
BOOLEAN_KEYS = ("warp_specialize",)
# A forward bucket may also hold `unmasked`: a whole forward config (the keys above) used instead
# of the bucket's own for problems without a causal or sliding-window band, whose key blocks
# need no mask. The warp-specialized forward runs one loop and so masks every block; it pays
# only where nothing is masked (docs/configs.md, "Warp-specialized forward").
UNMASKED = "unmasked"


def keys_of(pass_: str) -> set[str]:
    """Every config key a bucket of `pass_` may hold."""
    return set(REQUIRED_KEYS[pass_]) | set(OPTIONAL_KEYS[pass_])


class ConfigFileError(LookupError):
    """A config file is missing, unknown, or lacks a pass, bucket or key."""


def config_path(arch: str) -> Path:
    return CONFIG_DIR / f"{arch}-MHA-DEFAULT.json"


@functools.lru_cache(maxsize=None)
def load_arch_configs(arch: str) -> dict:
    """Parsed and checked config file of `arch`; read once per process (cached)."""
    path = config_path(arch)
    if not path.is_file():
        raise ConfigFileError(
            f"no kernel config for arch {arch!r}: looked for {path}; known archs: {', '.join(KNOWN_ARCHS)}"
        )
    data = json.loads(path.read_text())
    for pass_ in PASSES:
        section = data.get(pass_)
        if not isinstance(section, dict):
            raise ConfigFileError(f"{path}: missing section {pass_!r}")
        for bucket in BUCKETS:
            if bucket not in section:
                raise ConfigFileError(f"{path}: section {pass_!r} lacks bucket {bucket!r}")
            missing = [k for k in REQUIRED_KEYS[pass_] if k not in section[bucket]]
            if missing:
                raise ConfigFileError(f"{path}: {pass_}.{bucket} lacks keys {missing}")
            _check_booleans(section[bucket], f"{path}: {pass_}.{bucket}")
            if UNMASKED in section[bucket]:
                _check_unmasked(section[bucket][UNMASKED], pass_, f"{path}: {pass_}.{bucket}.{UNMASKED}")
    try:
        guards_mod.check_config(data, str(path), {p: keys_of(p) for p in PASSES}, select_bucket)
    except guards_mod.GuardError as exc:
        raise ConfigFileError(str(exc)) from None
    return data


def _check_unmasked(cfg, pass_: str, where: str) -> None:
    if pass_ != "forward":
        raise ConfigFileError(f"{where}: only forward buckets may hold {UNMASKED!r}")
    if not isinstance(cfg, dict):
        raise ConfigFileError(f"{where}: must be an object of forward config keys, got {cfg!r}")
    missing = [k for k in REQUIRED_KEYS[pass_] if k not in cfg]
    unknown = sorted(set(cfg) - keys_of(pass_))
    if missing or unknown:
        raise ConfigFileError(f"{where}: lacks keys {missing}" if missing else f"{where}: unknown keys {unknown}")
    _check_booleans(cfg, where)


def _check_booleans(cfg: dict, where: str) -> None:
    for key in BOOLEAN_KEYS:
        if key in cfg and not isinstance(cfg[key], bool):
            raise ConfigFileError(f"{where}: {key} must be true or false, got {cfg[key]!r}")


@functools.lru_cache(maxsize=None)
def triton_version() -> str | None:
    """The installed Triton's version, which toolchain-conditioned guards are matched against."""
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def select_bucket(pass_: str, dqk: int, dv: int, dtype: str, dropout_p: float) -> str:
    """The config bucket of a problem, first match wins:

    1. ``dropout_or_fp32`` / ``large_head_dropout_or_fp32``: dropout_p > 0 or dtype "fp32" (more
       live registers: the keep mask, or fp32 operands twice the size, so smaller tiles); the
       second when a head dim exceeds LARGE_HEAD_DIM (256-wide fp32 tiles need smaller ones still);
    2. ``pe``: Dqk > Dv with Dv <= LARGE_HEAD_DIM (the MLA 192/128 case: the QK tile is larger
       than the PV tile);
    3. ``large_head``: a head dim above LARGE_HEAD_DIM (padded width 256);
    4. ``small_head``: 16 < Dv <= 64;
    5. ``default``: everything else (64 < Dv <= 128, and the tiny Dv <= 16).
    The same rule serves both passes; `pass_` is accepted so a pass may diverge later.
    """
    if pass_ not in PASSES:
        raise ValueError(f"pass_ must be one of {PASSES}, got {pass_!r}")
    large = max(dqk, dv) > LARGE_HEAD_DIM
    if dropout_p > 0 or dtype == "fp32":
        return "large_head_dropout_or_fp32" if large else "dropout_or_fp32"
    if dqk > dv and dv <= LARGE_HEAD_DIM:
        return "pe"
    if large:
        return "large_head"
    if 16 < dv <= 64:
        return "small_head"
    return "default"


def apply_guards(pass_: str, arch: str, cfg: dict, dqk: int, dv: int, dtype: str,
                 band_or_dropout: bool | None = None) -> dict:
    """`cfg` with the guards of the arch's file applied (mha.guards.enforce): replacements made,
    prohibitions raised as ConfigFileError. band_or_dropout None: not known (every guard whose
    other conditions hold applies)."""
    try:
        return guards_mod.enforce(load_arch_configs(arch).get("guards", []), pass_, cfg, dqk, dv, dtype,
                                  triton_version(), band_or_dropout)
    except guards_mod.GuardError as exc:
        raise ConfigFileError(str(exc)) from None


def resolve(pass_: str, arch: str, dqk: int, dv: int, dtype: str, dropout_p: float,
            override: dict | None = None, banded: bool = True) -> tuple[str, dict]:
    """(bucket, config) for one pass: file bucket, then an explicit override, then the guards.

    An explicit `config=` dict wins over the file; it may hold the keys of both passes (those of
    the other pass are ignored) or be {"forward": {...}, "backward": {...}}. The guards come last,
    so an override cannot launch a known miscompile (the tuner's candidates are overrides).
    `banded`: the problem has a causal or sliding-window band; a problem without one takes the
    bucket's `unmasked` config where it has one (before the override, which still wins).
    """
    bucket = select_bucket(pass_, dqk, dv, dtype, dropout_p)
    cfg = dict(load_arch_configs(arch)[pass_][bucket])
    unmasked = cfg.pop(UNMASKED, None)
    if unmasked is not None and not banded:
        cfg = dict(unmasked)
    if override:
        nested = isinstance(override.get(pass_), dict)
        part = override[pass_] if nested else {k: v for k, v in override.items() if k not in PASSES}
        allowed = keys_of("forward") | keys_of("backward")
        unknown = set(part) - allowed
        if unknown:
            raise ConfigFileError(
                f"config override has unknown keys {sorted(unknown)}; known: {sorted(allowed)}")
        _check_booleans(part, "config override")
        mine = {k: v if k in BOOLEAN_KEYS else int(v) for k, v in part.items() if k in keys_of(pass_)}
        if mine:
            cfg.update(mine)
            bucket = f"{bucket}+override"
    return bucket, apply_guards(pass_, arch, cfg, dqk, dv, dtype, banded or dropout_p > 0)
