"""The H200 decode workload whose K cache has 12.9e9 elements (beyond int32 element offsets):
only a GPU with enough memory runs it; the interpreter equivalent is
test_validation.test_large_base_offsets_are_64bit."""
import pytest
import torch

import mha
from mha.reference import attention

NEEDED_BYTES = 50 * 2**30  # k 25.8 GB + v 17.2 GB in fp16, plus slack


@pytest.mark.gpu
def test_decode_with_kv_cache_past_int32():
    if torch.cuda.mem_get_info()[0] < NEEDED_BYTES:
        pytest.skip("needs 50 GiB of free GPU memory")
    torch.manual_seed(0)
    b, sk, h = 64, 8192, 128
    q = torch.randn(b, 1, h, 192, device="cuda", dtype=torch.bfloat16)
    k = torch.empty(b, sk, h, 192, device="cuda", dtype=torch.bfloat16)
    v = torch.empty(b, sk, h, 128, device="cuda", dtype=torch.bfloat16)
    for i in range(b):  # fill batch by batch: a randn of the whole cache would need fp32 scratch
        k[i].normal_()
        v[i].normal_()
    assert k.numel() > 2**31
    out = mha.flash_attn_func(q, k, v, causal=True)
    torch.cuda.synchronize()
    # The last batches sit past 2^31 elements in k and v: a 32-bit base would read other batches.
    for i in (0, b // 2, b - 1):
        ref, _ = attention(q[i:i + 1], k[i:i + 1], v[i:i + 1], causal=True, compute_dtype=torch.float32)
        torch.testing.assert_close(out[i:i + 1].float(), ref, atol=2e-2, rtol=2e-2)
