"""Which differences between two measurements make them incomparable: one rule for every place
that puts two perf documents side by side (`perf compare`, the perf job, `perf measure
--interleave/--against`, `perf calibrate`, the nightly refresh).

Refused (the two numbers time different things):
  arch, GPU model, kernel under test, and, unless two toolchains are compared on purpose
  (--cross-toolchain), the toolchain name and the Triton release. Triton compiles the kernels,
  so its release decides the code that runs.
Noted (shown with the verdict, never silently dropped, never a refusal):
  torch release, GPU driver, CUDA/HIP runtime, and a side whose pins were not checked
  (`pins_checked` false: measured by `--pins record` on a host that could not install the lock).
  torch allocates the inputs and launches the Triton kernels but compiles none of them; the
  driver and runtime move launch latency by a few microseconds, which the gate's noise band
  and the per-shape between-run noise of a combined baseline absorb.
Only the public release is compared (2.8.0+cu128 and 2.8.0 are one torch).
"""
from __future__ import annotations

REFUSED_FIELDS = (("arch", "arch"), ("gpu", "GPU"), ("kernel", "kernel under test"))
NOTED_FIELDS = (("driver", "driver"), ("cuda", "CUDA runtime"), ("hip", "HIP runtime"))


def release(version: object) -> object:
    return version.split("+", 1)[0] if isinstance(version, str) else version


def refusal(base: dict, cand: dict, cross_toolchain: bool = False) -> str | None:
    """Why two provenances must not be compared shape by shape, or None."""
    for name, what in REFUSED_FIELDS:
        if base.get(name) != cand.get(name):
            return f"different {what}: baseline {base.get(name)!r}, candidate {cand.get(name)!r}"
    if cross_toolchain:
        return None
    hint = "(pass --cross-toolchain to compare toolchains on purpose)"
    if base.get("toolchain") != cand.get("toolchain"):
        return f"different toolchain: baseline {base.get('toolchain')!r}, candidate {cand.get('toolchain')!r} {hint}"
    bt, ct = (base.get("versions") or {}).get("triton"), (cand.get("versions") or {}).get("triton")
    if release(bt) != release(ct):
        return f"different triton: baseline {bt!r}, candidate {ct!r} {hint}"
    return None


def notes(base: dict, cand: dict) -> list[str]:
    """The differences that do not refuse the comparison but must be read with its verdict."""
    found = []
    bv, cv = base.get("versions") or {}, cand.get("versions") or {}
    if release(bv.get("torch")) != release(cv.get("torch")):
        found.append(f"torch differs: baseline {bv.get('torch')!r}, candidate {cv.get('torch')!r}")
    for name, what in NOTED_FIELDS:
        if base.get(name) != cand.get(name):
            found.append(f"{what} differs: baseline {base.get(name)!r}, candidate {cand.get(name)!r}")
    for side, p in (("baseline", base), ("candidate", cand)):
        if not p.get("pins_checked"):
            found.append(f"UNPINNED {side}: {unpinned_summary(p.get('pin_mismatches') or [])}")
    return found


def unpinned_summary(mismatches: list[str], shown: int = 3) -> str:
    """The pins that matter most first (torch, triton, numpy), then how many more differ."""
    if not mismatches:
        return "pins not checked"
    key = ("pins torch==", "pins triton==", "pins numpy==")
    ordered = sorted(mismatches, key=lambda m: next((i for i, k in enumerate(key) if k in m), len(key)))
    more = len(ordered) - shown
    return "; ".join(ordered[:shown]) + (f"; and {more} more pin(s) differ" if more > 0 else "")
