"""Host time of the Gluon forward's four TMA descriptors per launch (forward_gluon.descriptors) on the
d64 bench shape's tensors, with shared_layout cached (as shipped) and with its cache bypassed (as
before), in us. CPU only (descriptors are host objects); Triton 3.8 toolchain venv:
    PYTHONPATH=src <venv>/bin/python docs/records/2026-12-07-host-overhead/lab/descriptors_time.py"""
import timeit

import torch
import triton

from mha.kernels import forward_gluon as fg

b, s, hq, hk, d = 8, 2048, 48, 8, 64
q = torch.empty(b, s, hq, d, dtype=torch.bfloat16)
k, v, o = torch.empty(b, s, hk, d, dtype=torch.bfloat16), torch.empty(b, s, hk, d, dtype=torch.bfloat16), torch.empty_like(q)
N = 2000


def per_call():
    fg.descriptors(q, k, v, o, "bf16", 128)
    return sorted(timeit.repeat(lambda: fg.descriptors(q, k, v, o, "bf16", 128), number=N, repeat=5))[2] / N * 1e6


print(f"triton {triton.__version__}; median of 5 runs of {N} calls, us per call")
print(f"shared_layout cached:   {per_call():6.1f}")
cached = fg.shared_layout
fg.shared_layout = cached.__wrapped__
try:
    print(f"shared_layout uncached: {per_call():6.1f}")
finally:
    fg.shared_layout = cached
