"""Exit codes of the command-line contract and the exceptions that map onto them.

0 all gates pass; 1 a gate failed; 2 usage or configuration error; 3 environment error;
4 internal error (a bug in mha-ci: never a gate verdict; the traceback goes to a file);
130 / 143 interrupted by SIGINT (Ctrl-C) / SIGTERM (how CI cancels a job): no verdict.
Code raises one of these; only the CLI turns them into an exit status and a message.
"""
from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    GATE_FAILED = 1
    CONFIG_ERROR = 2
    ENVIRONMENT_ERROR = 3
    INTERNAL_ERROR = 4
    INTERRUPTED = 130       # 128 + SIGINT
    TERMINATED = 143        # 128 + SIGTERM


class MhaCiError(Exception):
    exit_code: ExitCode = ExitCode.CONFIG_ERROR


class ConfigError(MhaCiError):
    """Bad pipeline YAML or bad command-line usage: names file, line, key and the closest valid key."""

    exit_code = ExitCode.CONFIG_ERROR

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None, suggestion: str | None = None) -> None:
        self.file, self.line, self.key, self.suggestion = file, line, key, suggestion
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        hint = f" (did you mean '{suggestion}'?)" if suggestion else ""
        super().__init__(f"{where}{message}{hint}")


class EnvironmentProblem(MhaCiError):
    """The machine cannot run the job as pinned: version mismatch, docker unreachable, no device."""

    exit_code = ExitCode.ENVIRONMENT_ERROR


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, so it unwinds the same way as Ctrl-C does:
    payload process groups are killed and the reports say "interrupted"."""

    exit_code = ExitCode.TERMINATED
    signal_name = "SIGTERM"


def interruption(exc: KeyboardInterrupt) -> tuple[str, int]:
    """(signal name, exit status) of an interruption."""
    if isinstance(exc, Terminated):
        return exc.signal_name, int(exc.exit_code)
    return "SIGINT", int(ExitCode.INTERRUPTED)
