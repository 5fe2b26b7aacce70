"""The config bucket of a perf workload shape, by the kernel's own rule (`mha.config.select_bucket`).

`mha.config` uses the standard library only and `import mha` imports torch lazily, so the
orchestrating side (no torch, no triton) reads the rule from its one home. In the payload the
kernel's answer is recorded too (`kernel_bucket`), so a measurement made with another checkout's
rule says so instead of being filed under a stale bucket.
"""
from __future__ import annotations

from mha.config import select_bucket


def bucket_of(shape) -> str:
    """The config bucket of a mha_ci.perf.shapes.Shape, in the config section of its pass."""
    return select_bucket(shape.config_pass, shape.dqk, shape.dv, shape.dtype, shape.dropout_p)
