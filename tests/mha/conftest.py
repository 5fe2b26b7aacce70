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


@pytest.fixture(scope="session", autouse=True)
def unwritten_entries_read_as_nan():
    """Every tensor torch.empty makes during the kernel tests starts as NaN (integers: their
    largest value; torch's fill_uninitialized_memory, on while deterministic algorithms are).
    So an output entry that a kernel never writes reads as NaN and fails the comparison, instead
    of holding whatever the caching allocator left there, which after a first identical run is
    that run's right answer. warn_only: torch ops without a deterministic form still run."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    assert torch.utils.deterministic.fill_uninitialized_memory
    yield
    torch.use_deterministic_algorithms(False)


@pytest.fixture(autouse=True)
def fresh_call_specs():
    """Tests change what configs say (the Triton version, the loaded files, an arch) with
    monkeypatch: each starts and ends without the specs earlier calls cached (launch.call_specs)."""
    from mha import launch
    launch._default_call_specs.cache_clear()
    yield
    launch._default_call_specs.cache_clear()


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
