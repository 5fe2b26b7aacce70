"""mha-ci cache info | prune: what the machine's cache holds, and trimming it.

`info` prints the cache root, the state folder and each toolchain environment, compile cache
and image context with its size and last use. `prune` removes entries unused for more than
--older-than days and then, with --max-size, the oldest until the rest fit; an entry a running
build or payload holds is kept (mha_ci.cache_entries). Both exit 0; prune exits 3 when an
entry could not be removed.
"""
from __future__ import annotations

import time
from collections import defaultdict

from mha_ci import cache_entries
from mha_ci.cache import cache_root, state_root
from mha_ci.cache_entries import Entry
from mha_ci.errors import ConfigError, ExitCode

DEFAULT_OLDER_THAN_DAYS = 30.0


def register(sub) -> None:
    p = sub.add_parser("cache", help="show or trim the machine's cache of toolchain environments, compile "
                                     "results and image contexts ($MHA_CI_CACHE, else ~/.cache/mha-ci)")
    table = p.add_subparsers(dest="cache_command", required=True, metavar="{info,prune}")
    info = table.add_parser("info", help="list the cache root, the state folder and each entry with its size "
                                         "and last use")
    info.set_defaults(handler=_info)
    prune = table.add_parser("prune", help="remove entries not used for a while, or the oldest down to a size; "
                                           "never one a running build or payload holds")
    prune.add_argument("--older-than", type=float, default=None, metavar="DAYS",
                       help=f"remove entries unused for more than DAYS days (default {DEFAULT_OLDER_THAN_DAYS:g} "
                            "unless --max-size is given)")
    prune.add_argument("--max-size", type=float, default=None, metavar="GB",
                       help="then remove the least recently used entries until the cache holds at most GB "
                            "gigabytes (10^9 bytes)")
    prune.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    prune.set_defaults(handler=_prune)


def _info(args) -> int:
    cache = cache_root(args.root)
    print(f"cache: {cache}" + ("" if cache.is_dir() else " (not created yet)"))
    try:
        print(f"state: {state_root(cache)}")
    except ConfigError as exc:
        print(f"state: {exc}")
    found = cache_entries.entries(cache)
    now = time.time()
    venvs = [e for e in found if e.kind == "venv"]
    contexts = [e for e in found if e.kind == "context"]
    compiled: dict[str, list[Entry]] = defaultdict(list)
    for entry in found:
        if entry.kind == "compile":
            compiled[entry.name.split("/")[1]].append(entry)
    rows = [(e.name, _size(e.size), _age(e.last_use, now)) for e in venvs]
    rows += [(f"checksums/{toolchain} ({len(group)} compile results)", _size(sum(e.size for e in group)),
              _age(max(e.last_use for e in group), now)) for toolchain, group in sorted(compiled.items())]
    rows += [(e.name, _size(e.size), _age(e.last_use, now)) for e in contexts]
    if rows:
        width = max(len(r[0]) for r in rows)
        print(f"  {'entry':<{width}}  {'size':>9}  last use")
        for name, size, age in rows:
            print(f"  {name:<{width}}  {size:>9}  {age}")
    print(f"total: {_size(sum(e.size for e in found))} in {len(found)} entries")
    return 0


def _prune(args) -> int:
    if args.older_than is not None and args.older_than < 0:
        raise ConfigError("--older-than must be 0 or more days", key="--older-than")
    if args.max_size is not None and args.max_size < 0:
        raise ConfigError("--max-size must be 0 or more gigabytes", key="--max-size")
    older_than = args.older_than
    if older_than is None and args.max_size is None:
        older_than = DEFAULT_OLDER_THAN_DAYS
    cache = cache_root(args.root)
    found = cache_entries.entries(cache)
    max_bytes = None if args.max_size is None else int(args.max_size * 1e9)
    picked = cache_entries.chosen(found, older_than_days=older_than, max_bytes=max_bytes)
    rule = " and ".join(part for part in (
        f"unused for more than {older_than:g} days" if older_than is not None else "",
        f"beyond {args.max_size:g} GB" if max_bytes is not None else "") if part)
    if args.dry_run:
        for entry in picked:
            print(f"would remove {entry.name} ({_size(entry.size)}, {_age(entry.last_use, time.time())})")
        print(f"{cache}: would remove {len(picked)} entries ({_size(sum(e.size for e in picked))}) {rule}")
        return 0
    pruned = cache_entries.prune(cache, picked)
    now = time.time()
    for entry in pruned.removed:
        print(f"removed {entry.name} ({_size(entry.size)}, {_age(entry.last_use, now)})")
    for entry in pruned.in_use:
        print(f"kept {entry.name}: in use by a running build or payload")
    for entry, reason in pruned.failed:
        print(f"could not remove {entry.name}: {reason}")
    left = sum(e.size for e in found) - sum(e.size for e in pruned.removed)
    print(f"{cache}: removed {len(pruned.removed)} entries ({_size(sum(e.size for e in pruned.removed))}) {rule}; "
          f"{len(pruned.in_use)} in use kept; {_size(left)} left")
    return int(ExitCode.ENVIRONMENT_ERROR) if pruned.failed else 0


def _size(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _age(last_use: float, now: float) -> str:
    if not last_use:
        return "never"
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(last_use))
    days = (now - last_use) / cache_entries.DAY_S
    return f"{stamp} ({days:.0f} days ago)" if days >= 1 else f"{stamp} (today)"
