"""Lab: are the Gluon backward's gradients the Triton backward's bit for bit? (the perf A/B's numerics
said identical on 22 shapes). One process: the public API with and without a backward override (an
override of backward keys runs the Triton kernels), launched kernels recorded."""
import torch
import mha
from mha import launch

names = []
launch.LAUNCH_OBSERVERS.append(lambda spec, _k: names.append(spec.name))
cases = [(2, 1024, 1024, 8, 2, True), (1, 4096, 4096, 16, 2, False), (1, 256, 640, 4, 1, True), (1, 2048, 2048, 32, 8, True)]
for dtype in (torch.bfloat16, torch.float16):
    for b, sq, sk, hq, hk, causal in cases:
        g = torch.Generator(device="cuda").manual_seed(sq + hq)
        q = torch.randn(b, sq, hq, 128, device="cuda", dtype=dtype, generator=g)
        k, v = (torch.randn(b, sk, hk, 128, device="cuda", dtype=dtype, generator=g) for _ in range(2))
        do = torch.randn(b, sq, hq, 128, device="cuda", dtype=dtype, generator=g)
        res = {}
        for label, cfg in (("gluon", None), ("triton", {"backward": {"num_warps": 8}})):
            names.clear()
            leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
            out = mha.flash_attn_func(*leaves, causal=causal, config=cfg)
            res[label] = (torch.autograd.grad(out, leaves, do), tuple(names))
        same = [torch.equal(a, b_) for a, b_ in zip(res["gluon"][0], res["triton"][0])]
        diff = [(a.float() - b_.float()).abs().max().item() for a, b_ in zip(res["gluon"][0], res["triton"][0])]
        print(f"{str(dtype)[6:]} b{b} sq{sq} sk{sk} hq{hq} hk{hk} causal={causal}: dq/dk/dv identical {same} "
              f"max|diff| {diff} | gluon ran {res['gluon'][1][1:]} | triton ran {res['triton'][1][1:]}", flush=True)
