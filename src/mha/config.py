"""Kernel launch configs: one JSON file per arch, one section per pass, buckets per problem kind.

The bucket rule (`select_bucket`) is the only place that maps a problem to a bucket. Settings
known to be bad are data: the `guards` of each config file (rules and format: mha.guards),
checked when the file is loaded and applied at every launch.
"""
from __future__ import annotations

import difflib
import functools
import json
import operator
from collections.abc import Mapping
from pathlib import Path

from . import guards as guards_mod
from .arch import KNOWN_ARCHS
from .errors import AttentionInputError

CONFIG_DIR = Path(__file__).parent / "configs"
PASSES = ("forward", "backward")
BUCKETS = ("default", "small_head_32", "small_head", "large_head", "pe", "dropout_or_fp32", "large_head_dropout_or_fp32")
# Above this head dim the padded tile width doubles to 256: the tiles of the other buckets no
# longer fit shared memory / LDS (sm90 d256 forward needed 458752 bytes, twice the limit).
LARGE_HEAD_DIM = 128
REQUIRED_KEYS = {
    "forward": ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"),
    "backward": ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "num_warps", "num_stages"),
}
# Keys a bucket may leave out. `warp_specialize` (true/false, absent = false): the forward runs
# mha.kernels.forward_ws, the variant Triton's Hopper warp-specialization pass acts on (sm90,
# num_warps 4; docs/configs.md). `single_pass` (true/false, absent = false): a backward whose
# caller allows nondeterminism (deterministic=False) runs mha.kernels.backward.attn_bwd_dkdv_dq,
# one kernel that also adds dQ into a float32 buffer with atomics, BLOCK_M1/BLOCK_N1 its tiles.
# The booleans are the only keys that are not integers.
OPTIONAL_KEYS: dict[str, tuple[str, ...]] = {"forward": ("warp_specialize",), "backward": ("single_pass",)}
BOOLEAN_KEYS = ("warp_specialize", "single_pass")
# A forward bucket may also hold `unmasked`: a whole forward config (the keys above) used instead
# of the bucket's own for problems without a causal or sliding-window band, whose key blocks
# need no mask. The warp-specialized forward runs one loop and so masks every block; it pays
# only where nothing is masked (docs/configs.md, "Warp-specialized forward").
UNMASKED = "unmasked"
# A bucket of either pass may also hold `gluon`: a config of the pass's Gluon kernels
# (mha.kernels.forward_gluon, mha.kernels.backward_gluon, and for the `pe` bucket's backward
# mha.kernels.backward_gluon_pe) plus `"triton": "<version spec>"`, the toolchains that run them
# (Gluon's API is experimental and moves between releases). Where the running Triton matches and
# the problem is one those kernels serve (gluon_serves), it is used instead of the bucket's own
# config and of `unmasked`, and the resolved config says so with `"gluon": true`; elsewhere it is
# ignored.
GLUON = "gluon"
GLUON_TILE_ROWS = 128   # the Gluon kernels' tiles: the lengths they take are multiples
# What the kernels' structure fixes: two consumer warpgroups of 4 warps and 64 rows (the forward's
# query tile, the dK/dV key tile and the dQ query tile are 128 rows); query blocks of 64 in the
# dK/dV kernel (128 spills: docs/configs.md); 2 stages in the backward, whose dQ rings of K and V
# at BLOCK_N2 128 and D 128 take 192 KB of shared memory at 2 stages, and would not fit at 3.
GLUON_SHAPE = {
    "forward": {"BLOCK_M": (GLUON_TILE_ROWS,), "BLOCK_N": (64, 128), "num_warps": (4,)},
    "backward": {"BLOCK_M1": (64,), "BLOCK_N1": (GLUON_TILE_ROWS,), "BLOCK_M2": (GLUON_TILE_ROWS,),
                 "BLOCK_N2": (64, 128), "num_warps": (4,), "num_stages": (2,)},
}
# The `pe` bucket's Gluon backward is the dK/dV kernel alone (mha.kernels.backward_gluon_pe), for
# Dqk 192 / Dv 128; dQ runs the Triton kernel with the bucket's own BLOCK_M2/BLOCK_N2. Its config
# holds the dK/dV keys only; its consumers hold dK in two parts, so query blocks are 32 rows (64
# spills: docs/configs.md). Its Gluon forward is mha.kernels.forward_gluon with the q/k head dim
# in two parts, shaped as every Gluon forward (GLUON_SHAPE).
GLUON_PE = "pe"
GLUON_PE_DIMS = (192, 128)
GLUON_PE_SHAPE = {"BLOCK_M1": (32,), "BLOCK_N1": (GLUON_TILE_ROWS,), "num_warps": (4,), "num_stages": (2, 3)}
# The `default` backward bucket (Dqk == Dv == 128) may also hold `ws`: a config of the
# warp-specialized backward (mha.kernels.backward_ws), FA3's split of the backward built by
# Triton's own Hopper pass, for toolchains without Gluon, plus `"triton": "<version spec>"`. It
# serves the problems and inputs the Gluon backward does, and is selected the same way (`"ws":
# true` in the resolved config); where the bucket's `gluon` config also names the running Triton,
# that one is used. Its shape is fixed as the Gluon one's: 4 warps (the only count the pass acts
# on), tiles of 128 keys (dK/dV) and 128 queries (dQ), each split into two consumer groups of 64;
# query blocks of 32 or 64 in the dK/dV kernel, key blocks of 64 or 128 in the dQ kernel. Other
# buckets may not hold it: at d64 it is slower than the Triton kernels, and its Dqk 192 form gave
# wrong dK on the GPU (docs/configs.md, "Warp-specialized backward").
WS = "ws"
WS_BUCKET = "default"
WS_SHAPE = {"BLOCK_M1": (32, 64), "BLOCK_N1": (GLUON_TILE_ROWS,), "BLOCK_M2": (GLUON_TILE_ROWS,),
            "BLOCK_N2": (64, 128), "num_warps": (4,), "num_stages": (2, 3)}
# The nested configs a bucket may hold, each for some of its problems.
NESTED_KEYS = (UNMASKED, GLUON, WS)

# What a value may be, for `config=` overrides (check_override). Tiles are powers of two
# (tl.arange) of at least 16 (tl.dot needs 16 along each dimension) and at most 256: guards fence
# values by listing them (BLOCK_M 128 and 256 for the warp-specialized forward), so a larger tile
# would slip past one; no shipped config or tune candidate is larger. Stages run from 1 (no
# software pipelining) to 8, the largest value a guard lists (3 to 8 for head dims <= 16).
# Warps are a power of two filling at most a block's 1024 threads: 32 lanes a warp on NVIDIA, 64
# a wavefront on AMD.
BLOCK_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2")
MIN_BLOCK, MAX_BLOCK = 16, 256
MIN_STAGES, MAX_STAGES = 1, 8
MAX_THREADS = 1024


def keys_of(pass_: str) -> set[str]:
    """Every config key a bucket of `pass_` may hold."""
    return set(REQUIRED_KEYS[pass_]) | set(OPTIONAL_KEYS[pass_])


class ConfigFileError(LookupError):
    """A config file is missing, unknown, or lacks a pass, bucket or key."""


class ConfigOverrideError(AttentionInputError):
    """A `config=` override that is not a config: refused before any launch, naming the key."""


class ConfigOverrideTypeError(ConfigOverrideError, TypeError):
    """An override, or a value in it, of the wrong Python type: refused, not converted (the
    string '32', 16.7 or True is not a tile size, and int() would make one of each)."""


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
            if GLUON in section[bucket]:
                _check_gluon(section[bucket][GLUON], pass_, bucket, f"{path}: {pass_}.{bucket}.{GLUON}")
            if WS in section[bucket]:
                _check_ws(section[bucket][WS], pass_, bucket, f"{path}: {pass_}.{bucket}.{WS}")
    try:
        guards_mod.check_config(data, str(path), {p: keys_of(p) for p in PASSES}, select_bucket)
    except guards_mod.GuardError as exc:
        raise ConfigFileError(str(exc)) from None
    return data


def _check_sub_config(cfg, where: str, required: tuple[str, ...], allowed: set[str]) -> None:
    """A bucket's nested config (`unmasked`, `gluon`): an object holding `required`, and nothing
    outside `allowed`."""
    if not isinstance(cfg, dict):
        raise ConfigFileError(f"{where}: must be an object of the keys {list(required)}, got {cfg!r}")
    missing = [k for k in required if k not in cfg]
    unknown = sorted(set(cfg) - allowed)
    if missing or unknown:
        raise ConfigFileError(f"{where}: lacks keys {missing}" if missing else f"{where}: unknown keys {unknown}")


def _check_unmasked(cfg, pass_: str, where: str) -> None:
    if pass_ != "forward":
        raise ConfigFileError(f"{where}: only forward buckets may hold {UNMASKED!r}")
    _check_sub_config(cfg, where, REQUIRED_KEYS[pass_], keys_of(pass_))
    _check_booleans(cfg, where)


def _check_gluon(cfg, pass_: str, bucket: str, where: str) -> None:
    pe_backward = bucket == GLUON_PE and pass_ == "backward"
    shape = GLUON_PE_SHAPE if pe_backward else GLUON_SHAPE[pass_]
    keys = (*(shape if pe_backward else REQUIRED_KEYS[pass_]), "triton")
    _check_shaped(cfg, where, keys, shape, f"the Gluon {pass_}")


def _check_ws(cfg, pass_: str, bucket: str, where: str) -> None:
    if pass_ != "backward" or bucket != WS_BUCKET:
        raise ConfigFileError(f"{where}: only the backward's {WS_BUCKET!r} bucket may hold {WS!r}")
    _check_shaped(cfg, where, (*WS_SHAPE, "triton"), WS_SHAPE, "the warp-specialized backward")


def _check_shaped(cfg, where: str, keys: tuple[str, ...], shape: dict, what: str) -> None:
    """A `gluon` or `ws` config: exactly `keys`, a valid `triton` version spec, and each value of
    `shape` one its kernels' structure allows."""
    _check_sub_config(cfg, where, keys, set(keys))
    try:
        guards_mod.version_matches(cfg["triton"], "0")
    except guards_mod.GuardError as exc:
        raise ConfigFileError(f"{where}: {exc}") from None
    for key, allowed in shape.items():
        if cfg[key] not in allowed:
            raise ConfigFileError(f"{where}: {what} takes {key} in {list(allowed)}, got {cfg[key]!r}")


def gluon_selected(cfg: dict | None, version: str | None = None) -> bool:
    """Whether a bucket's `gluon` (or `ws`) config applies under Triton `version` (default: the
    running one)."""
    version = version or triton_version()
    return cfg is not None and version is not None and guards_mod.version_matches(cfg["triton"], version)


def gluon_serves(pass_: str, arch: str, dtype: str, dqk: int, dv: int, window: tuple[int, int], has_sink: bool,
                 dropout: bool, varlen: bool) -> bool:
    """The problems the Gluon kernels of `pass_` compute: sm90, fp16/bf16, dense, at most a causal
    band (a window (-1, 0) is one), no sink, no dropout; Dqk == Dv of 64 or 128 (forward_gluon,
    backward_gluon), and Dqk 192 / Dv 128 (the `pe` bucket's: forward_gluon with the q/k head dim
    in two parts, backward_gluon_pe). One rule for the launch (mha.launch.gluon_serves) and the
    tuner, which must know which shapes a bucket's `gluon` config takes from its own."""
    dims = (dqk == dv and dqk in (64, 128)) or (dqk, dv) == GLUON_PE_DIMS
    return (arch == "sm90" and dtype in ("fp16", "bf16") and dims and not varlen
            and window[0] < 0 and window[1] <= 0 and not has_sink and not dropout)


def gluon_lengths_ok(seqlen_q: int, seqlen_k: int, causal: bool) -> bool:
    """The lengths it takes: positive multiples of its tile (descriptors over (B*S, H*D) views),
    and for a causal band at least as many keys as queries (every row sees a key)."""
    return (seqlen_q > 0 and seqlen_k > 0 and seqlen_q % GLUON_TILE_ROWS == 0 and seqlen_k % GLUON_TILE_ROWS == 0
            and (not causal or seqlen_k >= seqlen_q))


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
    4. ``small_head_32``: 16 < Dv <= 32, and ``small_head``: 32 < Dv <= 64 (one tile choice does
       not serve both: docs/configs.md);
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
    if 16 < dv <= 32:
        return "small_head_32"
    if 32 < dv <= 64:
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


def warp_size(arch: str) -> int:
    return 64 if arch.startswith("gfx") else 32


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def value_problem(key: str, value: int, arch: str) -> str | None:
    """What an int `value` of integer config `key` should have been on `arch`; None when right."""
    if key in BLOCK_KEYS:
        if MIN_BLOCK <= value <= MAX_BLOCK and _power_of_two(value):
            return None
        return f"expected a power of two from {MIN_BLOCK} to {MAX_BLOCK}"
    if key == "num_warps":
        most = MAX_THREADS // warp_size(arch)
        if value <= most and _power_of_two(value):
            return None
        return (f"expected a power of two from 1 to {most} on {arch} ({MAX_THREADS} threads a block, "
                f"{warp_size(arch)} lanes a warp)")
    if key == "num_stages":
        return None if MIN_STAGES <= value <= MAX_STAGES else f"expected an int from {MIN_STAGES} to {MAX_STAGES}"
    raise KeyError(key)


def _closest(key, known) -> str | None:
    """The known key `key` most likely meant (case and small typos forgiven), if any is close."""
    lowered = {k.lower(): k for k in known}
    match = difflib.get_close_matches(str(key).lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


def _check_value(key: str, value, arch: str, where: str):
    if key in BOOLEAN_KEYS:
        if not isinstance(value, bool):
            raise ConfigOverrideTypeError(f"{where}: expected a bool, got {type(value).__name__} {value!r}")
        return value
    if isinstance(value, bool):
        raise ConfigOverrideTypeError(f"{where}: expected an int, got the bool {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ConfigOverrideTypeError(f"{where}: expected an int, got {type(value).__name__} {value!r} "
                                      "(not converted: pass an int)") from None
    problem = value_problem(key, number, arch)
    if problem:
        raise ConfigOverrideError(f"{where}: {problem}, got {number}")
    return number


def _check_keys(part: Mapping, known: set[str], where: str, section: str | None) -> None:
    for key in part:
        if key in known:
            continue
        if key in NESTED_KEYS:
            raise ConfigOverrideError(
                f"{where}: {key!r} is a config-file key (a bucket's config for some of its problems); an "
                "override serves the call it comes with: give the config keys themselves")
        other = [p for p in PASSES if p != section and key in keys_of(p)] if section else []
        if other:
            raise ConfigOverrideError(f"{where}: {key!r} is a {other[0]} key; a {section!r} section takes "
                                      f"{sorted(known)}")
        close = _closest(key, known | (set() if section else set(PASSES)))
        hint = f"did you mean {close!r}? known" if close else "known"
        sections = "" if section else f", or the sections {list(PASSES)}"
        raise ConfigOverrideError(f"{where}: unknown key {key!r}; {hint}: {sorted(known)}{sections}")


def check_override(override, arch: str) -> dict[str, dict]:
    """A `config=` override checked, as {pass: {key: value}} (empty sections where it sets nothing).

    Two forms: flat keys of either pass (num_warps and num_stages then set both), or per-pass
    sections {"forward": {...}, "backward": {...}}, not both at once (a pass with a section would
    ignore the flat keys). Every key must be one of its pass (`unmasked` is a config-file key
    only), every value an int within the limits above (`warp_specialize`, `single_pass` bools).
    Anything else raises ConfigOverrideError, or ConfigOverrideTypeError for a wrong type, naming
    the key.
    """
    if not isinstance(override, Mapping):
        raise ConfigOverrideTypeError(
            "config: expected a dict of config keys (e.g. {'BLOCK_M': 64}) or of per-pass sections "
            f"({{'forward': {{...}}, 'backward': {{...}}}}), got {type(override).__name__} {override!r}")
    sections = [p for p in PASSES if p in override]
    for pass_ in sections:
        if not isinstance(override[pass_], Mapping):
            raise ConfigOverrideTypeError(f"config[{pass_!r}]: expected a dict of {pass_} config keys, got "
                                          f"{type(override[pass_]).__name__} {override[pass_]!r}")
    flat = {k: v for k, v in override.items() if k not in PASSES}
    if sections and flat:
        named = f"the section {sections[0]!r}" if len(sections) == 1 else "the sections 'forward' and 'backward'"
        raise ConfigOverrideError(
            f"config: flat keys {sorted(map(str, flat))} beside {named}: give flat keys (each pass takes its "
            "own) or per-pass sections, not both (a pass with a section would ignore the flat keys)")
    out: dict[str, dict] = {p: {} for p in PASSES}
    if sections:
        for pass_ in sections:
            where = f"config[{pass_!r}]"
            _check_keys(override[pass_], keys_of(pass_), where, pass_)
            out[pass_] = {k: _check_value(k, v, arch, f"{where}[{k!r}]") for k, v in override[pass_].items()}
        return out
    _check_keys(flat, keys_of("forward") | keys_of("backward"), "config", None)
    for key, value in flat.items():
        checked = _check_value(key, value, arch, f"config[{key!r}]")
        for pass_ in PASSES:
            if key in keys_of(pass_):
                out[pass_][key] = checked
    return out


def resolve(pass_: str, arch: str, dqk: int, dv: int, dtype: str, dropout_p: float,
            override: dict | None = None, banded: bool = True, serves_gluon: bool = False) -> tuple[str, dict]:
    """(bucket, config) for one pass: file bucket, then an explicit override, then the guards.

    An explicit `config=` dict wins over the file; it may hold the keys of both passes (those of
    the other pass are ignored) or be {"forward": {...}, "backward": {...}}, and is checked by
    check_override (ConfigOverrideError names a bad key or value). The guards come last,
    so an override cannot launch a known miscompile (the tuner's candidates are overrides).
    `banded`: the problem has a causal or sliding-window band; a problem without one takes the
    bucket's `unmasked` config where it has one (before the override, which still wins).
    `serves_gluon`: the problem is one the Gluon kernels serve (gluon_serves); it then takes the bucket's
    `gluon` config where that names the running toolchain (the result holds `"gluon": True`), else
    its `ws` config where that does (`"ws": True`), unless an override sets keys of this pass:
    overrides configure the Triton kernels (the tuner's candidates time the bucket's own config,
    which neither of those is).
    """
    bucket = select_bucket(pass_, dqk, dv, dtype, dropout_p)
    cfg = dict(load_arch_configs(arch)[pass_][bucket])
    unmasked = cfg.pop(UNMASKED, None)
    gluon = cfg.pop(GLUON, None)
    ws = cfg.pop(WS, None)
    mine = check_override(override, arch)[pass_] if override is not None else {}
    if unmasked is not None and not banded:
        cfg = dict(unmasked)
    if serves_gluon and not mine:
        for key, nested in ((GLUON, gluon), (WS, ws)):
            if gluon_selected(nested):
                cfg = {k: v for k, v in nested.items() if k != "triton"} | {key: True}
                break
    if mine:
        cfg.update(mine)
        bucket = f"{bucket}+override"
    return bucket, apply_guards(pass_, arch, cfg, dqk, dv, dtype, banded or dropout_p > 0)
