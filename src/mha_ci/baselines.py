"""Where perf_baselines/ keeps each stored fact (docs/architecture.md, Layout), as paths relative
to the checkout root: the gates read them there (root / path) and the refresh commits them there."""
from __future__ import annotations

BASELINES_DIR = "perf_baselines"
TEST_DURATIONS_DIR = f"{BASELINES_DIR}/test_durations"


def perf_baseline(arch: str, toolchain: str) -> str:
    """The stored perf baseline (mha-ci.perf/1) of one arch and toolchain."""
    return f"{BASELINES_DIR}/{arch}/{toolchain}.json"


def accuracy_baseline(arch: str, toolchain: str) -> str:
    """The stored accuracy baseline (mha-ci.perf/1 of the pull-request subset, every result with
    its `numerics`) of one arch and toolchain: mha_ci.perf.accuracy."""
    return f"{BASELINES_DIR}/{arch}/accuracy/{toolchain}.json"


def code_objects(toolchain: str) -> str:
    """The stored code-object checksums (mha-ci.codeobj/1) of one toolchain."""
    return f"{BASELINES_DIR}/code_objects/{toolchain}.json"


def test_durations(name: str) -> str:
    """A recorded per-test durations file (mha-ci.durations/1), `name` relative to test_durations/."""
    return f"{TEST_DURATIONS_DIR}/{name}"
