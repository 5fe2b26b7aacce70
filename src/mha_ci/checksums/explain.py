"""Say which change explains each difference, when the records can tell.

Every record carries the effective config of its bucket (and its hash), a hash of the kernel's
source (jit callees included, comments dropped), and the file carries the toolchain versions.
Checked in this order, all that apply are named:
1. toolchain: the Triton version differs between the two files;
2. config: the bucket's config section changed (the changed keys are listed);
3. kernel source: the source hash of the kernel changed;
4. launch: num_warps / num_stages, or else the other compile inputs (constexprs, signature,
   argument specializations), changed with the same config section (a guard in the bucket
   rule, or the launch code);
5. bucket move: a removed and an added variant that differ only in the bucket (the bucket rule
   now sends the problem elsewhere) are paired.
What matches none is said to be unexplained: same source, config and toolchain yet a different
code object, i.e. a nondeterministic compile or an input the records do not track (launch code
computing other constexprs, argument specializations).
"""
from __future__ import annotations

from mha_ci.checksums.diff import Difference
from mha_ci.checksums.records import CodeObjectFile


def _config_change(old: dict, new: dict) -> str:
    keys = sorted(set(old) | set(new))
    parts = [f"{k} {old.get(k, '-')} -> {new.get(k, '-')}" for k in keys if old.get(k) != new.get(k)]
    return ", ".join(parts) if parts else "section hash changed"


def _unbucketed(key: str) -> str:
    arch, pass_, _bucket, rest = key.split("/", 3)
    return f"{arch}/{pass_}/{rest}"


def explain(differences: list[Difference], stored: CodeObjectFile, fresh: CodeObjectFile) -> list[Difference]:
    old_triton, new_triton = stored.toolchain.get("triton"), fresh.toolchain.get("triton")
    toolchain_moved = old_triton != new_triton
    removed = {_unbucketed(d.key): d for d in differences if d.status == "removed" and d.key.count("/") >= 3}
    for d in differences:
        reasons = []
        if toolchain_moved:
            reasons.append(f"toolchain: triton {old_triton} -> {new_triton}")
        a, b = d.old, d.new
        if a is not None and b is not None:         # changed or note
            if a.config_hash != b.config_hash:
                reasons.append(f"config {b.arch} {b.pass_}.{b.bucket} changed: {_config_change(a.config, b.config)}")
            if a.source_hash != b.source_hash:
                reasons.append(f"kernel source of {b.kernel} changed")
            if a.config_hash == b.config_hash and (a.num_warps, a.num_stages) != (b.num_warps, b.num_stages):
                reasons.append("launch: num_warps/num_stages changed with the same config section "
                               "(a guard of the bucket rule or the launch code)")
            elif a.config_hash == b.config_hash and a.inputs_hash and a.inputs_hash != b.inputs_hash:
                reasons.append("launch: the compile inputs changed with the same config section "
                               "(constexprs, signature or argument specializations from the launch code)")
            if not reasons and d.status == "changed":
                reasons.append("unexplained: same kernel source, config and toolchain (nondeterministic compile, "
                               "or launch code that computes other constexprs / specializations)")
        elif b is not None:                         # added
            twin = removed.get(_unbucketed(d.key)) if d.key.count("/") >= 3 else None
            if twin is not None:
                reasons.append(f"bucket move: {twin.record.bucket} -> {b.bucket} (the bucket rule changed)")
                twin.why = f"bucket move: now {d.key}"
            elif not any(r.arch == b.arch and r.kernel == b.kernel for r in stored.records):
                reasons.append(f"new kernel {b.kernel} on {b.arch}")
            else:
                reasons.append("new variant (new problem in the matrix, or new constexpr combination)")
        elif a is not None and not d.why:            # removed
            if not any(r.arch == a.arch and r.kernel == a.kernel for r in fresh.records):
                reasons.append(f"kernel {a.kernel} no longer exists on {a.arch}")
            else:
                reasons.append("variant no longer produced (matrix or launch code changed)")
        if reasons:
            d.why = "; ".join(reasons) if not d.why else d.why
    return differences
