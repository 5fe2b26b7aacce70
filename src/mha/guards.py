"""Config guards: known-bad settings, kept as data in the config files (`"guards": [...]`).

A guard fences off a setting that is known to miscompile or misbehave, with its reason, for the
problems and toolchains where it does. Standard library only, and no import from the rest of
the package: the tuner (mha_ci.tune, which runs without torch or triton) loads this file by
path and judges candidates with the very same rules the kernel applies.

    {"id": "gfx950-triton-3.8-stages3-head16",
     "triton": ">=3.8",                      optional: the Triton versions it applies to
     "passes": ["forward", "backward"],      optional: default both passes
     "when": {"head_dim_at_most": 16},       optional: the problems it applies to (all if absent)
     "forbid": {"num_stages": [3]},          config key -> values that must not be used
     "fallback": {"num_stages": 2},          optional: what is used instead (see below)
     "why": "..."}                           required: the reason, shown wherever it acts

`when` keys (all given must hold): `head_dim_at_most` N: the smaller of Dqk and Dv is <= N (a
dot with a 16-wide operand); `head_dim_above` N: the larger head dim is > N; `dtype`: a list of
"fp16" | "bf16" | "fp32"; `config` {key: value}: the config holds each of these values (a setting
that miscompiles only beside another, e.g. num_stages 3 only in a warp-specialized loop);
`band_or_dropout` true/false: the problem has (or has not) a causal or sliding-window band or
dropout, the features that make the key loop's work depend on the query row. Where a caller does
not know the problem's features (the tuner, judging a whole bucket), this condition counts as met.

Two kinds, by whether a fallback is given:
- with `fallback` (a *replacement*): for a problem the guard applies to, a forbidden value is
  replaced by the fallback at launch; a bucket may carry the value for its other problems.
- without (a *prohibition*): the value must not appear at all. A config file whose bucket holds
  it (in a bucket some problem of `when` can reach) is refused when loaded, a launch that would
  use it (a `config=` override included) raises, and the tuner prunes candidates that hold it.
"""
from __future__ import annotations

import functools
import re

PASSES = ("forward", "backward")
WHEN_KEYS = ("head_dim_at_most", "head_dim_above", "dtype", "config", "band_or_dropout")
GUARD_KEYS = {"id", "triton", "passes", "when", "forbid", "fallback", "why"}
DTYPES = ("fp16", "bf16", "fp32")
MAX_HEAD_DIM = 256
_VERSION = re.compile(r"^(>=|<=|==|>|<)?\s*(\d+(?:\.\d+)*)$")


class GuardError(ValueError):
    """A guard is malformed, or a config breaks a prohibition."""


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = re.match(r"(\d+(?:\.\d+)*)", str(text).strip())
    if not parts:
        raise GuardError(f"not a version: {text!r}")
    return tuple(int(x) for x in parts.group(1).split("."))


def version_matches(spec: str | None, version: str | None) -> bool:
    """`spec` like ">=3.8" against an installed version like "3.8.0"; compared on the spec's own
    number of components (">=3.8" holds for 3.8.0 and 3.10.1). An unknown version (None) matches:
    a guard whose toolchain cannot be told must not be skipped."""
    if spec is None or version is None:
        return True
    match = _VERSION.match(spec.strip())
    if not match:
        raise GuardError(f"guard triton {spec!r}: expected e.g. '>=3.8', '<3.5' or '==3.4'")
    op, number = match.group(1) or "==", tuple(int(x) for x in match.group(2).split("."))
    have = (_version_tuple(version) + (0,) * len(number))[:len(number)]
    return {">=": have >= number, "<=": have <= number, "==": have == number,
            ">": have > number, "<": have < number}[op]


def _check_when(when: dict, where: str, keys: set[str]) -> None:
    if set(when) - set(WHEN_KEYS):
        raise GuardError(f"{where}: unknown `when` keys {sorted(set(when) - set(WHEN_KEYS))}; known: {list(WHEN_KEYS)}")
    with_config = when.get("config", {})
    if not isinstance(with_config, dict):
        raise GuardError(f"{where}: when.config must be an object of config key -> value")
    for name in with_config:
        if name not in keys:
            raise GuardError(f"{where}: when.config names {name!r}, not a config key ({sorted(keys)})")
    if not isinstance(when.get("band_or_dropout", False), bool):
        raise GuardError(f"{where}: when.band_or_dropout must be true or false")


def check_guard(guard: dict, where: str, keys: set[str]) -> None:
    """Structural checks of one guard; `keys` are the config keys a guard may name."""
    if not isinstance(guard, dict):
        raise GuardError(f"{where}: a guard is an object, got {type(guard).__name__}")
    unknown = set(guard) - GUARD_KEYS
    if unknown:
        raise GuardError(f"{where}: unknown guard keys {sorted(unknown)}; known: {sorted(GUARD_KEYS)}")
    for required in ("id", "forbid", "why"):
        if not guard.get(required):
            raise GuardError(f"{where}: a guard needs {required!r}")
    version_matches(guard.get("triton"), "0")
    bad_passes = set(guard.get("passes", PASSES)) - set(PASSES)
    if bad_passes:
        raise GuardError(f"{where}: passes {sorted(bad_passes)} unknown; known: {list(PASSES)}")
    _check_when(guard.get("when", {}), where, keys)
    forbid, fallback = guard["forbid"], guard.get("fallback", {})
    for name, values in forbid.items():
        if name not in keys:
            raise GuardError(f"{where}: forbid names {name!r}, not a config key ({sorted(keys)})")
        if not isinstance(values, list) or not values:
            raise GuardError(f"{where}: forbid.{name} must be a non-empty list of values")
    for name, value in fallback.items():
        if name not in forbid:
            raise GuardError(f"{where}: fallback.{name} replaces nothing the guard forbids")
        if value in forbid[name]:
            raise GuardError(f"{where}: fallback.{name}={value} is itself forbidden")


def applies_to_problem(guard: dict, dqk: int, dv: int, dtype: str, band_or_dropout: bool | None = None) -> bool:
    when = guard.get("when", {})
    if band_or_dropout is not None and when.get("band_or_dropout", band_or_dropout) != band_or_dropout:
        return False
    if "head_dim_at_most" in when and not min(dqk, dv) <= when["head_dim_at_most"]:
        return False
    if "head_dim_above" in when and not max(dqk, dv) > when["head_dim_above"]:
        return False
    if "dtype" in when and dtype not in when["dtype"]:
        return False
    return True


def applies(guard: dict, pass_: str, triton_version: str | None) -> bool:
    return pass_ in guard.get("passes", PASSES) and version_matches(guard.get("triton"), triton_version)


def violations(guard: dict, cfg: dict) -> dict:
    """{key: value} of `cfg` that the guard forbids; none where `cfg` lacks a value of when.config
    (a key absent from `cfg` is unset, which no when.config value matches)."""
    with_config = guard.get("when", {}).get("config", {})
    if any(k not in cfg or cfg[k] != value for k, value in with_config.items()):
        return {}
    return {k: cfg[k] for k, values in guard["forbid"].items() if k in cfg and cfg[k] in values}


@functools.lru_cache(maxsize=None)
def _problems_of_buckets(select_bucket) -> dict:
    """bucket -> list of (dqk, dv, dtype) that reach it (every head dim 1..256; dropout counted as
    fp16 with dropout): what a `when` is intersected with."""
    out: dict = {}
    for dtype, p in (("fp16", 0.0), ("bf16", 0.0), ("fp32", 0.0), ("fp16", 0.5), ("bf16", 0.5)):
        for dqk in range(1, MAX_HEAD_DIM + 1):
            for dv in range(1, MAX_HEAD_DIM + 1):
                bucket = select_bucket("forward", dqk, dv, dtype, p)
                out.setdefault(bucket, set()).add((min(dqk, dv), max(dqk, dv), dtype))
    return out


def reaches_bucket(guard: dict, bucket: str, select_bucket) -> bool:
    """Whether some problem of `bucket` (by the bucket rule `select_bucket`) is one the guard
    applies to."""
    return any(applies_to_problem(guard, lo, hi, dtype)
               for lo, hi, dtype in _problems_of_buckets(select_bucket).get(bucket.split("+", 1)[0], ()))


def _bucket_configs(section: dict):
    """(bucket, config, suffix) of each bucket and of its nested `unmasked`, `gluon` and `ws` configs
    (mha.config.NESTED_KEYS)."""
    for bucket, cfg in section.items():
        yield bucket, cfg, ""
        for sub in ("unmasked", "gluon", "ws"):
            if isinstance(cfg, dict) and isinstance(cfg.get(sub), dict):
                yield bucket, cfg[sub], "." + sub


def check_config(data: dict, where: str, keys_of_pass: dict, select_bucket) -> list[dict]:
    """The guards of a parsed config file, checked; a bucket that holds a prohibited value for a
    problem it can reach is refused (GuardError). Toolchain conditions are ignored here: a
    shipped config must be valid on every toolchain it may meet."""
    guards = data.get("guards", [])
    if not isinstance(guards, list):
        raise GuardError(f"{where}: `guards` must be a list")
    all_keys = set().union(*keys_of_pass.values())
    seen = set()
    for i, guard in enumerate(guards):
        check_guard(guard, f"{where}: guards[{i}]", all_keys)
        if guard["id"] in seen:
            raise GuardError(f"{where}: two guards have the id {guard['id']!r}")
        seen.add(guard["id"])
        if "fallback" in guard:
            continue
        for pass_ in guard.get("passes", PASSES):
            for bucket, cfg, sub in _bucket_configs(data.get(pass_, {})):
                bad = violations(guard, cfg)
                if bad and reaches_bucket(guard, bucket, select_bucket):
                    bucket = bucket + sub
                    raise GuardError(f"{where}: {pass_}.{bucket} uses {bad}, which guard {guard['id']!r} "
                                     f"forbids: {guard['why']}")
    return guards


def enforce(guards: list[dict], pass_: str, cfg: dict, dqk: int, dv: int, dtype: str,
            triton_version: str | None, band_or_dropout: bool | None = None) -> dict:
    """The config to launch: replacements applied, prohibitions raised (GuardError)."""
    cfg = dict(cfg)
    for guard in guards:
        if not applies(guard, pass_, triton_version) or not applies_to_problem(guard, dqk, dv, dtype,
                                                                               band_or_dropout):
            continue
        bad = violations(guard, cfg)
        if not bad:
            continue
        if "fallback" not in guard:
            raise GuardError(f"{pass_} config {bad} is forbidden by guard {guard['id']!r} for this problem "
                             f"(Dqk {dqk}, Dv {dv}, {dtype}): {guard['why']}")
        cfg.update({k: guard["fallback"][k] for k in bad})
    return cfg
