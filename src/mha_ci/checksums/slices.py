"""Which slice of the kernel variants a checksums shard owns (standard library only: the payload
filters its compiles by it, the orchestrating side its comparison with the stored records).

A variant belongs to slice k of n when the sha256 of its key, read as a number, is k-1 modulo n.
The rule looks at the key alone, never at what else a run enumerates, so the n slices split every
set of keys exactly: each key in one slice, whatever was added or removed. A stored record whose
variant is gone is therefore compared by the shard that owns its key ("removed"), and the shards
together compare exactly what one unsharded job would; the merge gate requires every shard's
passing result, so a missing slice is a missing verdict, never a pass.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

SLICE = re.compile(r"([1-9][0-9]*)/([1-9][0-9]*)")


@dataclass(frozen=True)
class Slice:
    index: int          # 1-based
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.index <= self.count:
            raise ValueError(f"slice {self.index}/{self.count}: the index must be between 1 and the count")

    def holds(self, key: str) -> bool:
        digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
        return digest % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse(text: str) -> Slice:
    """`K/N` -> Slice(K, N); ValueError naming the text otherwise."""
    match = SLICE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"slice {text!r}: expected K/N, e.g. 2/4")
    return Slice(int(match.group(1)), int(match.group(2)))
