"""mha-ci validate [FILES]: check pipeline YAML against its schema and against the other files.

Prints "ok: N files" (exit 0) or the first problem with file:line, key and the closest valid
key (exit 2, through the ConfigError the loader raises).
"""
from __future__ import annotations

from pathlib import Path

from mha_ci.model.loader import validate_all


def register(sub) -> None:
    p = sub.add_parser("validate", help="check pipelines/*.yaml (default: all of them)")
    p.add_argument("files", nargs="*", type=Path, metavar="FILE",
                   help="pipeline files to check; the files they refer to are read from the same folder")
    p.set_defaults(handler=_handler)


def _handler(args) -> int:
    checked = validate_all(args.root, args.files or None)
    print(f"ok: {len(checked)} files")
    return 0
