"""H200 check of lab/attn_fwd_gluon_pe.py and lab/attn_bwd_gluon_pe.py (the Gluon forward and
backward kernels with Dqk 192 / Dv 128): correctness first, then timing of what passed.

    python3 <this folder>/gpu_check.py [--no-bench]

(from the repository root, under a Python with Triton 3.8.0 and a CUDA torch). Exit status 0
only if every check passed; 1 if any failed; 2 if the environment cannot run it.

Check: out and lse, and dQ, dK, dV (each kernel on its own, from the shipped forward's lse and
delta = rowsum(dO * O)), against the float32 reference by the kernel tests' rule
(mha.reference.mismatch: the error at most twice that of the same math in bf16), on small
shapes in each config and on the d192 bench shape reduced to one head (mha.bench.reduced); the
backward kernels also bitwise equal across two runs.
Timing (mha.bench's do_bench medians, one process) on the bench shape: each forward config that
passed, the shipped forward (the `pe` bucket's Triton kernel) and cuDNN's; the shipped backward,
its dK/dV and dQ kernels' CUDA time (torch.profiler), each Gluon backward config that passed, and
cuDNN's backward. "projected" is the shipped backward with those two kernels' time replaced by
the fastest passing Gluon configs'.
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
    import attn_bwd_gluon_pe as GB
    import attn_fwd_gluon_pe as G
    import mha
    from mha import bench, reference
except Exception:  # noqa: BLE001
    traceback.print_exc()
    print("ENV: cannot import triton / mha / the Gluon kernel (needs Triton 3.8.0)")
    sys.exit(2)

# (B, Hq, Hk, Sq, Sk, causal), all Dqk 192 / Dv 128
SMALL = [(1, 1, 1, 128, 128, False), (1, 1, 1, 128, 128, True), (2, 4, 2, 256, 256, True),
         (2, 4, 4, 384, 384, False), (1, 2, 1, 256, 640, True), (1, 3, 1, 512, 256, False),
         (1, 2, 2, 1024, 1024, True)]
CONFIGS = [(128, 2), (64, 2), (64, 3)]       # (BLOCK_N, STAGES); 128 x 3 passes shared memory
BENCH = (1, 128, 128, 8192, 192, 128, True)
DKDV_CONFIGS = [(32, 2), (32, 3)]            # (BLOCK_M, STAGES): 64 spills a kilobyte (aot.py)
DQ_CONFIGS = [(64, 2), (64, 3)]              # (BLOCK_N, STAGES): 128 spills and passes shared memory


def check(b, hq, hk, sq, sk, causal, cfg, dtype=torch.bfloat16):
    gen = torch.Generator(device="cuda").manual_seed(sq + hq)
    q = torch.randn(b, sq, hq, 192, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(b, sk, hk, 192, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn(b, sk, hk, 128, device="cuda", dtype=dtype, generator=gen)
    scale = 192 ** -0.5
    try:
        out, lse = G.run(q, k, v, causal, scale, *cfg)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a failure is a finding
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
    exact = reference.attention(q, k, v, softmax_scale=scale, causal=causal, compute_dtype=torch.float32)
    lowp = reference.attention(q, k, v, softmax_scale=scale, causal=causal, compute_dtype=dtype)
    return (reference.mismatch("out", out, exact[0], lowp[0], dtype)
            or reference.mismatch("lse", lse, exact[1], lowp[1].float(), dtype))


def inputs(b, hq, hk, sq, sk, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed + sq + hq)
    mk = lambda s_, h, d: torch.randn(b, s_, h, d, device="cuda", dtype=dtype, generator=gen)   # noqa: E731
    return mk(sq, hq, 192), mk(sk, hk, 192), mk(sk, hk, 128), mk(sq, hq, 128)


def stats(q, k, v, do, causal):
    """lse and delta from the shipped forward, in the (B, Hq, Sq) float32 layout the kernels read."""
    out, lse = mha.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    return lse.contiguous(), (do.float() * out.float()).sum(-1).transpose(1, 2).contiguous()


def check_backward(b, hq, hk, sq, sk, causal, dkdv_cfg, dq_cfg, dtype=torch.bfloat16):
    """{"dkdv": what is wrong or None, "dq": likewise}."""
    q, k, v, do = inputs(b, hq, hk, sq, sk, dtype)
    scale = 192 ** -0.5
    lse, delta = stats(q, k, v, do, causal)
    grads = {}
    for compute in (torch.float32, dtype):
        leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
        ref, _ = reference.attention(*leaves, softmax_scale=scale, causal=causal, compute_dtype=compute)
        grads[compute] = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(ref, leaves, do.to(compute))))
    verdict = {}
    for kernel, run, cfg, names in (("dkdv", GB.run_dkdv, dkdv_cfg, ("dk", "dv")), ("dq", GB.run_dq, dq_cfg, ("dq",))):
        try:
            outs = [run(q, k, v, do, lse, delta, causal, scale, *cfg) for _ in range(2)]
            torch.cuda.synchronize()
            outs = [o if isinstance(o, tuple) else (o,) for o in outs]
            wrong = None if all(torch.equal(x, y) for x, y in zip(*outs)) else "not bitwise reproducible"
            for name, got in zip(names, outs[0]):
                wrong = wrong or reference.mismatch(name, got, grads[torch.float32][name], grads[dtype][name], dtype)
        except Exception as exc:  # noqa: BLE001 - a failure is a finding
            wrong = f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
        verdict[kernel] = wrong
    return verdict


def kernel_us(fn, reps=10):
    """CUDA time (us, mean over reps) per kernel name of fn, by torch.profiler."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    return {ev.key: (getattr(ev, "device_time_total", 0) or getattr(ev, "cuda_time_total", 0)) / reps
            for ev in prof.key_averages()}


def backward(passed_dkdv, passed_dq):
    from torch.nn.attention import SDPBackend
    flops = bench.flops(BENCH, True)
    ours = bench._ours(BENCH, True)
    t_ours = bench._time(ours) * 1e3
    shares = kernel_us(ours)
    t_dkdv = sum(t for name, t in shares.items() if "attn_bwd_dkdv" in name)
    t_dq = sum(t for name, t in shares.items() if "attn_bwd_dq" in name)
    b, hq, hk, s, _, _, causal = BENCH
    q, k, v, do = inputs(b, hq, hk, s, s)
    lse, delta = stats(q, k, v, do, causal)
    shipped = {"dkdv": t_dkdv, "dq": t_dq}
    best = {"dkdv": (t_dkdv, "shipped"), "dq": (t_dq, "shipped")}
    for name, run, cfgs in (("dkdv", GB.run_dkdv, passed_dkdv), ("dq", GB.run_dq, passed_dq)):
        for cfg in cfgs:
            us = bench._time(lambda: run(q, k, v, do, lse, delta, causal, 192 ** -0.5, *cfg)) * 1e3
            print(f"  gluon {name} {cfg}: {us:.0f} us (shipped {shipped[name]:.0f} us)", flush=True)
            best[name] = min(best[name], (us, str(cfg)))
    t_proj = t_ours - t_dkdv - t_dq + best["dkdv"][0] + best["dq"][0]
    t_cudnn = bench._time(bench._sdpa(BENCH, True, SDPBackend.CUDNN_ATTENTION)) * 1e3
    tf = lambda us: flops / us / 1e6      # noqa: E731
    print("| shape | mha bwd TFLOP/s | dkdv us | dq us | other us | gluon dkdv us | gluon dq us | projected TFLOP/s "
          "| cuDNN TFLOP/s | mha/cuDNN | projected/cuDNN |\n|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {bench.key(BENCH)} | {tf(t_ours):.0f} | {t_dkdv:.0f} | {t_dq:.0f} | {t_ours - t_dkdv - t_dq:.0f} | "
          f"{best['dkdv'][0]:.0f} {best['dkdv'][1]} | {best['dq'][0]:.0f} {best['dq'][1]} | {tf(t_proj):.0f} | "
          f"{tf(t_cudnn):.0f} | {t_cudnn / t_ours:.2f} | {t_cudnn / t_proj:.2f} |", flush=True)


def main():
    failed = {cfg: 0 for cfg in CONFIGS}
    b, hq, hk, s, _, _, causal = bench.reduced(BENCH)
    for cfg in CONFIGS:
        for shape in [*SMALL, (b, hq, hk, s, s, causal)]:
            wrong = check(*shape, cfg)
            failed[cfg] += wrong is not None
            print(f"check {shape} N{cfg[0]} s{cfg[1]}: {'ok' if wrong is None else 'WRONG ' + wrong}", flush=True)
    print("checks: " + ", ".join(f"N{c[0]} s{c[1]} {n} failed" for c, n in failed.items()), flush=True)
    passed = [cfg for cfg, n in failed.items() if n == 0]
    if passed and "--no-bench" not in sys.argv:
        q, k, v = bench._inputs(BENCH, False)
        flops = bench.flops(BENCH, False)
        tf = lambda ms: flops / ms / 1e9     # noqa: E731
        rows = [(f"gluon pe N{c[0]} s{c[1]}", lambda c=c: G.run(q, k, v, True, 192 ** -0.5, *c)) for c in passed]
        rows.append(("mha.flash_attn_func (shipped)", bench._ours(BENCH, False)))
        from torch.nn.attention import SDPBackend
        rows.append(("cuDNN", bench._sdpa(BENCH, False, SDPBackend.CUDNN_ATTENTION)))
        print(f"| {bench.key(BENCH)} forward | ms | TFLOP/s |\n|---|---|---|")
        for name, fn in rows:
            try:
                ms = bench._time(fn)
                print(f"| {name} | {ms:.3f} | {tf(ms):.0f} |", flush=True)
            except Exception as exc:  # noqa: BLE001
                print(f"| {name} | error {type(exc).__name__}: {' '.join(str(exc).split())[:300]} | |", flush=True)
    bwd_failed = {("dkdv", c): 0 for c in DKDV_CONFIGS} | {("dq", c): 0 for c in DQ_CONFIGS}
    for (dkdv_cfg, dq_cfg) in zip(DKDV_CONFIGS, DQ_CONFIGS):
        for shape in [*SMALL, (b, hq, hk, s, s, causal)]:
            try:
                verdict = check_backward(*shape, dkdv_cfg, dq_cfg)
            except Exception as exc:  # noqa: BLE001 - the reference or the forward itself failed
                verdict = {"dkdv": f"{type(exc).__name__}: {exc}", "dq": f"{type(exc).__name__}: {exc}"}
            for kernel, cfg in (("dkdv", dkdv_cfg), ("dq", dq_cfg)):
                bwd_failed[(kernel, cfg)] += verdict[kernel] is not None
                print(f"check {kernel} {shape} {cfg}: {'ok' if verdict[kernel] is None else 'WRONG ' + verdict[kernel]}",
                      flush=True)
    print("backward checks: " + ", ".join(f"{k} {c} {n} failed" for (k, c), n in bwd_failed.items()), flush=True)
    if "--no-bench" not in sys.argv:
        backward([c for c in DKDV_CONFIGS if not bwd_failed[("dkdv", c)]],
                 [c for c in DQ_CONFIGS if not bwd_failed[("dq", c)]])
    return 0 if not any(failed.values()) and not any(bwd_failed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
