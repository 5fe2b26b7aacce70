"""Which GPU architecture the kernels run on; names match the config files."""
from __future__ import annotations

import os

KNOWN_ARCHS = ("gfx942", "gfx950", "sm90", "interpreter")


def interpreter_active() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def current_arch(device=None) -> str:
    """Arch name for `device` (a torch.device or None for the current CUDA device).

    "interpreter" when TRITON_INTERPRET=1 or the device is the CPU; "sm90" for compute
    capability 9.x; the gcnArchName stem ("gfx942", "gfx950") on ROCm. Any other GPU gets its own
    name (e.g. "sm80"), which config loading then rejects with the list of known archs.
    """
    import torch

    if interpreter_active() or (device is not None and torch.device(device).type == "cpu"):
        return "interpreter"
    if not torch.cuda.is_available():
        return "interpreter"
    index = torch.device(device).index if device is not None else None
    props = torch.cuda.get_device_properties(index if index is not None else torch.cuda.current_device())
    return arch_from_properties(props, is_hip=bool(getattr(torch.version, "hip", None)))


def arch_from_properties(props, is_hip: bool) -> str:
    """Arch name from torch device properties. On CUDA builds props.gcnArchName exists too (it
    holds the marketing name, e.g. "NVIDIA H200"), so it is read only on ROCm builds."""
    if is_hip:
        # gcnArchName carries feature suffixes, e.g. "gfx942:sramecc+:xnack-".
        return props.gcnArchName.split(":")[0]
    return "sm90" if props.major == 9 else f"sm{props.major}{props.minor}"
