"""Whether a perf document measured elsewhere timed the code this checkout would store it for.

`perf refresh --measurement` stores documents measured on another machine as the baselines of
HEAD. That is right only when they timed HEAD's kernels: the working tree must be HEAD's
(mha_ci.refresh.clean_tree, the rule a refresh that measures here follows too), and the
measured commit's code objects for the arch -
the checksums records, which the checksums job keeps equal to what the kernels compile to - must
equal HEAD's. A commit that changed only host code or documentation passes; one that changed a
config or a kernel does not, whatever its measurement says.
"""
from __future__ import annotations

import json
from pathlib import Path

from mha_ci import git
from mha_ci.baselines import code_objects
from mha_ci.refresh.clean_tree import unclean


def _records(text: str | None, arch: str) -> dict[str, str] | None:
    if text is None:
        return None
    try:
        doc = json.loads(text)
        return {r["key"]: r["sha256"] for r in doc["records"] if r.get("arch") == arch}
    except (ValueError, KeyError, TypeError):
        return None


def code_mismatch(root: Path, doc: dict, toolchain: str, arch: str) -> str | None:
    """Why `doc` did not time HEAD's code objects of `arch` under `toolchain`; None when it did."""
    why = unclean(root)
    if why:
        return f"{why}: commit them first"
    commit = (doc.get("provenance") or {}).get("commit")
    if not commit:
        return "the measurement names no commit, so its code cannot be checked"
    head = git.head_commit(root)
    if commit == head:
        return None
    path = code_objects(toolchain)
    theirs = _records(git.file_at(root, commit, path), arch)
    if theirs is None:
        return f"commit {commit[:12]} is not in this clone or has no readable {path}: its code cannot be checked"
    ours = _records((Path(root) / path).read_text() if (Path(root) / path).is_file() else None, arch)
    if ours is None:
        return f"HEAD has no readable {path}"
    differ = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
    if differ:
        return (f"measured at {commit[:12]}, whose {arch} code objects differ from HEAD's in {len(differ)} "
                f"variant(s) ({', '.join(differ[:3])}{', ...' if len(differ) > 3 else ''})")
    return None
