"""pytest plugin (loaded with `-p mha_ci.payloads.gpu_per_worker`): one GPU per xdist worker.

$MHA_CI_VISIBLE_DEVICES_ENV names the variable the arch's runtime reads (CUDA_VISIBLE_DEVICES,
HIP_VISIBLE_DEVICES). Worker gwN gets device N, or the N-th entry (modulo) of that variable when
the runner was already given a subset of the host's GPUs. It must be set before the GPU runtime
initialises, so it happens when the plugin module is imported: `-p` plugins load before any
conftest or test module, and xdist sets PYTEST_XDIST_WORKER before a worker's config exists.
Without xdist, or for the interpreter (no variable), it does nothing.
"""
from __future__ import annotations

import os


def assign_device() -> str | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    variable = os.environ.get("MHA_CI_VISIBLE_DEVICES_ENV", "")
    if not worker.startswith("gw") or not variable:
        return None
    index = int(worker[2:])
    given = [d.strip() for d in os.environ.get(variable, "").split(",") if d.strip()]
    chosen = given[index % len(given)] if given else str(index)
    os.environ[variable] = chosen
    return chosen


_ASSIGNED = assign_device()


def pytest_report_header(config):
    if _ASSIGNED is not None:
        return f"mha-ci: worker {os.environ['PYTEST_XDIST_WORKER']} uses " \
               f"{os.environ['MHA_CI_VISIBLE_DEVICES_ENV']}={_ASSIGNED}"
    return None
