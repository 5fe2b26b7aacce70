"""H200 check of the lab's Gluon backward kernels (attn_bwd_dkdv_gluon.py, attn_bwd_dq_gluon.py):
correctness first, then timing of what passed.

    python3 <this folder>/gpu_check.py [--no-bench]

(from the repository root, under a Python with Triton 3.8.0 and a CUDA torch). Exit status 0
only if every check passed; 1 if any failed; 2 if the environment cannot run it.

Check: lse and O from the project's forward (mha.flash_attn_func, return_lse), delta =
rowsum(dO * O) in float32, then the Gluon kernels' dK, dV and dQ against the float32 reference
gradients by the kernel tests' rule (mha.reference.mismatch: the error at most twice that of the
same math in bf16), and bitwise equal across two runs (no atomics: they must be reproducible).
Timing (triton.testing.do_bench medians, one process) on the bench shapes it can take: the
project's whole backward (autograd), its kernels' shares (torch.profiler, CUDA time per kernel
name), and the Gluon kernels; "projected" is the project's backward with its dK/dV and dQ
kernels' times replaced by the Gluon kernels', against cuDNN's backward in the same run.
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
    import attn_bwd_dq_gluon as GQ
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
# ((dK/dV BLOCK_M, STAGES), (dQ BLOCK_N, STAGES))
CONFIGS = [((64, 2), (64, 2)), ((64, 3), (128, 2))]
BENCH = [(8, 48, 8, 2048, 64, True), (1, 64, 8, 8192, 128, True), (4, 32, 8, 4096, 128, False)]


def inputs(b, hq, hk, sq, sk, d, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda s, h: torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    return mk(sq, hq), mk(sk, hk), mk(sk, hk), mk(sq, hq)


def forward_stats(q, k, v, do, causal):
    out, lse = mha.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    delta = (do.float() * out.float()).sum(-1).transpose(1, 2).contiguous()     # (B, Hq, Sq)
    return lse.contiguous(), delta


def _wrong(exc):
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"


def check(shape, cfg):
    """{"dq": what is wrong or None, "dkdv": likewise}: each kernel judged on its own outputs, so
    one kernel's failure does not hide the other's result."""
    b, hq, hk, sq, sk, d, causal = shape
    q, k, v, do = inputs(b, hq, hk, sq, sk, d)
    scale = d ** -0.5
    lse, delta = forward_stats(q, k, v, do, causal)
    grads = {}
    for compute in (torch.float32, torch.bfloat16):
        leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
        ref, _ = reference.attention(*leaves, causal=causal, compute_dtype=compute)
        grads[compute] = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(ref, leaves, do.to(compute))))
    verdict = {}
    for kernel, run, kcfg, names in (("dq", GQ.run, cfg[1], ("dq",)), ("dkdv", G.run, cfg[0], ("dk", "dv"))):
        try:
            outs = [run(q, k, v, do, lse, delta, causal, scale, *kcfg) for _ in range(2)]
            torch.cuda.synchronize()
            outs = [o if isinstance(o, tuple) else (o,) for o in outs]
            wrong = None if all(torch.equal(a, b) for a, b in zip(*outs)) else "not bitwise reproducible"
            for name, got in zip(names, outs[0]):
                wrong = wrong or reference.mismatch(name, got, grads[torch.float32][name],
                                                    grads[torch.bfloat16][name], torch.bfloat16)
        except Exception as exc:  # noqa: BLE001 - a failure is a finding
            wrong = _wrong(exc)
        verdict[kernel] = wrong
    return verdict


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
    failed = {"dq": 0, "dkdv": 0}
    cases = [(shape, cfg) for shape in SMALL for cfg in CONFIGS]
    cases += [((b, hq // hk, 1, s, s, d, causal), CONFIGS[0]) for b, hq, hk, s, d, causal in BENCH]
    for shape, cfg in cases:
        try:
            verdict = check(shape, cfg)
        except Exception as exc:  # noqa: BLE001 - the reference or the forward itself failed
            verdict = {"dq": _wrong(exc), "dkdv": _wrong(exc)}
        for kernel, wrong in verdict.items():
            failed[kernel] += wrong is not None
            print(f"check {kernel} {shape} {cfg}: {'ok' if wrong is None else 'WRONG ' + wrong}", flush=True)
    print(f"checks of {len(cases)} cases: dq {failed['dq']} failed, dkdv {failed['dkdv']} failed", flush=True)
    passed = [kernel for kernel, n in failed.items() if n == 0]
    if not passed or "--no-bench" in sys.argv:
        return 0 if not any(failed.values()) else 1

    # Only kernels that passed every check are timed; "projected" replaces only those.
    print("| shape | mha bwd TFLOP/s | dkdv us | dq us | other us | gluon dkdv us (M, stages) | gluon dq us "
          "(N, stages) | projected TFLOP/s | cuDNN TFLOP/s | mha/cuDNN | projected/cuDNN |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
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
        best = {"dkdv": (t_dkdv, "shipped"), "dq": (t_dq, "shipped")}
        for name, run, cfgs in (("dkdv", G.run, [c[0] for c in CONFIGS]), ("dq", GQ.run, [c[1] for c in CONFIGS])):
            if name not in passed:
                continue
            times = [(bench._time(lambda: run(q, k, v, do, lse, delta, causal, d ** -0.5, *cfg)) * 1e3, cfg)
                     for cfg in cfgs]
            best[name] = min(times)
        t_proj = t_ours - t_dkdv - t_dq + best["dkdv"][0] + best["dq"][0]
        try:
            from torch.nn.attention import SDPBackend
            t_cudnn = bench._time(bench._sdpa(bshape, True, SDPBackend.CUDNN_ATTENTION)) * 1e3
        except Exception as exc:  # noqa: BLE001
            print(f"  cuDNN: {exc}")
            t_cudnn = float("nan")
        tf = lambda us: flops / us / 1e6
        print(f"| {bench.key(bshape)} | {tf(t_ours):.0f} | {t_dkdv:.0f} | {t_dq:.0f} | {t_other:.0f} | "
              f"{best['dkdv'][0]:.0f} {best['dkdv'][1]} | {best['dq'][0]:.0f} {best['dq'][1]} | {tf(t_proj):.0f} | "
              f"{tf(t_cudnn):.0f} | {t_cudnn / t_ours:.2f} | {t_cudnn / t_proj:.2f} |", flush=True)
    return 0 if not any(failed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
