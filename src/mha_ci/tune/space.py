"""The candidate space: an explicit table of knob values per vendor and pass.

Kept small on purpose: every candidate costs an ahead-of-time compile on the CPU (3-60 s each on
the 3.8 toolchain, the large tiles slowest) and, if it survives, GPU time. The values follow the
kernel's constraints: BLOCK_M / BLOCK_N are powers of two >= 16 (tl.dot needs 16 along each
dimension); num_stages 1 means no software pipelining.

AMD-only knobs (waves_per_eu, matrix_instr_nonkdim, kpack) are not searched: src/mha/launch.py
passes only num_warps and num_stages to a launch, and mha.config accepts only the keys of
REQUIRED_KEYS, so the kernel cannot take them yet (docs/tune.md, "Gaps").

Backward candidates tie the two kernels' tiles (BLOCK_M1 = BLOCK_N2, BLOCK_N1 = BLOCK_M2: dkdv
walks queries in BLOCK_M1 steps over a BLOCK_N1 key tile, dq the transpose), which keeps the
space the size of the forward one.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

# vendor -> pass -> knob -> values
SPACES: dict[str, dict[str, dict[str, tuple[int, ...]]]] = {
    "nvidia": {
        "forward": {"BLOCK_M": (64, 128), "BLOCK_N": (32, 64, 128), "num_warps": (4, 8), "num_stages": (2, 3, 4)},
        "backward": {"BLOCK_M1": (32, 64), "BLOCK_N1": (64, 128), "num_warps": (4, 8), "num_stages": (1, 2, 3)},
    },
    "amd": {
        "forward": {"BLOCK_M": (64, 128), "BLOCK_N": (32, 64, 128), "num_warps": (4, 8), "num_stages": (1, 2, 3)},
        "backward": {"BLOCK_M1": (16, 32), "BLOCK_N1": (32, 64), "num_warps": (4, 8), "num_stages": (1, 2)},
    },
}
CURRENT = "current"


@dataclass(frozen=True)
class Candidate:
    id: str                 # "m128-n64-w8-s3" (forward), "m32-n128-w4-s2" (backward), or "current"
    config: tuple           # ((key, value), ...) in the pass's key order

    @property
    def cfg(self) -> dict:
        return dict(self.config)

    def distance(self, current: dict) -> int:
        """How many knobs differ from the current config (the single-knob changes are tried first:
        the study's fixes were such)."""
        return sum(1 for k, v in self.config if current.get(k) != v)

    def to_json(self) -> dict:
        return {"id": self.id, "config": self.cfg}


def _full(pass_: str, values: dict) -> dict:
    if pass_ == "forward":
        return dict(values)
    return {"BLOCK_M1": values["BLOCK_M1"], "BLOCK_N1": values["BLOCK_N1"], "BLOCK_M2": values["BLOCK_N1"],
            "BLOCK_N2": values["BLOCK_M1"], "num_warps": values["num_warps"], "num_stages": values["num_stages"]}


def candidate_id(pass_: str, cfg: dict) -> str:
    if pass_ == "forward":
        return f"m{cfg['BLOCK_M']}-n{cfg['BLOCK_N']}-w{cfg['num_warps']}-s{cfg['num_stages']}"
    return (f"m{cfg['BLOCK_M1']}-n{cfg['BLOCK_N1']}-m{cfg['BLOCK_M2']}-n{cfg['BLOCK_N2']}"
            f"-w{cfg['num_warps']}-s{cfg['num_stages']}")


def candidates(vendor: str, pass_: str, current: dict) -> list[Candidate]:
    """The current config first (id "current"), then the table's candidates other than it,
    nearest to the current config first."""
    if vendor not in SPACES:
        raise ValueError(f"no candidate space for vendor {vendor!r}; known: {', '.join(SPACES)}")
    table = SPACES[vendor][pass_]
    keys = list(current)
    out = [Candidate(CURRENT, tuple((k, current[k]) for k in keys))]
    seen = {out[0].config}
    found = []
    for combo in itertools.product(*table.values()):
        cfg = _full(pass_, dict(zip(table, combo)))
        config = tuple((k, cfg[k]) for k in keys)
        if config in seen:
            continue
        seen.add(config)
        found.append(Candidate(candidate_id(pass_, cfg), config))
    found.sort(key=lambda c: (c.distance(current), c.id))
    return out + found
