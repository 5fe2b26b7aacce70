"""Exit codes of the command-line contract and the exceptions that map onto them.

0 all gates pass; 1 a gate failed; 2 usage or configuration error; 3 environment error.
Code raises one of these; only the CLI turns them into an exit status and a message.
"""
from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    GATE_FAILED = 1
    CONFIG_ERROR = 2
    ENVIRONMENT_ERROR = 3


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
