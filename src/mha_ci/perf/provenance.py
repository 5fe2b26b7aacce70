"""Where a measurement came from: GPU, driver, clocks, toolchain, commit, date.

Standard library only (torch is passed in by the payload), so it runs in toolchain envs.
Every field that cannot be found is recorded as None rather than guessed.
"""
from __future__ import annotations

import datetime
import hashlib
import os
import platform
import shutil
import subprocess
from pathlib import Path

from mha_ci.git import bytes_or_none, commit_or_none

# One nvidia-smi call gives every field; ROCm machines have no nvidia-smi and get None.
_SMI_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem",
               "temperature.gpu", "power.draw", "pstate")


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def smi_index() -> str:
    """The nvidia-smi index of the device torch calls cuda:0 (first of CUDA_VISIBLE_DEVICES)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible if visible else "0"


def smi_sample() -> dict | None:
    """Clocks, temperature and power now, from nvidia-smi; None where there is none."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits",
                              "-i", smi_index()], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    return {name: _number(value) for name, value in zip(_SMI_FIELDS, values)}


def _number(value: str):
    try:
        return float(value) if "." in value else int(value)
    except ValueError:
        return None if value in ("", "[N/A]", "N/A") else value


def git_dirty(root: Path) -> str | None:
    """sha256 of the tree's uncommitted change: `git diff HEAD` (binary, so any byte counts) and
    each untracked, not ignored file's path and contents. Two runs of one commit with different
    edits on top then carry different hashes. None when the tree is clean or `root` is not the
    top of a git work tree."""
    # A folder without its own .git (a base checkout written under the repo) would otherwise
    # report the enclosing repo's change as its own.
    top = bytes_or_none(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top.decode().strip()).resolve() != Path(root).resolve():
        return None
    diff = bytes_or_none(root, "diff", "HEAD", "--binary", "--no-ext-diff", "--no-color")
    listed = bytes_or_none(root, "ls-files", "--others", "--exclude-standard", "-z")
    if diff is None or listed is None:
        return None
    untracked = sorted(name for name in listed.split(b"\0") if name)
    if not diff and not untracked:
        return None
    digest = hashlib.sha256(diff)
    for name in untracked:
        path = Path(root) / name.decode(errors="surrogateescape")
        digest.update(b"\0untracked\0" + name + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:                      # a socket, a dangling link: its name still counts
            digest.update(b"\0unreadable")
    return digest.hexdigest()


def device_facts(torch, device: str) -> dict:
    """GPU name, arch name as the configs use it (sm90, gfx942, ...), CUDA/HIP versions."""
    if device == "cpu":
        return {"gpu": None, "arch": "cpu", "device": "cpu", "cpu": platform.processor() or platform.machine(),
                "cuda": None, "hip": None}
    props = torch.cuda.get_device_properties(0)
    # CUDA builds of torch also carry gcnArchName, holding the GPU's name: read it on ROCm only.
    if getattr(torch.version, "hip", None):
        arch = (getattr(props, "gcnArchName", "") or "").split(":")[0] or None
    else:
        major, minor = torch.cuda.get_device_capability(0)
        arch = f"sm{major}{minor}"
    return {"gpu": props.name, "arch": arch, "device": "cuda", "sm_count": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "cuda": getattr(torch.version, "cuda", None), "hip": getattr(torch.version, "hip", None)}


def collect(torch, device: str, *, toolchain: str, pins: dict, arch: str | None, executor: str | None,
            image_digest: str | None, commit: str | None, root: Path, kernel: str, planted_pct: float,
            smi_start: dict | None, smi_end: dict | None) -> dict:
    """`arch` is the pipeline's arch name (archs.yaml), the one baselines are filed under; the
    GPU's own name is `gpu` and the arch it reports is `device_arch`. `pins` is
    pincheck.report(): `pins_checked` is true only when every pin matched."""
    facts = device_facts(torch, device)
    device_arch = facts.pop("arch")
    start, end = smi_start or {}, smi_end or {}
    head = commit_or_none(root)
    return {
        **facts,
        "arch": arch or device_arch,
        "device_arch": device_arch,
        "driver": start.get("driver_version"),
        "sm_clock_mhz": {"start": start.get("clocks.sm"), "end": end.get("clocks.sm"),
                         "max": start.get("clocks.max.sm")},
        "mem_clock_mhz": {"start": start.get("clocks.mem"), "end": end.get("clocks.mem")},
        "temperature_c": {"start": start.get("temperature.gpu"), "end": end.get("temperature.gpu")},
        "power_w": {"start": start.get("power.draw"), "end": end.get("power.draw")},
        "toolchain": toolchain,
        "versions": pins["versions"],
        "pins_checked": bool(pins["pins_checked"]),
        "pin_mode": pins.get("pin_mode"),
        "pin_mismatches": list(pins.get("pin_mismatches") or []),
        "executor": executor,
        "image_digest": image_digest,
        "commit": commit or head,
        # The uncommitted change the measured code carries on top of `commit` (None: clean, or a
        # commit handed in that is not the tree's HEAD, whose change this tree cannot tell).
        "dirty": git_dirty(root) if head and (commit or head) == head else None,
        "date": utc_now(),
        "hostname": platform.node(),
        "kernel": kernel,
        "planted_slowdown_pct": planted_pct,
    }
