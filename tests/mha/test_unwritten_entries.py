"""An output entry that no kernel writes reads as NaN in the kernel tests (conftest's
unwritten_entries_read_as_nan), not as what the caching allocator left in its memory."""
import torch

import mha
from mha import launch


def test_an_output_no_kernel_writes_reads_as_nan(monkeypatch, device):
    q = torch.randn(1, 64, 2, 32, device=device, dtype=torch.float16)
    first = mha.flash_attn_func(q, q, q)
    assert torch.isfinite(first).all()
    del first   # its memory goes back to the allocator, right values and all
    monkeypatch.setattr(launch, "_launch", lambda spec, grid, args: None)   # every kernel skipped
    second = mha.flash_attn_func(q, q, q)
    assert torch.isnan(second).all()
