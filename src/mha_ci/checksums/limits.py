"""Resource gate: every code object must fit its arch's limits, and spills must not grow.

A config whose tiles need more shared memory / LDS than the arch has compiles fine and fails
only at launch (`OutOfResources` on the H200, for sm90 d256 at 458752 of 232448 bytes), and the
ahead-of-time compile already knows the figure. So the checksums job compares each record with
the limits of its arch (pipelines/archs.yaml `limits`) and fails on any breach, naming the
variant, the figure and the limit. Shared memory is known before code generation, so with a
limit the compile itself stops there (mha_ci.checksums.compile, shared memory gate): such a
variant has no code object, only its refusal, which is a breach like any other.

Spills are legal but slow (local/private memory traffic per thread); they are reported per arch,
and `verify` fails when a variant spills where the stored record did not, or more than it did,
so a config or compiler change that adds spills is seen and either fixed or recorded on purpose.
"""
from __future__ import annotations

from dataclasses import dataclass

FIGURES = (("shared_bytes", "shared memory", "bytes per block"), ("registers", "registers", "per thread"))
WORST_SHOWN = 5


@dataclass(frozen=True)
class Breach:
    key: str
    arch: str
    figure: str               # "shared memory" | "registers"
    value: int
    limit: int
    unit: str

    def describe(self) -> str:
        return (f"{self.key}: {self.figure} {self.value} {self.unit} exceeds the {self.arch} limit of "
                f"{self.limit} ({self.value / self.limit:.2f}x)")

    def to_json(self) -> dict:
        return {"key": self.key, "arch": self.arch, "figure": self.figure, "value": self.value, "limit": self.limit}


@dataclass(frozen=True)
class SpillGrowth:
    key: str
    before: int | None        # None: the stored file has no such variant
    after: int

    def describe(self) -> str:
        was = "a new variant" if self.before is None else f"was {self.before}"
        return f"{self.key}: spills {self.after} ({was})"

    def to_json(self) -> dict:
        return {"key": self.key, "before": self.before, "after": self.after}


def breaches(records, archs) -> list[Breach]:
    """Records above the limits of their arch; archs without limits are not judged."""
    limits = {a.name: a.limits for a in archs if getattr(a, "limits", None) is not None}
    found = []
    for record in records:
        limit = limits.get(record.arch)
        if limit is None:
            continue
        for attr, figure, unit in FIGURES:
            value, cap = getattr(record, attr), getattr(limit, attr)
            if value > cap:
                found.append(Breach(record.key, record.arch, figure, value, cap, unit))
    return sorted(found, key=lambda b: (b.arch, b.key, b.figure))


def shared_refusal(value: int, limit: int, arch: str) -> str:
    """Why a compile stopped before code generation (checksums and tune say it alike)."""
    return f"shared memory {value} bytes > limit {limit} (arch {arch})"


def refusal_breaches(refused) -> list[Breach]:
    """The refused variants of a fresh file ({key, arch, value, limit}) as breaches."""
    shared, unit = FIGURES[0][1:]
    return [Breach(r["key"], r["arch"], shared, r["value"], r["limit"], unit) for r in refused]


def unlimited_archs(archs) -> list[str]:
    """Compiled archs with no limits: said in the report, since nothing gates their resources."""
    return [a.name for a in archs if a.compile_target is not None and getattr(a, "limits", None) is None]


def spill_growth(stored, fresh) -> list[SpillGrowth]:
    """Variants of `fresh` that spill more than their stored record (or spill and were not stored)."""
    before = {r.key: r.spills for r in stored.records} if stored is not None else {}
    grown = [SpillGrowth(r.key, before.get(r.key), r.spills) for r in fresh.records
             if r.spills > 0 and r.spills > before.get(r.key, 0)]
    return sorted(grown, key=lambda g: g.key)


def spill_summary(records) -> list[str]:
    """Report lines: per arch, how many variants spill and the worst few."""
    by_arch: dict[str, list] = {}
    for record in records:
        if record.spills > 0:
            by_arch.setdefault(record.arch, []).append(record)
    if not by_arch:
        return ["  spills: none"]
    lines = []
    for arch in sorted(by_arch):
        spilling = sorted(by_arch[arch], key=lambda r: (-r.spills, r.key))
        worst = ", ".join(f"{r.key.split('/', 1)[1]} {r.spills}" for r in spilling[:WORST_SHOWN])
        more = f" and {len(spilling) - WORST_SHOWN} more" if len(spilling) > WORST_SHOWN else ""
        lines.append(f"  spills on {arch}: {len(spilling)} variants (worst: {worst}{more})")
    return lines
