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
Standard library only (read on both sides of the executor boundary).
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

SCHEMA = "mha-ci.codeobj/1"


class RecordFileError(ValueError):
    pass


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
    def from_json(cls, data: dict) -> "CodeObjectRecord":
        data = dict(data)
        if "pass" in data:
            data["pass_"] = data.pop("pass")
        known = {f.name for f in fields(cls)}
        missing = [n for n in ("key", "arch", "bucket", "sha256", "shared_bytes", "registers", "spills")
                   if n not in data]
        if missing:
            raise RecordFileError(f"record {data.get('key', '?')!r} lacks {missing}")
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class CodeObjectFile:
    toolchain: dict
    records: tuple[CodeObjectRecord, ...]
    determinism: dict | None = None   # the two-fresh-compiles check of the run that made it
    errors: tuple = ()                # [{"key", "error"}]: variants that did not compile
    stats: dict | None = None         # counts and wall time of the run (not stored)

    def by_key(self) -> dict[str, CodeObjectRecord]:
        return {r.key: r for r in self.records}

    def only_archs(self, archs) -> "CodeObjectFile":
        wanted = set(archs)
        return CodeObjectFile(self.toolchain, tuple(r for r in self.records if r.arch in wanted),
                              self.determinism, self.errors, self.stats)

    def only_keys(self, substring: str | None) -> "CodeObjectFile":
        if not substring:
            return self
        return CodeObjectFile(self.toolchain, tuple(r for r in self.records if substring in r.key),
                              self.determinism, self.errors, self.stats)

    def to_json(self, stored: bool = False) -> dict:
        """`stored=True`: only what belongs in perf_baselines/ (no run details), so an update
        changes the file exactly where a variant changed."""
        data: dict[str, Any] = {"schema": SCHEMA, "toolchain": dict(sorted(self.toolchain.items())),
                "records": [r.to_json() for r in sorted(self.records, key=lambda r: r.key)]}
        if not stored:
            data["determinism"] = self.determinism
            data["errors"] = list(self.errors)
            data["stats"] = self.stats
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


def parse(data: dict, source: str = "<data>") -> CodeObjectFile:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise RecordFileError(f"{source}: schema is {found!r}, expected {SCHEMA!r}")
    records = tuple(CodeObjectRecord.from_json(r) for r in data.get("records", []))
    keys = [r.key for r in records]
    if len(keys) != len(set(keys)):
        dup = sorted({k for k in keys if keys.count(k) > 1})
        raise RecordFileError(f"{source}: duplicate keys {dup[:5]}")
    return CodeObjectFile(dict(data.get("toolchain", {})), records, data.get("determinism"),
                          tuple(data.get("errors") or ()), data.get("stats"))


def load(path: Path) -> CodeObjectFile:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise RecordFileError(f"{path}: not JSON ({exc})") from None
    return parse(data, str(path))


def dump(codeobjs: CodeObjectFile, path: Path, stored: bool = False) -> None:
    """Write atomically: a temporary sibling renamed over the target, so a reader (or a killed
    update) never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(codeobjs.to_json(stored), indent=1, sort_keys=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)       # mkstemp makes 0600; a stored baseline is an ordinary file
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def merge(stored: CodeObjectFile | None, fresh: CodeObjectFile, archs, only: str | None = None) -> CodeObjectFile:
    """`update --arch A [--only S]`: replace the records just computed (those archs, keys with S),
    keep the others."""
    wanted = set(archs)

    def replaced(r: CodeObjectRecord) -> bool:
        return r.arch in wanted and (not only or only in r.key)

    kept = tuple(r for r in (stored.records if stored else ()) if not replaced(r))
    return CodeObjectFile(fresh.toolchain, kept + tuple(r for r in fresh.records if replaced(r)), fresh.determinism)
