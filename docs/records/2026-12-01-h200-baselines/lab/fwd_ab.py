"""Lab: forward TFLOP/s of mha (src) and of its tensor-descriptor copy (out/exp/tma/mha_tma), taking
turns in one process (A B A B per shape and config), with cuDNN for scale and the largest output
difference between the two."""
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend

sys.path[:0] = ["src", "out/exp/tma"]
import mha  # noqa: E402
import mha_tma  # noqa: E402
from mha import bench  # noqa: E402

CFGS = [None, dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=2),
        dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
        dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=4)]
print("| shape | config | mha | tma | tma/mha | cuDNN | tma/cuDNN | max diff |\n|---|---|---|---|---|---|---|---|")
for shape in bench.SHAPES:
    q, k, v = bench._inputs(shape, False)
    cudnn = bench._tflops(lambda: bench._sdpa(shape, False, SDPBackend.CUDNN_ATTENTION), shape, False)
    for cfg in CFGS:
        conf = None if cfg is None else {"forward": cfg}
        fns = {name: (lambda pkg=pkg: pkg.flash_attn_func(q, k, v, causal=shape[6], config=conf))
               for name, pkg in (("mha", mha), ("tma", mha_tma))}
        try:
            diff = (fns["mha"]().float() - fns["tma"]().float()).abs().max().item()
            times = {"mha": [], "tma": []}
            for _ in range(2):
                for name in ("mha", "tma"):
                    times[name].append(bench._time(fns[name]))
        except Exception as e:
            print(f"| {bench.key(shape)} | {cfg or 'json'} | fail: {type(e).__name__}: {str(e)[:150]} |", flush=True)
            continue
        tf = {n: bench.flops(shape, False) / (statistics.median(t) * 1e-3) / 1e12 for n, t in times.items()}
        print(f"| {bench.key(shape)} | {cfg or 'json'} | {tf['mha']:.0f} | {tf['tma']:.0f} | {tf['tma'] / tf['mha']:.3f} | "
              f"{cudnn:.0f} | {tf['tma'] / cudnn:.2f} | {diff:.2e} |", flush=True)
