"""Lab (issue 39, d64 forward): run one forward of a mha.bench shape a few times, for ncu.
usage: python3 fwd_once.py mha|cudnn [KEY]   (KEY in mha.bench.key's form; default the d64 bench shape)"""
import sys

import torch
from torch.nn.attention import SDPBackend

from mha import bench

shape = bench.parse_key(sys.argv[2]) if len(sys.argv) > 2 else bench.SHAPES[1]
fn = bench._ours(shape, False) if sys.argv[1] == "mha" else bench._sdpa(shape, False, SDPBackend.CUDNN_ATTENTION)
for _ in range(4):
    fn()
torch.cuda.synchronize()
print(sys.argv[1], bench.key(shape), "ran", flush=True)
