"""Path patterns of triggers.yaml matched against changed paths (repository-relative, '/').

`**` matches across folders, also none (`**/*.md` matches README.md and docs/a/b.md); `*` and
`?` stay within one folder name. Written here rather than with fnmatch, whose `*` crosses '/',
so that `src/mha/configs/sm90-*` cannot match a file in a sub-folder by accident.
"""
from __future__ import annotations

import functools
import re


@functools.lru_cache(maxsize=None)
def _compile(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def path_matches(path: str, pattern: str) -> bool:
    return _compile(pattern).match(path) is not None


def first_match(paths: tuple[str, ...], patterns: tuple[str, ...]) -> str | None:
    """The first path (in the order given) that any pattern matches."""
    return next((p for p in paths if any(path_matches(p, pat) for pat in patterns)), None)
