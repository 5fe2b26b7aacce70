"""Every head-dim class the configs distinguish, forward and backward, against the reference.

A class is a (bucket, padded tile width) pair of mha.config.select_bucket: each gets its own
tiles, so each can run out of shared memory / LDS on its own (d160..d256 did on the H200 before
the large_head bucket: OutOfResources before the first launch). The interpreter cannot see
that, so the full matrix (bf16 and fp16, every class) is marked `gpu`; the classes added with
the large_head buckets also run in fp16 / fp32 under the interpreter, at tiny sizes.
"""
import pytest
import torch

from cases import Case, run_dense
from checks import dtype_param
from mha import config

# id -> (Dqk, Dv); comment: bucket and padded width of the tile
CLASSES = {
    "d8": (8, 8),          # default, 16 (padded up to tl.dot's minimum)
    "d16": (16, 16),       # default, 16 (num_stages guard)
    "d24": (24, 24),       # small_head_32, 32 (masked)
    "d32": (32, 32),       # small_head_32, 32
    "d40": (40, 40),       # small_head, 64 (masked)
    "d64": (64, 64),       # small_head, 64
    "d80": (80, 80),       # default, 128 (masked)
    "d128": (128, 128),    # default, 128
    "d160": (160, 160),    # large_head, 256 (masked)
    "d192": (192, 192),    # large_head, 256 (masked)
    "d224": (224, 224),    # large_head, 256 (masked)
    "d256": (256, 256),    # large_head, 256
    "d192_128": (192, 128),  # pe, 256 x 128
}
# Odd lengths over several tiles of every config (BLOCK_M/N 16..128), GQA: still milliseconds of
# GPU time per test (the compile dominates).
GPU_SHAPE = (2, 193, 161, 4, 2)
# The interpreter runs every program on the CPU: one tile row more than the smallest block.
CPU_SHAPE = (1, 33, 47, 2, 1)
LARGE = ("d160", "d224", "d256")


def test_classes_cover_every_bucket_of_the_plain_problems():
    buckets = {config.select_bucket("forward", dqk, dv, "fp16", 0.0) for dqk, dv in CLASSES.values()}
    assert buckets == set(config.BUCKETS) - {"dropout_or_fp32", "large_head_dropout_or_fp32"}


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [dtype_param(torch.bfloat16), dtype_param(torch.float16)])
@pytest.mark.parametrize("dims", list(CLASSES.values()), ids=list(CLASSES))
def test_head_dim_class_on_gpu(dims, dtype, causal, device):
    run_dense(Case(*GPU_SHAPE, *dims, causal=causal), dtype, device)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [dtype_param(torch.bfloat16), dtype_param(torch.float16),
                                   dtype_param(torch.float32)])
@pytest.mark.parametrize("dims", [CLASSES["d256"], CLASSES["d192_128"]], ids=["d256", "d192_128"])
def test_large_head_dropout_or_fp32_on_gpu(dims, dtype, device):
    p = 0.0 if dtype == torch.float32 else 0.2     # fp32 reaches the bucket without dropout
    run_dense(Case(*GPU_SHAPE, *dims, causal=True, dropout_p=p), dtype, device)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dims", [CLASSES[c] for c in LARGE], ids=LARGE)
def test_large_head_fp16_forward_and_backward(dims, causal, device):
    run_dense(Case(*CPU_SHAPE, *dims, causal=causal), torch.float16, device)


@pytest.mark.parametrize("dtype,p", [(torch.float16, 0.2), (torch.float32, 0.0)], ids=["fp16_dropout", "fp32"])
def test_large_head_dropout_or_fp32_forward_and_backward(dtype, p, device):
    run_dense(Case(*CPU_SHAPE, 256, 256, causal=True, dropout_p=p), dtype, device)
