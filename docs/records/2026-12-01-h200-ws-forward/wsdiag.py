# lab (not product): which rows of a warp-specialized forward tile are wrong, and under which variant
import sys, torch, mha
from mha import config, launch, reference
config.apply_guards = lambda pass_, arch, cfg, *a: cfg   # the raw configs, not their guarded fallbacks
torch.manual_seed(0)
orig = launch.kernel_specs
def run(shape, cfg, ws_flag=True, causal=False):
    b, sq, sk, hq, hk, d = shape
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
    def patched(*a, **kw):
        specs = orig(*a, **kw)
        if "WARP_SPECIALIZE" in specs["fwd"].constexprs:
            specs["fwd"].constexprs["WARP_SPECIALIZE"] = ws_flag
        return specs
    launch.kernel_specs = patched
    try:
        out = mha.flash_attn_func(q, k, v, causal=causal, config={"forward": cfg})
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:100]}"
    finally:
        launch.kernel_specs = orig
    ref, _ = reference.attention(q, k, v, causal=causal)
    err = (out.double() - ref).abs().amax(dim=(0, 2, 3))  # per query row
    groups = [err[i:i + 64].max().item() for i in range(0, sq, 64)]
    return " ".join(f"{g:.3f}" for g in groups)
WS = dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2, warp_specialize=True)
variants = {"ws": (WS, True), "ws-flag-off": (WS, False), "ws-bm64": (dict(WS, BLOCK_M=64), True),
            "ws-s3": (dict(WS, BLOCK_N=64, num_stages=3), True)}
for shape in [(1, 65, 40, 2, 1, 128), (1, 256, 256, 2, 1, 128), (2, 193, 161, 4, 2, 80)]:
    for causal in (False, True):
        for name, (cfg, flag) in variants.items():
            print(shape, "causal" if causal else "full", name, "| max err per 64 rows:", run(shape, cfg, flag, causal), flush=True)
