"""Forward and backward against the float64 reference over a matrix of shapes and features.

Sizes stay small (Sq, Sk <= 128) so that the whole file runs in the CPU interpreter in minutes;
ids are stable strings because the CI shards by node id with recorded durations.
"""
import pytest
import torch

from cases import Case, run_dense, run_varlen
from checks import dtype_param

# (batch, Sq, Sk, Hq, Hk): 1x1, odd lengths, Sq < Sk, Sq > Sk, decode-like, MHA/GQA/MQA.
SHAPES = {
    "b1_q1_k1_h1": (1, 1, 1, 1, 1),
    "b2_q37_k53_h4_k2": (2, 37, 53, 4, 2),
    "b1_q65_k40_h2_k1": (1, 65, 40, 2, 1),
    "b1_q64_k64_h2_k2": (1, 64, 64, 2, 2),
    "b1_q1_k77_h4_k1": (1, 1, 77, 4, 1),
}
HEAD_DIMS = {"d8": (8, 8), "d16": (16, 16), "d32": (32, 32), "d40": (40, 40), "d64": (64, 64),
             "d80": (80, 80), "d128": (128, 128), "d192_128": (192, 128)}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dims", list(HEAD_DIMS.values()), ids=list(HEAD_DIMS))
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_forward_shapes_and_head_dims(shape, dims, causal, device):
    b, sq, sk, hq, hk = shape
    run_dense(Case(b, sq, sk, hq, hk, *dims, causal=causal), torch.float16, device, backward=False)


@pytest.mark.parametrize("dims", [(16, 16), (64, 64), (40, 40), (192, 128)], ids=["d16", "d64", "d40", "d192_128"])
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_backward_shapes_and_head_dims(shape, dims, device):
    b, sq, sk, hq, hk = shape
    run_dense(Case(b, sq, sk, hq, hk, *dims, causal=True), torch.float16, device)


# Feature combinations, each forward and backward, in every dtype.
FEATURES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window_l8_r4": dict(window=(8, 4)),
    "window_l0_r0": dict(window=(0, 0)),
    "window_l16_causal": dict(window=(16, -1), causal=True),
    "window_right_only": dict(window=(-1, 5)),
    "sink": dict(sink=True),
    "sink_causal_window": dict(sink=True, causal=True, window=(12, 0)),
    "dropout": dict(dropout_p=0.25),
    "dropout_causal_sink": dict(dropout_p=0.17, causal=True, sink=True),
}
FEATURE_SHAPES = {"q45_k70_gqa": (2, 45, 70, 4, 2), "q70_k45_mqa": (1, 70, 45, 2, 1)}


@pytest.mark.parametrize("dtype", [dtype_param(torch.float16), dtype_param(torch.float32),
                                   dtype_param(torch.bfloat16)])
@pytest.mark.parametrize("feature", list(FEATURES.values()), ids=list(FEATURES))
@pytest.mark.parametrize("shape", list(FEATURE_SHAPES.values()), ids=list(FEATURE_SHAPES))
def test_features(shape, feature, dtype, device):
    b, sq, sk, hq, hk = shape
    run_dense(Case(b, sq, sk, hq, hk, 32, 32, **feature), dtype, device)


@pytest.mark.parametrize("dtype", [dtype_param(torch.float16), dtype_param(torch.bfloat16)])
@pytest.mark.parametrize("feature", ["plain", "causal", "sink_causal_window", "dropout"])
def test_features_pe_head_dims(feature, dtype, device):
    run_dense(Case(1, 40, 56, 2, 1, 192, 128, **FEATURES[feature]), dtype, device)


VARLEN = {
    # lens_q, lens_k: zero-length sequences on either side, Sq > Sk and Sq < Sk per sequence.
    "mixed_with_empty": ([5, 0, 17, 40], [9, 3, 0, 33]),
    "single": ([31], [31]),
    "decode_like": ([1, 1, 1], [20, 1, 45]),
}


@pytest.mark.parametrize("dtype", [dtype_param(torch.float16), dtype_param(torch.float32),
                                   dtype_param(torch.bfloat16)])
@pytest.mark.parametrize("feature", ["plain", "causal", "window_l8_r4", "sink_causal_window", "dropout"])
@pytest.mark.parametrize("lens", list(VARLEN.values()), ids=list(VARLEN))
def test_varlen(lens, feature, dtype, device):
    run_varlen(*lens, 4, 2, 32, 32, dtype, device, **FEATURES[feature])


@pytest.mark.parametrize("dims", [(8, 8), (80, 80), (192, 128)], ids=["d8", "d80", "d192_128"])
def test_varlen_head_dims(dims, device):
    run_varlen([7, 0, 50], [12, 4, 50], 2, 1, *dims, torch.float16, device, causal=True)


def test_varlen_matches_dense_per_sequence(device):
    """A varlen batch of one sequence must equal the dense call bit for bit."""
    import mha

    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 29, 2, 32, generator=gen).to(device, torch.float16)
    k = torch.randn(1, 41, 2, 32, generator=gen).to(device, torch.float16)
    v = torch.randn(1, 41, 2, 32, generator=gen).to(device, torch.float16)
    dense = mha.flash_attn_func(q, k, v, causal=True)
    cu_q = torch.tensor([0, 29], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 41], dtype=torch.int32, device=device)
    packed = mha.flash_attn_varlen_func(q[0], k[0], v[0], cu_q, cu_k, 29, 41, causal=True)
    assert torch.equal(dense[0], packed)


@pytest.mark.parametrize("scale", [-0.3, 0.0], ids=["negative", "zero"])
@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
def test_a_scale_that_is_not_positive(scale, causal, device):
    """softmax_scale is any finite number (mha.validation): a negative one, and 0 beside masked
    keys, forward and backward against the reference."""
    run_dense(Case(1, 40, 40, 2, 1, 32, 32, causal=causal, softmax_scale=scale), torch.float32, device)


def test_softmax_scale_and_noncontiguous_inputs(device):
    """An explicit softmax_scale, and q/k/v that are strided views (last dim contiguous)."""
    gen = torch.Generator().manual_seed(4)
    import mha
    from mha import reference

    big = torch.randn(2, 33, 6, 48, generator=gen).to(device, torch.float32)
    q, k, v = big[:, :, 0:2, :32], big[:, :, 2:4, :32], big[:, :, 4:6, 16:48]
    assert not q.is_contiguous()
    out = mha.flash_attn_func(q, k, v, softmax_scale=0.3)
    ref, _ = reference.attention(q, k, v, softmax_scale=0.3)
    assert (out.double() - ref).abs().max().item() < 1e-4
