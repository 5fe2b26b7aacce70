"""pytest plugin (loaded with `-p mha_ci.payloads.known_failures`): known failures as strict xfail.

$MHA_CI_KNOWN_FAILURES is a JSON file: [{"test": PATTERN, "reason": ..., "arch": ..., "toolchain": ...}]
already filtered to the job's (arch, toolchain). A test matching a pattern is marked
xfail(strict=True): it must still fail, and the day it passes the shard fails, so the entry is
removed instead of silently hiding a fixed test forever.

Patterns: `*` and `?` are wildcards; everything else is literal, including `[` and `]`, which
node ids of parametrised tests contain (fnmatch would read them as character classes).
"""
from __future__ import annotations

import json
import os
import re

import pytest


def compile_pattern(pattern: str) -> re.Pattern:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern) + r"\Z")


def matches(pattern: str, nodeid: str) -> bool:
    return compile_pattern(pattern).match(nodeid) is not None


def load() -> list[dict]:
    path = os.environ.get("MHA_CI_KNOWN_FAILURES")
    if not path:
        return []
    with open(path) as handle:
        return list(json.load(handle))


def pytest_collection_modifyitems(session, config, items):
    entries = [(compile_pattern(e["test"]), e) for e in load()]
    for item in items:
        for regex, entry in entries:
            if regex.match(item.nodeid):
                where = f"{entry.get('arch', '?')}/{entry.get('toolchain', '?')}"
                item.add_marker(pytest.mark.xfail(strict=True, reason=f"known failure on {where}: {entry['reason']}"))
                break
