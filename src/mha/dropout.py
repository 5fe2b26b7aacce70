"""Dropout seeds and the exact keep-mask the kernels apply.

The kernels draw philox numbers keyed by seed + (batch * Hq + head) with counter
offset + row * rng_stride + col, where rng_stride is seqlen_k (dense) or the longest key
sequence (varlen). An element is kept when its draw is >= dropout_p; kept values are scaled by
1 / (1 - dropout_p).
"""
from __future__ import annotations

import torch
import triton

from .kernels.dropout import dropout_mask_kernel

SEED_LIMIT = 2**30  # seed + batch*heads must stay in int32


def draw_seed() -> tuple[int, int]:
    """(seed, offset) for one dropout call, drawn from torch's default CPU generator, so that
    torch.manual_seed(s) before a call makes it reproducible. Tests call this after the same
    manual_seed to learn the seed a call used."""
    seed = int(torch.randint(0, SEED_LIMIT, (1,)).item())
    return seed, 0


def dropout_mask(batch: int, heads_q: int, seqlen_q: int, seqlen_k: int, dropout_p: float,
                 seed: int, offset: int = 0, device="cpu") -> torch.Tensor:
    """Bool keep-mask (batch, heads_q, seqlen_q, seqlen_k) exactly as the kernels draw it.

    For varlen, pass the number of sequences, the longest query and key sequence lengths, and
    read mask[b, h, :len_q(b), :len_k(b)].
    """
    mask = torch.zeros((batch, heads_q, seqlen_q, seqlen_k), dtype=torch.int8, device=device)
    block_m, block_n = 32, 32
    grid = (batch * heads_q, triton.cdiv(seqlen_q, block_m))
    if mask.numel():
        dropout_mask_kernel[grid](mask, mask.stride(0), mask.stride(1), mask.stride(2), seqlen_q, seqlen_k,
                                  heads_q, float(dropout_p), seed, offset, seqlen_k,
                                  BLOCK_M=block_m, BLOCK_N=block_n)
    return mask.bool()
