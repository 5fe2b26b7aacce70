"""`mha-ci` command line: one module per subcommand under mha_ci/commands/.

Every command except `validate` itself validates pipelines/ first (through load_pipeline), and
every failure leaves through an MhaCiError so the exit code follows the contract in errors.py.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from mha_ci.errors import ExitCode, MhaCiError

COMMANDS = ("validate", "plan", "run", "perf", "checksums", "export")


def find_root(start: Path | None = None) -> Path:
    """The checkout root: the nearest folder above `start` holding pipelines/."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "pipelines").is_dir() and (folder / "containers").is_dir():
            return folder
    raise MhaCiError(f"no pipelines/ folder found in {here} or above; run mha-ci inside the checkout or pass --root")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors are exit 2, as argparse does, with our prefix
        self.print_usage(sys.stderr)
        print(f"mha-ci: error: {message}", file=sys.stderr)
        raise SystemExit(ExitCode.CONFIG_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mha-ci", description="Plan and run the jobs that guard the mha kernels.")
    parser.add_argument("--root", type=Path, default=None, help="checkout root (default: found from the current folder)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"mha_ci.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.root = (args.root.resolve() if args.root else find_root())
        return int(args.handler(args))
    except MhaCiError as exc:
        print(f"mha-ci: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("mha-ci: interrupted", file=sys.stderr)
        return 130
