"""The tune out folder: every phase writes here as it goes, and every later phase reads from here.

    plan.json                      mha-ci.tune-plan/1: arch, toolchain, buckets with their shapes,
                                   every candidate with its resources and why it was pruned
    compile/request.json, compile/results.json      the compile payload's input and output
    timing/method.json
    timing/<bucket>/plan.json      shapes and the configs timed on them (current + survivors)
    timing/<bucket>/results.jsonl  one line per measured shape (the payload appends; resume reads)
    verify/plan.json, verify/results.jsonl          the full-set before/after measurement
    check/                         the correctness job on the proposed config
    proposal/                      `tune propose`: the before/after compare report, proposal.json
                                   (mha-ci.tune-proposal/1: per bucket the choice and why) and a
                                   README; never committed (a record is made by hand from it)

Writes are atomic (temporary file + rename) except the .jsonl files, which grow one line per
shape; a torn last line (a kill mid-write) is ignored by every reader.
"""
from __future__ import annotations

import json
from pathlib import Path

from mha_ci.files import read_json as read_json  # the out folder's reader, as the tune steps call it
from mha_ci.files import write_atomic

PLAN_SCHEMA = "mha-ci.tune-plan/1"
PROPOSAL_SCHEMA = "mha-ci.tune-proposal/1"


def write_json(path: Path, data: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1, sort_keys=False) + "\n")
    return path


def read_lines(path: Path) -> list[dict]:
    rows: list[dict] = []
    if not Path(path).is_file():
        return rows
    for line in Path(path).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue            # a torn last line: the shape is measured again on resume
    return rows


def latest_rows(path: Path) -> dict[str, dict]:
    """key -> the last complete row for it (a resumed run may have measured a shape again with
    more candidates; the later row is a superset taken in one run)."""
    return {row["key"]: row for row in read_lines(path)}
