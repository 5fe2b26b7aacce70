"""Compare a fresh code-object file with the stored one: added, removed, changed variants.

A variant "changed" when its code object hash or any resource number moved. A variant whose
code object is identical but whose bookkeeping moved (config or source hash: e.g. a config
value that changes nothing in the binary) is reported as a note, not a failure: the gate is
on the generated code. Stdlib only (orchestrating side, no triton).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mha_ci.checksums.records import CodeObjectFile, CodeObjectRecord

# (record field, how the table names it)
RESOURCE_FIELDS = (("shared_bytes", "shared"), ("registers", "regs"), ("spills", "spills"),
                   ("num_warps", "num_warps"), ("num_stages", "num_stages"))
BOOKKEEPING_FIELDS = ("config_hash", "source_hash", "inputs_hash", "bucket")


@dataclass
class Difference:
    status: str                          # "added" | "removed" | "changed" | "note"
    key: str
    old: CodeObjectRecord | None         # None exactly when added
    new: CodeObjectRecord | None         # None exactly when removed
    deltas: dict = field(default_factory=dict)   # field -> (old, new)
    why: str = ""                        # filled by explain

    def __post_init__(self) -> None:
        # Readers tell the statuses apart by the records present; the two must agree.
        expected = {"added": (False, True), "removed": (True, False)}.get(self.status, (True, True))
        if (self.old is not None, self.new is not None) != expected:
            raise ValueError(f"{self.status} difference {self.key} needs old/new present: {expected}")

    @property
    def record(self) -> CodeObjectRecord:
        """The fresh record, or the stored one of a removed variant."""
        if self.new is not None:
            return self.new
        assert self.old is not None, "__post_init__: a difference has at least one record"
        return self.old

    @property
    def is_failure(self) -> bool:
        return self.status != "note"

    def describe(self) -> str:
        """'gfx950 small_head forward fwd fp16-d64-plain: shared 16384 -> 106496, sha changed'"""
        r = self.record
        head = f"{r.arch} {r.bucket} {r.pass_ or '?'} {r.kernel or '?'} {r.label}"
        if self.old is None:             # added
            return f"{head}: new ({_resources(r)})"
        if self.new is None:             # removed
            return f"{head}: gone (was {_resources(self.old)})"
        parts = [f"{name} {self.deltas[f][0]} -> {self.deltas[f][1]}"
                 for f, name in (*RESOURCE_FIELDS, ("bucket", "bucket")) if f in self.deltas]
        if "sha256" in self.deltas:
            parts.append("sha changed")
        elif self.status == "note":
            parts.append("same code object; " + ", ".join(f for f in BOOKKEEPING_FIELDS if f in self.deltas)
                         + " moved")
        return f"{head}: {', '.join(parts)}"


def _resources(r: CodeObjectRecord) -> str:
    return f"shared {r.shared_bytes}, regs {r.registers}, spills {r.spills}, sha {r.sha256[:12]}"


def compare(stored: CodeObjectFile, fresh: CodeObjectFile) -> list[Difference]:
    old, new = stored.by_key(), fresh.by_key()
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a is None:
            out.append(Difference("added", key, None, b))
            continue
        if b is None:
            out.append(Difference("removed", key, a, None))
            continue
        deltas = {f: (getattr(a, f), getattr(b, f)) for f in ("sha256", *(x for x, _ in RESOURCE_FIELDS))
                  if getattr(a, f) != getattr(b, f)}
        if deltas:
            out.append(Difference("changed", key, a, b, deltas))
            continue
        notes = {f: (getattr(a, f), getattr(b, f)) for f in BOOKKEEPING_FIELDS if getattr(a, f) != getattr(b, f)}
        if notes:
            out.append(Difference("note", key, a, b, notes))
    return out


def render(differences: list[Difference], *, title: str, total: int) -> str:
    """The table `verify` prints (and writes next to the fresh file)."""
    counts = {s: sum(1 for d in differences if d.status == s) for s in ("changed", "added", "removed", "note")}
    lines = [f"{title}: {counts['changed']} changed, {counts['added']} added, {counts['removed']} removed "
             f"of {total} variants" + (f" ({counts['note']} notes)" if counts["note"] else "")]
    for d in sorted(differences, key=lambda d: (d.status == "note", d.record.arch, d.key)):
        lines.append(f"  {d.status:<8} {d.describe()}")
        if d.why:
            lines.append(f"  {'':<8}   why: {d.why}")
    return "\n".join(lines) + "\n"
