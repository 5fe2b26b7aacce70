"""Test-only Triton kernels with a planted memory fault: the memcheck job's self-test.

Each sanitizer tool the job relies on must report its plant in the job's own run before a clean
run of the real kernels means anything. They live here, not in src/mha: the kernel package
ships no faulty code.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

N = 1000            # a length no block size divides
PAST_END = 8        # elements read beyond the last one
BLOCK = 1024


@triton.jit
def memcheck_plant_read_past_end(src, dst, n, past_end, BLOCK: tl.constexpr):
    # The mask admits `past_end` elements after the buffer's last: the partial-final-tile bug.
    offs = tl.arange(0, BLOCK)
    x = tl.load(src + offs, mask=offs < n + past_end, other=0.0)
    tl.store(dst + offs, x, mask=offs < n + past_end)


@triton.jit
def memcheck_plant_read_uninitialised(src, dst, n, BLOCK: tl.constexpr):
    # `src` is torch.empty: nothing wrote it, so this read is what initcheck exists for.
    offs = tl.arange(0, BLOCK)
    x = tl.load(src + offs, mask=offs < n, other=0.0)
    tl.store(dst + offs, x, mask=offs < n)


def run(tool: str) -> str:
    """Launch the plant for `tool`; returns the planted kernel's name (what its report must name)."""
    if tool == "memcheck":
        src = torch.randn(N, device="cuda")
        dst = torch.zeros(N + PAST_END, device="cuda")
        memcheck_plant_read_past_end[(1,)](src, dst, N, PAST_END, BLOCK=BLOCK)
        name = "memcheck_plant_read_past_end"
    elif tool == "initcheck":
        src = torch.empty(N, device="cuda")
        dst = torch.zeros(N, device="cuda")
        memcheck_plant_read_uninitialised[(1,)](src, dst, N, BLOCK=BLOCK)
        name = "memcheck_plant_read_uninitialised"
    else:
        raise ValueError(f"no planted fault for sanitizer tool {tool!r}")
    torch.cuda.synchronize()
    return name
