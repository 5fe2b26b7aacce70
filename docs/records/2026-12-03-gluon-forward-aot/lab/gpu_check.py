"""H200 check of lab/attn_fwd_gluon.py: correctness first, then timing of what passed.

    python3 docs/records/2026-12-03-gluon-forward-aot/lab/gpu_check.py [--no-bench]

(from the repository root, under a Python with Triton 3.8.0 and a CUDA torch). Exit status 0
only if every check passed; 1 if any check failed; 2 if the environment cannot run it.

Check (flash-attn's test rule): with a float32 reference computed from the same bf16 inputs,
  max|out - ref| <= 2 * max|out_sdpa_bf16 - ref| + 1e-3
where out_sdpa_bf16 is torch SDPA on the bf16 inputs; lse likewise against the float32 lse,
with the bf16 baseline being the lse of bf16-rounded scores. Plus: no NaN/inf.
Timing (triton.testing.do_bench, median ms) only for a shape/config whose check passed:
the Gluon kernel, torch SDPA with the cuDNN backend, and the project's shipped forward
(mha.flash_attn_func from this checkout's src/). TFLOP/s = 4*B*Hq*Sq*Sk*D / t, halved if causal.
"""
import math
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(ROOT / "src"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

try:
    import triton
    import attn_fwd_gluon as G
except Exception:  # noqa: BLE001
    traceback.print_exc()
    print("ENV: cannot import triton / the Gluon kernel (needs Triton 3.8.0 with triton.experimental.gluon)")
    sys.exit(2)

# small shapes: (B, Sq, Sk, Hq, Hk, D, causal)
SMALL = [(1, 128, 128, 1, 1, 64, False), (1, 128, 128, 1, 1, 64, True), (2, 256, 256, 4, 2, 64, True),
         (2, 384, 384, 4, 4, 128, False), (2, 384, 384, 4, 1, 128, True), (1, 256, 640, 2, 1, 64, True),
         (1, 256, 640, 2, 2, 128, True), (1, 512, 256, 3, 1, 128, False)]
# bench shapes (also checked)
BENCH = [(8, 2048, 2048, 48, 8, 64, True), (1, 8192, 8192, 64, 8, 128, True), (4, 4096, 4096, 32, 8, 128, False)]
# tile configs exercised on the small shapes: (block_n, stages, num_consumers); None = defaults
SMALL_CONFIGS = [(None, None, 2), (64, 2, 2), (128, 3, 2), (None, None, 1)]


def flops(B, Sq, Sk, Hq, D, causal):
    f = 4.0 * B * Hq * Sq * Sk * D
    return f / 2 if causal else f


def causal_mask(Sq, Sk, device):
    # bottom-right aligned: query i sees keys j <= i + Sk - Sq
    i = torch.arange(Sq, device=device)[:, None]
    j = torch.arange(Sk, device=device)[None, :]
    return j <= i + (Sk - Sq)


def reference(q, k, v, causal, scale):
    """float32 out (B, Sq, Hq, D), lse (B, Hq, Sq), and the lse of bf16-rounded scores."""
    B, Sq, Hq, D = q.shape
    Sk, Hk = k.shape[1], k.shape[2]
    group = Hq // Hk
    out = torch.empty(q.shape, device=q.device, dtype=torch.float32)
    lse = torch.empty((B, Hq, Sq), device=q.device, dtype=torch.float32)
    lse_lowp = torch.empty_like(lse)
    mask = causal_mask(Sq, Sk, q.device) if causal else None
    chunk = max(1, (1 << 29) // (Sq * Sk * 4))  # heads per chunk: ~2 GiB of float32 scores
    for b in range(B):
        for h0 in range(0, Hq, chunk):
            hs = torch.arange(h0, min(Hq, h0 + chunk), device=q.device)
            qh = q[b][:, hs].transpose(0, 1)                    # (h, Sq, D)
            kh = k[b][:, hs // group].transpose(0, 1)           # (h, Sk, D)
            vh = v[b][:, hs // group].transpose(0, 1)
            s = torch.matmul(qh.float(), kh.float().transpose(-1, -2)) * scale
            s_low = torch.matmul(qh, kh.transpose(-1, -2)).float() * scale
            if mask is not None:
                s.masked_fill_(~mask, float("-inf"))
                s_low.masked_fill_(~mask, float("-inf"))
            lse[b, hs] = torch.logsumexp(s, dim=-1)
            lse_lowp[b, hs] = torch.logsumexp(s_low, dim=-1)
            p = torch.softmax(s, dim=-1)
            del s, s_low
            out[b][:, hs] = torch.matmul(p, vh.float()).transpose(0, 1)
            del p
    return out, lse, lse_lowp


def sdpa(q, k, v, causal, scale, backend=None):
    """torch SDPA on (B, S, H, D) tensors; GQA by enable_gqa, else by expanding K/V."""
    Sq, Sk, Hq, Hk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    kw = {}
    if causal and Sq == Sk:
        kw["is_causal"] = True
    elif causal:
        kw["attn_mask"] = causal_mask(Sq, Sk, q.device)

    def run(kt_, vt_, gqa):
        extra = {"enable_gqa": True} if gqa else {}
        if backend is None:
            return F.scaled_dot_product_attention(qt, kt_, vt_, scale=scale, **kw, **extra)
        with torch.nn.attention.sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qt, kt_, vt_, scale=scale, **kw, **extra)

    if Hq == Hk:
        return lambda: run(kt, vt, False).transpose(1, 2)
    try:
        run(kt, vt, True)
        return lambda: run(kt, vt, True).transpose(1, 2)
    except Exception:  # noqa: BLE001 - this backend has no GQA: expand K/V (noted in the output)
        ke = kt.repeat_interleave(Hq // Hk, dim=1)
        ve = vt.repeat_interleave(Hq // Hk, dim=1)
        fn = lambda: run(ke, ve, False).transpose(1, 2)  # noqa: E731
        fn.expanded = True
        return fn


def check(shape, cfg, dtype=torch.bfloat16):
    B, Sq, Sk, Hq, Hk, D, causal = shape
    block_n, stages, consumers = cfg
    torch.manual_seed(0)
    q = torch.randn(B, Sq, Hq, D, device="cuda", dtype=dtype)
    k = torch.randn(B, Sk, Hk, D, device="cuda", dtype=dtype)
    v = torch.randn(B, Sk, Hk, D, device="cuda", dtype=dtype)
    scale = 1.0 / math.sqrt(D)
    label = (f"b{B} sq{Sq} sk{Sk} hq{Hq} hk{Hk} d{D} {'causal' if causal else 'noncausal'} "
             f"N{block_n or G.DEFAULTS[D][0]} s{stages or G.DEFAULTS[D][1]} consumers{consumers}")
    try:
        out, lse = G.attention(q, k, v, causal=causal, sm_scale=scale, block_n=block_n, stages=stages,
                               num_consumers=consumers)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        print(f"FAIL {label}: launch error {type(exc).__name__}: {' '.join(str(exc).split())[:400]}", flush=True)
        return False, (q, k, v, scale)
    ref, ref_lse, lse_low = reference(q, k, v, causal, scale)
    base = sdpa(q, k, v, causal, scale)().float()
    err = (out.float() - ref).abs().max().item()
    err_base = (base - ref).abs().max().item()
    lerr = (lse - ref_lse).abs().max().item()
    lerr_base = (lse_low - ref_lse).abs().max().item()
    finite = bool(torch.isfinite(out).all().item() and torch.isfinite(lse).all().item())
    ok = finite and err <= 2 * err_base + 1e-3 and lerr <= 2 * lerr_base + 1e-3
    print(f"{'PASS' if ok else 'FAIL'} {label}: out err {err:.3e} (sdpa bf16 {err_base:.3e}), "
          f"lse err {lerr:.3e} (bf16 scores {lerr_base:.3e}), finite {finite}", flush=True)
    del ref, ref_lse, lse_low, base
    return ok, (q, k, v, scale)


def bench(shape, tensors):
    B, Sq, Sk, Hq, Hk, D, causal = shape
    q, k, v, scale = tensors
    f = flops(B, Sq, Sk, Hq, D, causal)
    rows = [("gluon (this lab)", lambda: G.attention(q, k, v, causal=causal, sm_scale=scale))]
    try:
        fn = sdpa(q, k, v, causal, scale, torch.nn.attention.SDPBackend.CUDNN_ATTENTION)
        rows.append(("sdpa cudnn" + (" (K/V expanded for GQA)" if getattr(fn, "expanded", False) else ""), fn))
    except Exception as exc:  # noqa: BLE001
        print(f"  sdpa cudnn: unavailable ({type(exc).__name__}: {str(exc)[:200]})")
    try:
        import mha
        rows.append(("mha.flash_attn_func", lambda: mha.flash_attn_func(q, k, v, causal=causal, softmax_scale=scale)))
    except Exception as exc:  # noqa: BLE001
        print(f"  mha: unavailable ({type(exc).__name__}: {str(exc)[:200]})")
    for name, fn in rows:
        try:
            ms = triton.testing.do_bench(fn, warmup=25, rep=200)
            print(f"  {name:45s} {ms:8.3f} ms  {f / ms / 1e9:7.1f} TFLOP/s", flush=True)
        except Exception as exc:  # noqa: BLE001 - a baseline that cannot run is reported, not a check
            print(f"  {name:45s} error {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", flush=True)


def main():
    if not torch.cuda.is_available():
        print("ENV: no CUDA device")
        return 2
    cap = torch.cuda.get_device_capability()
    print(f"device {torch.cuda.get_device_name()} sm{cap[0]}{cap[1]}, torch {torch.__version__}, "
          f"triton {triton.__version__}")
    if cap != (9, 0):
        print("ENV: the kernel is written for sm90 (Hopper)")
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False   # the reference must be float32, not TF32
    do_bench = "--no-bench" not in sys.argv
    failed = 0
    for shape in SMALL:
        for cfg in SMALL_CONFIGS:
            ok, _ = check(shape, cfg)
            failed += not ok
    for shape in BENCH:
        ok, tensors = check(shape, (None, None, 2))
        failed += not ok
        if ok and do_bench:
            bench(shape, tensors)
        elif not ok:
            print("  not timed: its check failed")
        del tensors
        torch.cuda.empty_cache()
    print(f"{failed} check(s) failed" if failed else "all checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
