"""Every job that exists: kind x arch x toolchain (x shard), in one stable order.

The order is jobs.yaml's kinds (model.types.JOB_KINDS), then archs.yaml, then toolchains.yaml
(none for a kind with `per_toolchain: false`), then shard number, so the same pipeline always gives the same plan, byte for byte.
Combinations a kind declares `unavailable` are part of the matrix so that a plan can say why
they never run (perf on the interpreter).
"""
from __future__ import annotations

from dataclasses import dataclass

from mha_ci.model.pipeline import Pipeline
from mha_ci.model.types import Job


@dataclass(frozen=True)
class MatrixEntry:
    job: Job
    unavailable: str | None = None     # why this combination never runs; None: it can run


def full_matrix(pipeline: Pipeline) -> tuple[MatrixEntry, ...]:
    entries = []
    for kind, matrix in pipeline.kinds.items():
        unavailable = dict(matrix.unavailable)
        # a kind that runs no toolchain code (docs) is one job per arch, its toolchain ""
        toolchains = tuple(pipeline.toolchains) if matrix.per_toolchain else ("",)
        for arch in pipeline.archs:
            for toolchain in toolchains:
                if arch in unavailable:
                    entries.append(MatrixEntry(Job(kind, arch, toolchain), unavailable[arch]))
                elif arch in matrix.archs and matrix.sharded:
                    shards = matrix.shards or pipeline.shards(arch)
                    entries.extend(MatrixEntry(Job(kind, arch, toolchain, shard, shards))
                                   for shard in range(1, shards + 1))
                elif arch in matrix.archs:
                    entries.append(MatrixEntry(Job(kind, arch, toolchain)))
    return tuple(entries)


def runnable_jobs(pipeline: Pipeline) -> tuple[Job, ...]:
    """The jobs that can run at all (what `mha-ci run --job ID` accepts, what CI exports)."""
    return tuple(entry.job for entry in full_matrix(pipeline) if entry.unavailable is None)
