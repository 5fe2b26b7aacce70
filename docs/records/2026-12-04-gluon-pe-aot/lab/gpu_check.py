"""H200 check of lab/attn_fwd_gluon_pe.py (the Gluon forward with Dqk 192 / Dv 128): correctness
first, then timing of what passed.

    python3 <this folder>/gpu_check.py [--no-bench]

(from the repository root, under a Python with Triton 3.8.0 and a CUDA torch). Exit status 0
only if every check passed; 1 if any failed; 2 if the environment cannot run it.

Check: out and lse against the float32 reference by the kernel tests' rule
(mha.reference.mismatch: the error at most twice that of the same math in bf16), on small
shapes in each config and on the d192 bench shape reduced to one head (mha.bench.reduced).
Timing (mha.bench's do_bench medians, one process) on the bench shape: each config that passed,
the project's shipped forward (mha.flash_attn_func, the `pe` bucket's Triton kernel) and
cuDNN's forward.
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
    import attn_fwd_gluon_pe as G
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
    return 0 if not any(failed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
