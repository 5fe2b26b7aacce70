"""Run the kernel tests on CUDA when present, else on the CPU under the Triton interpreter.

TRITON_INTERPRET must be set before triton is first imported, so this runs at conftest import.
"""
import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

BF16_ON_CPU = "the Triton interpreter cannot do bf16 (tl.dot multiplies bit patterns, docs/facts.md)"


@pytest.fixture(scope="session")
def device():
    return "cuda" if HAS_CUDA else "cpu"


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a GPU (no CUDA device here)")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


@pytest.fixture
def launched():
    """The names of the kernel specs launched while the test runs (mha.launch.LAUNCH_OBSERVERS)."""
    from mha import launch
    names = []
    observe = lambda spec, _kernel: names.append(spec.name)  # noqa: E731
    launch.LAUNCH_OBSERVERS.append(observe)
    yield names
    launch.LAUNCH_OBSERVERS.remove(observe)
