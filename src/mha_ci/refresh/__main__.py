"""python -m mha_ci.refresh: refresh the baselines of one arch from measurement files.

The measuring itself needs the GPU and the toolchain; `mha-ci perf refresh` measures and calls
mha_ci.refresh.refresh() directly. This entry takes documents measured already (by `mha-ci perf
measure`, or copied from a GPU machine), which is also how the refresh is tried by hand:

  python -m mha_ci.refresh --arch gfx950 --measurement triton-3.4=m34.json \
      --measurement triton-3.8=m38.json --out out/refresh

Exit codes: 0 committed or unchanged; 1 the measurement is not fit to be a baseline; 2 usage or
configuration; 3 provenance mismatch or git problem (see mha_ci.refresh.core).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

from mha_ci.errors import ConfigError, ExitCode, MhaCiError


def _pairs(values: list[str], what: str) -> dict[str, Path]:
    found = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"{what} takes NAME=FILE, not {value!r}", key=what)
        found[name] = Path(path)
    return found


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON: {exc.msg}", file=str(path), line=exc.lineno) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_ci.refresh", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=None, help="checkout root (default: found from the current folder)")
    parser.add_argument("--arch", required=True)
    parser.add_argument("--measurement", action="append", default=[], metavar="TOOLCHAIN=FILE", required=True,
                        help="mha-ci.perf/1 document measured on this arch with that toolchain (repeat per toolchain)")
    parser.add_argument("--checksums", action="append", default=[], metavar="TOOLCHAIN=FILE",
                        help="mha-ci.codeobj/1 document to store as perf_baselines/code_objects/TOOLCHAIN.json")
    parser.add_argument("--durations", action="append", default=[], metavar="NAME=FILE",
                        help="test-durations document to store as perf_baselines/test_durations/NAME")
    parser.add_argument("--out", type=Path, required=True, help="where refresh.json, pr-body.md, pr-title.txt go")
    parser.add_argument("--date", type=_dt.date.fromisoformat, default=None, help="YYYY-MM-DD (default: today, UTC)")
    parser.add_argument("--always", action="store_true", help="make the branch even when nothing moved")
    args = parser.parse_args(argv)
    try:
        from mha_ci.cli import find_root
        from mha_ci.model.loader import load_pipeline
        from mha_ci.refresh.core import refresh

        root = args.root.resolve() if args.root else find_root()
        measurements = {name: _read(path) for name, path in _pairs(args.measurement, "--measurement").items()}
        checksums = {name: _read(path) for name, path in _pairs(args.checksums, "--checksums").items()}
        durations = {name: _read(path) for name, path in _pairs(args.durations, "--durations").items()}
        result = refresh(
            load_pipeline(root), args.arch, lambda arch, toolchain: measurements[toolchain.name],
            out_dir=args.out, toolchains=list(measurements),
            checksums_fn=(lambda toolchain: checksums.get(toolchain.name)) if checksums else None,
            durations_fn=(lambda arch: durations) if durations else None,
            today=args.date, always=args.always)
    except MhaCiError as exc:
        print(f"mha-ci refresh: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("mha-ci refresh: interrupted; nothing was kept", file=sys.stderr)
        return 130
    if result.branch:
        print(f"committed {result.commit} on {result.branch}: {', '.join(result.files)}")
    else:
        print("baselines unchanged beyond noise: no branch made")
    print(f"pull-request body: {args.out / 'pr-body.md'}")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
