"""The kernel's config-bucket rule, mirrored for the orchestrating side.

The rule's home is `mha.config.select_bucket`. It cannot be imported here: importing
`mha.config` runs `mha/__init__.py`, which imports torch and triton, and the orchestrating
side must run without them (docs/architecture.md, Data flow). So the rule is mirrored, and
tests/mha_ci/perf/test_workloads.py loads src/mha/config.py on its own (without the package's
__init__) and checks that both agree on every workload shape and on a grid around each
boundary. In the payload the kernel's own answer is recorded too (`kernel_bucket`), so a
measurement run after the rule changed says so instead of being filed under a stale bucket.
"""
from __future__ import annotations

BUCKETS = ("default", "small_head", "large_head", "pe", "dropout_or_fp32", "large_head_dropout_or_fp32")
LARGE_HEAD_DIM = 128
PERF_PASS = "forward"     # perf workloads time the forward pass (the reference study did)


def select_bucket(pass_: str, dqk: int, dv: int, dtype: str, dropout_p: float) -> str:
    """Mirror of mha.config.select_bucket; first match wins (see that docstring for why)."""
    if pass_ not in ("forward", "backward"):
        raise ValueError(f"pass_ must be 'forward' or 'backward', got {pass_!r}")
    large = max(dqk, dv) > LARGE_HEAD_DIM
    if dropout_p > 0 or dtype == "fp32":
        return "large_head_dropout_or_fp32" if large else "dropout_or_fp32"
    if dqk > dv and dv <= LARGE_HEAD_DIM:
        return "pe"
    if large:
        return "large_head"
    if 16 < dv <= 64:
        return "small_head"
    return "default"


def bucket_of(shape) -> str:
    """Forward bucket of a mha_ci.perf.shapes.Shape."""
    return select_bucket(PERF_PASS, shape.dqk, shape.dv, shape.dtype, shape.dropout_p)
