"""H200 check of lab/attn_bwd_dkdv_gluon.py: correctness first, then timing of what passed.

    python3 <this folder>/gpu_check.py [--no-bench]

(from the repository root, under a Python with Triton 3.8.0 and a CUDA torch). Exit status 0
only if every check passed; 1 if any failed; 2 if the environment cannot run it.

Check: lse and O from the project's forward (mha.flash_attn_func, return_lse), delta =
rowsum(dO * O) in float32, then the Gluon kernel's dK and dV against the float32 reference
gradients by the kernel tests' rule (mha.reference.mismatch: the error at most twice that of the
same math in bf16), and bitwise equal across two runs (no atomics: it must be reproducible).
Timing (triton.testing.do_bench medians, one process) on the bench shapes it can take: the
project's whole backward (autograd), its kernels' shares (torch.profiler, CUDA time per kernel
name), and the Gluon dK/dV kernel; "projected" is the project's backward with its dK/dV kernel's
time replaced by the Gluon kernel's, against cuDNN's backward in the same run.
"""
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3] if (HERE.parents[3] / "src" / "mha").is_dir() else Path.cwd()
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(ROOT / "src"))

import torch  # noqa: E402

try:
    import triton  # noqa: F401 - the environment check
    import attn_bwd_dkdv_gluon as G
    import mha
    from mha import bench, reference
except Exception:  # noqa: BLE001
    traceback.print_exc()
    print("ENV: cannot import triton / mha / the Gluon kernel (needs Triton 3.8.0)")
    sys.exit(2)

# (B, Hq, Hk, Sq, Sk, D, causal)
SMALL = [(1, 1, 1, 128, 128, 64, False), (1, 1, 1, 128, 128, 64, True), (2, 4, 2, 256, 256, 64, True),
         (2, 4, 4, 384, 384, 128, False), (2, 4, 1, 384, 384, 128, True), (1, 2, 1, 256, 640, 64, True),
         (1, 2, 2, 256, 640, 128, True), (1, 3, 1, 512, 256, 128, False), (1, 2, 1, 1024, 1024, 128, True)]
CONFIGS = [(64, 2), (64, 3)]            # (BLOCK_M, STAGES)
BENCH = [(8, 48, 8, 2048, 64, True), (1, 64, 8, 8192, 128, True), (4, 32, 8, 4096, 128, False)]


def inputs(b, hq, hk, sq, sk, d, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda s, h: torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    return mk(sq, hq), mk(sk, hk), mk(sk, hk), mk(sq, hq)


def forward_stats(q, k, v, do, causal):
    out, lse = mha.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    delta = (do.float() * out.float()).sum(-1).transpose(1, 2).contiguous()     # (B, Hq, Sq)
    return lse.contiguous(), delta


def check(shape, block_m, stages):
    b, hq, hk, sq, sk, d, causal = shape
    q, k, v, do = inputs(b, hq, hk, sq, sk, d)
    scale = d ** -0.5
    lse, delta = forward_stats(q, k, v, do, causal)
    dk, dv = G.run(q, k, v, do, lse, delta, causal, scale, block_m, stages)
    dk2, dv2 = G.run(q, k, v, do, lse, delta, causal, scale, block_m, stages)
    torch.cuda.synchronize()
    if not (torch.equal(dk, dk2) and torch.equal(dv, dv2)):
        return "not bitwise reproducible"
    grads = {}
    for compute in (torch.float32, torch.bfloat16):
        leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
        ref, _ = reference.attention(*leaves, causal=causal, compute_dtype=compute)
        grads[compute] = torch.autograd.grad(ref, leaves[1:], do.to(compute))
    for name, got, exact, lowp in zip(("dk", "dv"), (dk, dv), grads[torch.float32], grads[torch.bfloat16]):
        wrong = reference.mismatch(name, got, exact, lowp, torch.bfloat16)
        if wrong:
            return wrong
    return None


def kernel_times(fn, reps=10):
    """CUDA time (us, mean over reps) per event name of fn, by torch.profiler; the callers read
    kernel names only (CPU-side ops carry their kernels' time too)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out = {}
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if t:
            out[ev.key] = t / reps
    return out


def main():
    failed = 0
    for shape in SMALL:
        for block_m, stages in CONFIGS:
            try:
                wrong = check(shape, block_m, stages)
            except Exception as exc:  # noqa: BLE001 - a failure is a finding
                wrong = f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"
            failed += wrong is not None
            print(f"check {shape} M{block_m} s{stages}: {'ok' if wrong is None else 'WRONG ' + wrong}", flush=True)
    for b, hq, hk, s, d, causal in BENCH:
        shape = (b, hq // hk, 1, s, s, d, causal)
        wrong = check(shape, 64, 2)
        failed += wrong is not None
        print(f"check bench-reduced {shape} M64 s2: {'ok' if wrong is None else 'WRONG ' + wrong}", flush=True)
    print(f"checks: {failed} failed", flush=True)
    if failed or "--no-bench" in sys.argv:
        return 1 if failed else 0

    print("| shape | mha bwd TFLOP/s | dkdv us | dq us | other us | gluon dkdv us (M, stages) | projected "
          "TFLOP/s | cuDNN TFLOP/s | projected/cuDNN |")
    print("|---|---|---|---|---|---|---|---|---|")
    for b, hq, hk, s, d, causal in BENCH:
        bshape = (b, hq, hk, s, d, d, causal)
        flops = bench.flops(bshape, True)
        ours = bench._ours(bshape, True)
        t_ours = bench._time(ours) * 1e3
        shares = kernel_times(ours)
        t_dkdv = sum(v for k, v in shares.items() if "attn_bwd_dkdv" in k)
        t_dq = sum(v for k, v in shares.items() if "attn_bwd_dq" in k)
        t_other = t_ours - t_dkdv - t_dq      # preprocess, the dQ cast, launch gaps
        q, k, v, do = inputs(b, hq, hk, s, s, d)
        lse, delta = forward_stats(q, k, v, do, causal)
        best = None
        for block_m, stages in CONFIGS:
            t = bench._time(lambda: G.run(q, k, v, do, lse, delta, causal, d ** -0.5, block_m, stages)) * 1e3
            best = min(best or (t, block_m, stages), (t, block_m, stages))
        t_proj = t_ours - t_dkdv + best[0]
        try:
            from torch.nn.attention import SDPBackend
            t_cudnn = bench._time(bench._sdpa(bshape, True, SDPBackend.CUDNN_ATTENTION)) * 1e3
        except Exception as exc:  # noqa: BLE001
            print(f"  cuDNN: {exc}")
            t_cudnn = float("nan")
        tf = lambda us: flops / us / 1e6
        print(f"| {bench.key(bshape)} | {tf(t_ours):.0f} | {t_dkdv:.0f} | {t_dq:.0f} | {t_other:.0f} | "
              f"{best[0]:.0f} ({best[1]}, {best[2]}) | {tf(t_proj):.0f} | {tf(t_cudnn):.0f} | "
              f"{t_cudnn / t_proj:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
