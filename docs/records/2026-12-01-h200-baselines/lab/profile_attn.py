"""Lab: one forward and one backward of mha and of cuDNN (torch SDPA) per shape, for ncu
(profiled range only: cudaProfilerStart/Stop around the measured calls; warm-up compiles first)."""
import sys
import torch
from torch.nn.attention import SDPBackend
sys.path.insert(0, "src")
from mha import bench

shapes = [bench.SHAPES[i] for i in map(int, sys.argv[1].split(","))]
calls = []
for shape in shapes:
    for backward in (False, True):
        calls.append(bench._ours(shape, backward))
        calls.append(bench._sdpa(shape, backward, SDPBackend.CUDNN_ATTENTION))
for c in calls:
    c(); c()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for c in calls:
    c()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
print("profiled", len(calls), "calls")
