"""One attention problem of the perf workload set, and its stable key.

Standard library only: the GPU payload (mha_ci.payloads.perf) reads shapes through this module
inside toolchain environments that have neither pydantic nor yaml.

Key format (docs/architecture.md, Stored formats, fixed): `dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1`, then
`_wl<left>_wr<right>` when a sliding window is set, `_sink` with an attention sink, `_drop` with
dropout, and `_bwd` when the shape times the backward pass (forward keys carry no pass suffix, so
every forward key keeps the name it had before shapes had a pass). Per-sequence lengths for
varlen: every one of the `batch` packed sequences has Sq / Sk tokens, so a dense and a varlen
shape of one key differ only in the layout (and kernel path).
"""
from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass, replace

LAYOUTS = ("dense", "varlen")
DTYPES = ("bf16", "fp16", "fp32")
# The two passes a shape can time: the forward call, or the whole backward step after it.
PASSES = ("fwd", "bwd")
# The config section (mha.config.PASSES) each pass reads its kernels' tiles from.
CONFIG_PASS = {"fwd": "forward", "bwd": "backward"}
# Backward matmul FLOPs over forward ones: dS = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q, plus
# the recomputed S = Q K^T: five products of the forward's size against its two.
BWD_FLOPS_RATIO = 2.5

_KEY_RE = re.compile(
    r"^(?P<layout>dense|varlen)_b(?P<batch>\d+)_hq(?P<hq>\d+)_hk(?P<hk>\d+)_sq(?P<sq>\d+)_sk(?P<sk>\d+)"
    r"_dqk(?P<dqk>\d+)_dv(?P<dv>\d+)_c(?P<causal>[01])"
    r"(?:_wl(?P<wl>-?\d+)_wr(?P<wr>-?\d+))?(?P<sink>_sink)?(?P<drop>_drop)?(?P<bwd>_bwd)?$")


@dataclass(frozen=True, order=True)
class Shape:
    layout: str
    batch: int
    hq: int
    hk: int
    sq: int
    sk: int
    dqk: int
    dv: int
    causal: bool
    window: tuple[int, int] = (-1, -1)     # (left, right); -1 = unbounded, as flash-attn
    sink: bool = False
    dropout_p: float = 0.0
    dtype: str = "bf16"
    pass_: str = "fwd"                     # "fwd" or "bwd" (PASSES); "pass" in JSON

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.pass_ not in PASSES:
            raise ValueError(f"pass must be one of {PASSES}, got {self.pass_!r}")
        if self.pass_ == "bwd" and self.sq == 1:
            raise ValueError("a decode shape (sq 1) has no backward pass")
        for name in ("batch", "hq", "hk", "sq", "sk", "dqk", "dv"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hq % self.hk:
            raise ValueError(f"hq ({self.hq}) must be a multiple of hk ({self.hk})")

    @property
    def key(self) -> str:
        key = (f"{self.layout}_b{self.batch}_hq{self.hq}_hk{self.hk}_sq{self.sq}_sk{self.sk}"
               f"_dqk{self.dqk}_dv{self.dv}_c{int(self.causal)}")
        if tuple(self.window) != (-1, -1):
            key += f"_wl{self.window[0]}_wr{self.window[1]}"
        if self.sink:
            key += "_sink"
        if self.dropout_p > 0:
            key += "_drop"
        if self.pass_ == "bwd":
            key += "_bwd"
        return key

    @property
    def config_pass(self) -> str:
        """The section of the kernel configs this shape's kernels come from."""
        return CONFIG_PASS[self.pass_]

    @property
    def flops(self) -> int:
        """Matmul FLOPs of the pass over the (query, key) pairs the mask lets through."""
        pairs = visible_pairs(self.sq, self.sk, self.causal, tuple(self.window))
        fwd = 2 * self.batch * self.hq * pairs * (self.dqk + self.dv)
        return int(fwd * BWD_FLOPS_RATIO) if self.pass_ == "bwd" else fwd

    def with_pass(self, pass_: str) -> "Shape":
        return replace(self, pass_=pass_)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["window"] = list(self.window)
        data["pass"] = data.pop("pass_")
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Shape":
        data = dict(data)
        data["window"] = tuple(data.get("window", (-1, -1)))
        # Documents written before shapes had a pass hold forward shapes only.
        data["pass_"] = data.pop("pass", "fwd")
        return cls(**data)


def pass_of_key(key: str) -> str:
    """The pass a shape key names ("fwd" or "bwd"), without parsing the rest."""
    return "bwd" if key.endswith("_bwd") else "fwd"


def parse_key(key: str, dtype: str = "bf16", dropout_p: float = 0.1) -> Shape:
    """The shape a key names (dtype and the dropout probability are not part of the key)."""
    match = _KEY_RE.match(key)
    if not match:
        raise ValueError(f"not a perf shape key: {key!r} (expected like dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1)")
    g = match.groupdict()
    window = (int(g["wl"]), int(g["wr"])) if g["wl"] is not None else (-1, -1)
    return Shape(layout=g["layout"], batch=int(g["batch"]), hq=int(g["hq"]), hk=int(g["hk"]),
                 sq=int(g["sq"]), sk=int(g["sk"]), dqk=int(g["dqk"]), dv=int(g["dv"]),
                 causal=g["causal"] == "1", window=window, sink=bool(g["sink"]),
                 dropout_p=dropout_p if g["drop"] else 0.0, dtype=dtype, pass_="bwd" if g["bwd"] else "fwd")


@functools.lru_cache(maxsize=None)
def visible_pairs(sq: int, sk: int, causal: bool, window: tuple[int, int]) -> int:
    """(query, key) pairs per head and sequence that the mask keeps.

    Causal is bottom-right aligned as in flash-attn: query i sees keys up to i + (Sk - Sq).
    """
    offset = sk - sq
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    total = 0
    for i in range(sq):
        lo = 0 if left < 0 else max(0, i + offset - left)
        hi = sk - 1 if right < 0 else min(sk - 1, i + offset + right)
        if hi >= lo:
            total += hi - lo + 1
    return total
