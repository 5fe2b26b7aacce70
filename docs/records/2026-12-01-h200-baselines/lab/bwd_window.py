"""Lab: backward time of windowed d128 shapes with the old (BLOCK_N2 32) and new (64) sm90
backward config, alternating in one process; fp16 (the spilling records are fp16 window variants)."""
import statistics
import sys

import torch
import triton.testing

sys.path.insert(0, "src")
import mha  # noqa: E402

OLD = dict(BLOCK_M1=32, BLOCK_N1=128, BLOCK_M2=128, BLOCK_N2=32, num_warps=8, num_stages=3)
NEW = dict(OLD, BLOCK_N2=64)
print("| shape | old ms | new ms | new/old |\n|---|---|---|---|")
for b, hq, hk, s, win, sink in [(1, 64, 8, 8192, (1024, 0), False), (4, 32, 8, 4096, (256, 256), False),
                                (8, 32, 8, 2048, (1024, 0), True)]:
    g = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda h: torch.randn(b, s, h, 128, device="cuda", dtype=torch.float16, generator=g).requires_grad_(True)
    q, k, v = mk(hq), mk(hk), mk(hk)
    snk = torch.zeros(hq, device="cuda", dtype=torch.float32, requires_grad=True) if sink else None
    fns = {}
    for name, cfg in (("old", OLD), ("new", NEW)):
        out = mha.flash_attn_func(q, k, v, window_size=win, sink=snk, config={"backward": cfg})
        do = torch.randn_like(out)
        fns[name] = (lambda out=out, do=do: torch.autograd.grad(out, (q, k, v), do, retain_graph=True))
    t = {"old": [], "new": []}
    for _ in range(3):
        for name in ("old", "new"):
            t[name].append(triton.testing.do_bench(fns[name], warmup=25, rep=100, return_mode="median"))
    o, n = statistics.median(t["old"]), statistics.median(t["new"])
    print(f"| b{b} hq{hq} hk{hk} s{s} d128 window {win}{' sink' if sink else ''} | {o:.3f} | {n:.3f} | {n / o:.3f} |",
          flush=True)
