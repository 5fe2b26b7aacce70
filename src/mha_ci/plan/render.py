"""A Plan as JSON (for CI matrices and tools) or as a table (for people).

JSON, exactly: {"jobs": [{"id", "kind", "arch", "toolchain", "shard", "shards", "reason"}],
"skipped": [{"id", "reason"}]}. `shard` is the 1-based shard index (an int) or null for jobs
that are not sharded; `shards` is the shard count or null.
"""
from __future__ import annotations

import json
from typing import Sequence

from mha_ci.model.types import Plan


def plan_to_json(plan: Plan) -> dict:
    return {
        "jobs": [{"id": p.job.id, "kind": p.job.kind, "arch": p.job.arch, "toolchain": p.job.toolchain,
                  "shard": p.job.shard, "shards": p.job.shards, "reason": p.reason} for p in plan.jobs],
        "skipped": [{"id": s.id, "reason": s.reason} for s in plan.skipped],
    }


def plan_to_json_text(plan: Plan) -> str:
    return json.dumps(plan_to_json(plan), indent=2) + "\n"


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]
    # The last column (the reason) is not padded: it is the long one, and trailing blanks help nobody.
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]) for row in (header, *rows)]


def plan_to_text(plan: Plan) -> str:
    lines = [f"{len(plan.jobs)} jobs planned, {len(plan.skipped)} skipped", ""]
    if plan.jobs:
        rows = [(p.job.id, p.job.kind, p.job.arch, p.job.toolchain or "-",
                 f"{p.job.shard}/{p.job.shards}" if p.job.shard is not None else "-", p.reason) for p in plan.jobs]
        lines += _table(("JOB", "KIND", "ARCH", "TOOLCHAIN", "SHARD", "WHY"), rows)
    if plan.skipped:
        lines += ["", "skipped:"]
        lines += _table(("JOB", "WHY NOT"), [(s.id, s.reason) for s in plan.skipped])
    return "\n".join(lines) + "\n"
