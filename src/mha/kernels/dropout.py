"""Materialise the dropout keep-mask the attention kernels use (for tests and debugging)."""
import triton
import triton.language as tl

from .common import dropout_keep, slice_offset


@triton.jit
def dropout_mask_kernel(Mask, stride_mb, stride_mh, stride_mm, seqlen_q, seqlen_k, num_heads,
                        dropout_p, rng_seed, rng_offset, rng_stride,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // num_heads
    h = bh % num_heads
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(0, seqlen_k, BLOCK_N):
        offs_n = start_n + offs_n0
        keep = dropout_keep(rng_seed + bh, rng_offset, offs_m[:, None], offs_n[None, :], rng_stride, dropout_p)
        tl.store(Mask + slice_offset(b, 0, h, stride_mb, 0, stride_mh) + offs_m[:, None] * stride_mm + offs_n[None, :],
                 keep.to(tl.int8), mask=(offs_m[:, None] < seqlen_q) & (offs_n[None, :] < seqlen_k))
