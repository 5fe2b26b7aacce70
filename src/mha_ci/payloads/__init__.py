"""Job payloads: the code that runs inside a toolchain environment (venv, container or host).

Contract every executor honours and every payload relies on:
- started as `python -m mha_ci.payloads.<name> ARGS` with the checkout root as working
  directory and `<root>/src` on PYTHONPATH;
- `$MHA_CI_OUT` is the run's output folder as the payload sees it (writable); file arguments
  are paths relative to it, so they mean the same inside a container as on the host;
- `$MHA_CI_PINS` is `{"toolchain": NAME, "mode": "enforce"|"record", "pins": {name: version}}`;
  the payload calls `pincheck.enforce()` before any work;
- exit status: 0 ok, 1 a gate failed (tests failed), 2 bad arguments (checksums), 3 environment
  problem (pin mismatch, missing device), 4 the payload itself could not produce a result
  (harness error). Executors turn 3 into EnvironmentProblem.

Payloads import only the standard library, torch/triton/numpy/pytest, `mha` and the mha_ci
modules that themselves import only the standard library (never pydantic or yaml, which
toolchain environments do not have).
"""
import os
import sys
import traceback
from pathlib import Path
from typing import Callable

from mha_ci.errors import ExitCode

# The exit codes are mha-ci's own (mha_ci.errors.ExitCode, stdlib-only), as plain ints for sys.exit.
EXIT_OK = int(ExitCode.OK)
EXIT_GATE_FAILED = int(ExitCode.GATE_FAILED)
EXIT_USAGE = int(ExitCode.CONFIG_ERROR)     # the orchestrating side turns it into a ConfigError
EXIT_ENVIRONMENT = int(ExitCode.ENVIRONMENT_ERROR)
EXIT_NO_RESULT = int(ExitCode.INTERNAL_ERROR)


def run_guarded(label: str, action: Callable[[], int]) -> int:
    """A payload's body with its faults mapped to exit codes: torch or triton missing from the
    toolchain is an environment problem (3); any other exception is "no result" (4), never a pass."""
    try:
        return action()
    except Exception as exc:  # noqa: BLE001 - a harness fault is "no result", not a pass
        if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] in ("triton", "torch"):
            print(f"{label}: the toolchain lacks what it needs: {exc}", file=sys.stderr, flush=True)
            return EXIT_ENVIRONMENT
        traceback.print_exc()
        print(f"{label}: no result: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return EXIT_NO_RESULT


def out_path(relative: str) -> Path:
    """A file argument resolved against $MHA_CI_OUT (absolute paths are taken as they are)."""
    path = Path(relative)
    if path.is_absolute():
        return path
    return Path(os.environ.get("MHA_CI_OUT", ".")) / path
