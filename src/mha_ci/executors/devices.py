"""Which kinds of device this machine has, in the words of archs.yaml `device`.

"none" is always there (the interpreter and compile-only jobs). AMD GPUs show up as /dev/kfd
(the ROCm kernel driver, which containers are given too); NVIDIA GPUs as /dev/nvidia0, or
through `nvidia-smi -L` where device nodes are not visible. An assumed list (the command line
passes $MHA_CI_ASSUME_DEVICES: a comma list, e.g. "amd-gpu,nvidia-gpu", or "none") replaces
detection: for tests, and for a machine whose GPUs the checks cannot see.

Detection says "an AMD GPU", not "a gfx950": a gfx942 runner would be offered a gfx950 job.
CI runners are chosen by their labels (archs.yaml runner_labels), so this matters only locally.
"""
from __future__ import annotations

import difflib
import shutil
import subprocess
from pathlib import Path

from mha_ci.errors import ConfigError

ASSUME_ENV = "MHA_CI_ASSUME_DEVICES"


# archs.yaml's `device` words (mha_ci.model.schema); anything else in the assumed list would be
# a device no job needs, silently ignored.
KINDS = ("amd-gpu", "nvidia-gpu", "none")


def available_devices(assumed: str | None = None) -> frozenset[str]:
    if assumed is not None:
        given = {d.strip() for d in assumed.split(",") if d.strip()}
        unknown = sorted(given - set(KINDS))
        if unknown:
            near = difflib.get_close_matches(unknown[0], KINDS, n=1)
            raise ConfigError(f"${ASSUME_ENV}: unknown device kind(s) {', '.join(map(repr, unknown))}; the kinds are "
                              f"{', '.join(KINDS)} (a comma list)", key=ASSUME_ENV,
                              suggestion=near[0] if near else None)
        return frozenset({"none"} | given)
    found = {"none"}
    if Path("/dev/kfd").exists():
        found.add("amd-gpu")
    if Path("/dev/nvidia0").exists() or _nvidia_smi_lists_gpu():
        found.add("nvidia-gpu")
    return frozenset(found)


def _nvidia_smi_lists_gpu() -> bool:
    tool = shutil.which("nvidia-smi")
    if not tool:
        return False
    try:
        out = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout
