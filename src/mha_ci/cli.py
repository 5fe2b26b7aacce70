"""`mha-ci` command line: one module per subcommand under mha_ci/commands/.

Every command except `validate` itself validates pipelines/ first (through load_pipeline), and
every failure leaves through an MhaCiError so the exit code follows the contract in errors.py.
Anything else is a bug in mha-ci, not a verdict on the code under test: it leaves with exit 4,
one line naming the exception, and the traceback in a file (mha_ci.crash).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

from mha_ci import __version__
from mha_ci.commands import bisect, cache, checksums, containers, export, perf, plan, run, tune, validate
from mha_ci.crash import on_signals, report_crash
from mha_ci.errors import ConfigError, ExitCode, MhaCiError, interruption
from mha_ci.files import refuse_special_outputs, storage_failure

COMMANDS = (validate, plan, run, perf, checksums, tune, export, containers, cache)
# Subcommands with a module of their own, registered under their command's table here: commands
# never import each other.
NESTED = {perf: (bisect,)}
OUT_IS_A_FILE = ("merge", "combine")      # `perf merge/combine --out FILE`; every other --out is a folder


def find_root(start: Path | None = None) -> Path:
    """The checkout root: the nearest folder above `start` holding pipelines/."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "pipelines").is_dir() and (folder / "containers").is_dir():
            return folder
    raise MhaCiError(f"no pipelines/ folder found in {here} or above; run mha-ci inside the checkout or pass --root")


def check_out(out: Path, *, is_file: bool = False) -> None:
    """Refuse an --out that cannot take the output before any work is done (exit 2), rather than
    failing on the first write after minutes of measuring."""
    folder = out.parent if is_file else out
    if is_file and out.is_dir():
        raise ConfigError(f"--out {out} is a folder; this command writes one file there", key="--out")
    if is_file:
        refuse_special_outputs(out.parent, (out.name,))
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out {folder} is a file, not a folder", key="--out")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as exc:
        raise ConfigError(f"--out {folder}: cannot write there: {exc.strerror or exc}", key="--out") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # usage errors are exit 2, as argparse does, with our prefix
        self.print_usage(sys.stderr)
        print(f"mha-ci: error: {message}", file=sys.stderr)
        raise SystemExit(ExitCode.CONFIG_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mha-ci", description="Plan and run the jobs that guard the mha kernels.")
    parser.add_argument("--root", type=Path, default=None, help="checkout root (default: found from the current folder)")
    parser.add_argument("--version", action="version", version=f"mha-ci {__version__}",
                        help="print mha-ci's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        table = command.register(sub)
        for nested in NESTED.get(command, ()):
            nested.register(table)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    with on_signals(process_exits=argv is None):     # argv None: the process's own command line
        try:
            args.root = (args.root.resolve() if args.root else find_root())
            if getattr(args, "out", None) is not None:
                check_out(args.out, is_file=getattr(args, "perf_command", None) in OUT_IS_A_FILE)
            return int(args.handler(args))
        except MhaCiError as exc:
            print(f"mha-ci: {exc}", file=sys.stderr)
            return int(exc.exit_code)
        except KeyboardInterrupt as exc:
            name, code = interruption(exc)
            print(f"mha-ci: interrupted ({name}): no verdict", file=sys.stderr)
            return code
        except Exception as exc:
            if storage_failure(exc):
                where = f" {exc.filename}" if exc.filename else ""
                print(f"mha-ci: environment error: cannot write{where}: {exc.strerror or exc}; what --out holds "
                      "is incomplete: no verdict", file=sys.stderr)
                return int(ExitCode.ENVIRONMENT_ERROR)
            print(f"mha-ci: {report_crash(exc, getattr(args, 'out', None))}", file=sys.stderr)
            return int(ExitCode.INTERNAL_ERROR)
