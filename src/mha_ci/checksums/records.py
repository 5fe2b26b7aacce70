"""The stored code-object format, "schema": "mha-ci.codeobj/1" (docs/architecture.md, stored formats).

```
{"schema": "mha-ci.codeobj/1",
 "toolchain": {"name": "triton-3.4", "triton": "3.4.0", "torch": ..., "python": ..., "lock_sha256": ...},
 "records": [{"key", "arch", "bucket", "sha256", "shared_bytes", "registers", "spills", ...}, ...]}
```
Besides the fields docs/architecture.md fixes, each record carries what `explain` needs to say *why* a
checksum moved: the kernel and pass, num_warps / num_stages, the effective config of its
bucket and its hash, and a hash of the kernel's source (comments stripped). Records are sorted
by key and the file is written atomically, so a stored file changes only where a variant did.
A fresh file (the payload's) adds run details: determinism, errors, refused (compiles stopped
over the shared memory limit), stats, cache_check (the compile cache hits compiled again, and
those whose entry a fresh compile contradicted). `load` checks every field and type: these files gate merges.
Standard library only (read on both sides of the executor boundary).
"""
from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mha_ci.checksums.slices import Slice
from mha_ci.errors import ConfigError
from mha_ci.files import read_capped, unique_keys, write_atomic

SCHEMA = "mha-ci.codeobj/1"


class RecordFileError(ValueError):
    """A record file that cannot be read as mha-ci.codeobj/1; `source` names the file."""

    def __init__(self, reason: str, source: str = "<data>") -> None:
        super().__init__(f"{source}: {reason}")
        self.reason, self.source = reason, source


# The record's fields and their JSON types; the first seven are required (docs/architecture.md).
REQUIRED = ("key", "arch", "bucket", "sha256", "shared_bytes", "registers", "spills")
FIELD_TYPES: dict[str, type] = {
    "key": str, "arch": str, "bucket": str, "sha256": str, "shared_bytes": int, "registers": int, "spills": int,
    "pass": str, "kernel": str, "num_warps": int, "num_stages": int, "config": dict, "config_hash": str,
    "source_hash": str, "inputs_hash": str, "problem": dict, "extra": dict}
# Top-level keys: the stored ones, then the run details of a fresh file.
FILE_TYPES: dict[str, tuple] = {"schema": (str,), "toolchain": (dict,), "records": (list,),
                                "determinism": (dict, type(None)), "errors": (list,),
                                "stats": (dict, type(None)), "refused": (list,),
                                "cache_check": (dict, type(None))}
MAX_FILE_BYTES = 64 << 20      # the stored files are about 0.5 MB; anything near this is not one


@dataclass(frozen=True)
class CodeObjectRecord:
    key: str                  # "sm90/forward/small_head/attn_fwd/fp16-d64-causal"
    arch: str
    bucket: str
    sha256: str               # of the cubin / hsaco bytes
    shared_bytes: int         # shared memory (cuda) / LDS (amd) per workgroup, Triton's metadata.shared
    registers: int            # cuda: registers per thread; amd: VGPRs
    spills: int               # Triton's n_spills: local/private bytes per thread / 4
    pass_: str = ""           # "forward" | "backward"
    kernel: str = ""          # the @triton.jit function's name
    num_warps: int = 0
    num_stages: int = 0
    config: dict = field(default_factory=dict)   # effective config of the bucket (after guards)
    config_hash: str = ""
    source_hash: str = ""     # kernel + its jit callees, comments and blank lines dropped
    inputs_hash: str = ""     # signature, constexprs, argument attributes, options, target
    problem: dict = field(default_factory=dict)  # the representative problem the variant stands for
    extra: dict = field(default_factory=dict)    # vendor resources: sgprs, agprs, scratch_bytes, ...

    def to_json(self) -> dict:
        data = asdict(self)
        pass_ = data.pop("pass_")
        ordered = {k: data.pop(k) for k in ("key", "arch", "bucket")}
        return {**ordered, "pass": pass_, **data}

    @property
    def label(self) -> str:
        """The problem part of the key ("fp16-d64-causal")."""
        return self.key.rsplit("/", 1)[-1]

    @classmethod
    def from_json(cls, data: dict, source: str = "<data>") -> "CodeObjectRecord":
        check_record(data, source)
        data = dict(data)
        if "pass" in data:
            data["pass_"] = data.pop("pass")
        return cls(**data)


@dataclass(frozen=True)
class CodeObjectFile:
    toolchain: dict
    records: tuple[CodeObjectRecord, ...]
    determinism: dict | None = None   # the two-fresh-compiles check of the run that made it
    errors: tuple = ()                # [{"key", "error"}]: variants that did not compile
    stats: dict | None = None         # counts and wall time of the run (not stored)
    refused: tuple = ()               # [{"key", "arch", "value", "limit"}]: compiles stopped over the
                                      # shared memory limit (no code object; not stored)
    cache_check: dict | None = None   # {"seed", "share", "hits", "claims", "rechecked": [key],
                                      # "mismatches": [{"key", "cached", "fresh", "found_by"}]} (not stored)

    @property
    def cache_mismatches(self) -> list[dict]:
        return list((self.cache_check or {}).get("mismatches") or [])

    def by_key(self) -> dict[str, CodeObjectRecord]:
        return {r.key: r for r in self.records}

    def only_archs(self, archs) -> "CodeObjectFile":
        wanted = set(archs)
        return CodeObjectFile(self.toolchain, tuple(r for r in self.records if r.arch in wanted),
                              self.determinism, self.errors, self.stats,
                              tuple(r for r in self.refused if r["arch"] in wanted), self.cache_check)

    def only_keys(self, substring: str | None) -> "CodeObjectFile":
        if not substring:
            return self
        return CodeObjectFile(self.toolchain, tuple(r for r in self.records if substring in r.key),
                              self.determinism, self.errors, self.stats,
                              tuple(r for r in self.refused if substring in r["key"]), self.cache_check)

    def only_slice(self, slice_: Slice | None) -> "CodeObjectFile":
        """The records of one checksums shard's slice (mha_ci.checksums.slices); all of them for None."""
        if slice_ is None:
            return self
        return CodeObjectFile(self.toolchain, tuple(r for r in self.records if slice_.holds(r.key)),
                              self.determinism, self.errors, self.stats,
                              tuple(r for r in self.refused if slice_.holds(r["key"])), self.cache_check)

    def to_json(self, stored: bool = False) -> dict:
        """`stored=True`: only what belongs in perf_baselines/ (no run details), so an update
        changes the file exactly where a variant changed."""
        data: dict[str, Any] = {"schema": SCHEMA, "toolchain": dict(sorted(self.toolchain.items())),
                "records": [r.to_json() for r in sorted(self.records, key=lambda r: r.key)]}
        if not stored:
            data["determinism"] = self.determinism
            data["errors"] = list(self.errors)
            data["stats"] = self.stats
            data["refused"] = list(self.refused)
            data["cache_check"] = self.cache_check
        return data


def error_summary(error: str) -> str:
    """The line of a compile error that names it (Triton puts the source excerpt first)."""
    lines = [l.strip() for l in (error or "").strip().splitlines() if l.strip()]
    causes = [l for l in lines if l.startswith("caused by ")]
    if causes:
        return causes[-1][len("caused by "):]
    for line in reversed(lines):
        if "Error" in line or "error" in line or "Exception" in line:
            return line
    return lines[-1] if lines else "?"


def _what(value) -> str:
    return f"{value!r}"[:60] + f" ({type(value).__name__})"


def check_record(data, source: str) -> None:
    """Every field of one record present where required, known, and of its type (counts >= 0)."""
    if not isinstance(data, dict):
        raise RecordFileError(f"a record is {_what(data)}, expected an object", source)
    name = data.get("key") if isinstance(data.get("key"), str) else "?"
    missing = [n for n in REQUIRED if n not in data]
    if missing:
        raise RecordFileError(f"record {name!r} lacks {missing}", source)
    for field_name, value in data.items():
        expected = FIELD_TYPES.get(field_name)
        if expected is None:
            close = difflib.get_close_matches(field_name, list(FIELD_TYPES), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise RecordFileError(f"record {name!r}: unknown field {field_name!r}{hint}", source)
        if expected is int:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise RecordFileError(f"record {name!r}: {field_name} is {_what(value)}, "
                                      "expected a non-negative integer", source)
        elif not isinstance(value, expected) or (expected is str and field_name in REQUIRED and not value):
            kind = "a non-empty string" if expected is str else "an object"
            raise RecordFileError(f"record {name!r}: {field_name} is {_what(value)}, expected {kind}", source)


def _check_file(data, source: str) -> None:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise RecordFileError(f"schema is {found!r}, expected {SCHEMA!r}", source)
    for key, value in data.items():
        expected = FILE_TYPES.get(key)
        if expected is None:
            raise RecordFileError(f"unknown top-level key {key!r} (known: {', '.join(FILE_TYPES)})", source)
        if not isinstance(value, expected):
            raise RecordFileError(f"{key} is {_what(value)}, expected "
                                  f"{' or '.join('null' if t is type(None) else t.__name__ for t in expected)}", source)
    for entry in data.get("errors", []):
        if not (isinstance(entry, dict) and isinstance(entry.get("key"), str) and isinstance(entry.get("error"), str)):
            raise RecordFileError(f"an errors entry is {_what(entry)}, expected {{key, error}}", source)
    for entry in data.get("refused", []):
        if not (isinstance(entry, dict) and isinstance(entry.get("key"), str) and isinstance(entry.get("arch"), str)
                and all(isinstance(entry.get(k), int) for k in ("value", "limit"))):
            raise RecordFileError(f"a refused entry is {_what(entry)}, expected {{key, arch, value, limit}}", source)
    mismatches = (data.get("cache_check") or {}).get("mismatches", [])
    for entry in mismatches if isinstance(mismatches, list) else [mismatches]:
        if not (isinstance(entry, dict) and isinstance(entry.get("key"), str)):
            raise RecordFileError(f"a cache_check mismatch is {_what(entry)}, expected {{key, cached, fresh}}", source)


def parse(data: dict, source: str = "<data>") -> CodeObjectFile:
    _check_file(data, source)
    records = tuple(CodeObjectRecord.from_json(r, source) for r in data.get("records", []))
    keys = [r.key for r in records]
    if len(keys) != len(set(keys)):
        dup = sorted({k for k in keys if keys.count(k) > 1})
        raise RecordFileError(f"duplicate keys {dup[:5]}", source)
    return CodeObjectFile(dict(data.get("toolchain", {})), records, data.get("determinism"),
                          tuple(data.get("errors") or ()), data.get("stats"), tuple(data.get("refused") or ()),
                          data.get("cache_check"))


def _unique_keys(pairs: list) -> dict:
    return unique_keys(pairs, lambda key: RecordFileError(f"duplicate JSON key {key!r}"))


def load(path: Path) -> CodeObjectFile:
    """Read and check a record file. Every way it can be broken (empty, truncated, not UTF-8,
    not JSON, a JSON key twice, nested past the parser, the wrong schema or types) is a
    RecordFileError naming the file, never a wrong verdict or a crash."""
    path = Path(path)
    try:
        raw = read_capped(path, "the record file", MAX_FILE_BYTES)
    except ConfigError as exc:
        raise RecordFileError(str(exc).removeprefix(f"{path}: "), str(path)) from None
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except UnicodeDecodeError as exc:
        raise RecordFileError(f"not UTF-8 (byte {exc.start})", str(path)) from None
    except json.JSONDecodeError as exc:
        empty = " (empty)" if not raw.strip() else ""
        raise RecordFileError(f"not JSON{empty}: {exc.msg} at line {exc.lineno} column {exc.colno}",
                              str(path)) from None
    except RecordFileError as exc:
        raise RecordFileError(exc.reason, str(path)) from None
    except (ValueError, RecursionError) as exc:      # e.g. an integer past int's digit limit, deep nesting
        raise RecordFileError(f"not JSON: {type(exc).__name__}: {str(exc)[:200]}", str(path)) from None
    return parse(data, str(path))


def dump(codeobjs: CodeObjectFile, path: Path, stored: bool = False) -> None:
    """Write atomically: a temporary sibling renamed over the target, so a reader (or a killed
    update) never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(codeobjs.to_json(stored), indent=1, sort_keys=False) + "\n")


def merge(stored: CodeObjectFile | None, fresh: CodeObjectFile, archs, only: str | None = None) -> CodeObjectFile:
    """`update --arch A [--only S]`: replace the records just computed (those archs, keys with S),
    keep the others."""
    wanted = set(archs)

    def replaced(r: CodeObjectRecord) -> bool:
        return r.arch in wanted and (not only or only in r.key)

    kept = tuple(r for r in (stored.records if stored else ()) if not replaced(r))
    return CodeObjectFile(fresh.toolchain, kept + tuple(r for r in fresh.records if replaced(r)), fresh.determinism)
