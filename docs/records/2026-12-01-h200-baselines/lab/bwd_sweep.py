"""Lab: backward TFLOP/s of mha per candidate sm90 backward config on the four bench shapes, the
JSON config timed between candidates (A B A C A ...) so drift shows; cuDNN for scale."""
import sys

from torch.nn.attention import SDPBackend

sys.path.insert(0, "src")
from mha import bench  # noqa: E402

CANDS = [dict(BLOCK_M1=m1, BLOCK_N1=n1, BLOCK_M2=m2, BLOCK_N2=n2, num_warps=w, num_stages=s)
         for m1, n1, m2, n2, w, s in [(64, 128, 128, 64, 8, 2), (32, 128, 128, 32, 8, 2), (64, 64, 64, 64, 4, 3),
                                      (32, 128, 128, 64, 8, 3), (64, 128, 128, 32, 8, 2), (32, 64, 128, 32, 4, 3)]]
print("| shape | config | TFLOP/s | json before | ratio to json | cuDNN |\n|---|---|---|---|---|---|")
for shape in bench.SHAPES:
    cudnn = bench._tflops(lambda: bench._sdpa(shape, True, SDPBackend.CUDNN_ATTENTION), shape, True)
    for cfg in CANDS:
        base = bench._tflops(lambda: bench._ours(shape, True), shape, True)
        t = bench._tflops(lambda: bench._ours(shape, True, {"backward": cfg}), shape, True)
        ratio = "n/a" if t is None or base is None else f"{t / base:.3f}"
        print(f"| {bench.key(shape)} | {cfg} | {'fail' if t is None else f'{t:.0f}'} | {base:.0f} | {ratio} | "
              f"{cudnn:.0f} |", flush=True)
