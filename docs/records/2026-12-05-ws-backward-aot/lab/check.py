"""Check lab/attn_bwd_ws.py against a float64 reference; on a GPU, also time its dK/dV kernel.

    TRITON_INTERPRET=1 PYTHONPATH=src <toolchain python> <this folder>/check.py      # CPU: fp16
    PYTHONPATH=src python3 <this folder>/check.py --gpu [--no-bench]                # GPU: fp16 and bf16

The rule is the kernel tests' (mha.reference.mismatch): the error against the float64 reference
may be at most twice that of the same math done by torch in the input dtype, or a small floor.
The interpreter runs the kernels without warp specialization and its bf16 dot is wrong on its
own, so on the CPU this checks the kernels' arithmetic in fp16, in one config each. On the GPU
the kernels run warp-specialized, in each config of DKDV_CONFIGS and DQ_CONFIGS, and two runs must
give the same bits.

Timing (GPU; triton.testing medians through mha.bench's helpers, one process), on the bench shapes
the kernels can take: the project's backward (autograd) and the CUDA time of its dK/dV and dQ
kernels (torch.profiler), each lab kernel's best config, "projected" = the project's backward with
those two times replaced by the lab kernels', and cuDNN's backward. Exit 0 only if every check
passed.
"""
import math
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import triton  # noqa: E402

import attn_bwd_ws as W  # noqa: E402
from mha.reference import mismatch  # noqa: E402

CASES = [  # batch, sq, sk, heads_k, group, head (Dqk; Dv is 128 for 192), causal
    (2, 256, 384, 2, 2, 64, True),
    (2, 256, 256, 2, 2, 64, False),
    (1, 384, 256, 1, 3, 128, True),
    (1, 256, 512, 2, 1, 128, True),
    (1, 256, 256, 1, 2, 128, False),
    (1, 256, 384, 2, 1, 192, True),
    (1, 1024, 1024, 1, 4, 128, True),
    (1, 512, 512, 2, 1, 192, False),
]
DKDV_CONFIGS = [(32, 2), (32, 3), (64, 2)]      # (BLOCK_M, stages)
DQ_CONFIGS = [(64, 2), (64, 3), (128, 2)]        # (BLOCK_N, stages)
BENCH = [(1, 128, 128, 8192, 192, True), (8, 48, 8, 2048, 64, True), (1, 64, 8, 8192, 128, True),
         (4, 32, 8, 4096, 128, False)]


def reference(q, k, v, do, causal, dtype):
    """out, lse (natural log), dQ, dK, dV computed in `dtype`; q (B, Sq, Hq, D), k/v (B, Sk, Hk, D)."""
    group = q.shape[2] // k.shape[2]
    qf, kf, vf, dof = (t.to(dtype).transpose(1, 2) for t in (q, k, v, do))
    qf = qf.detach().requires_grad_(True)
    kf, vf = (t.repeat_interleave(group, 1).detach().requires_grad_(True) for t in (kf, vf))
    s = qf @ kf.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        seen = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + (sk - sq)
        s = s.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(s, -1)
    # A query that sees no key (Sq > Sk, causal) has output 0, as flash-attn's.
    out = torch.softmax(s, -1).nan_to_num(0.0) @ vf
    dq, dk, dv = torch.autograd.grad(out, (qf, kf, vf), dof)
    fold = lambda t: t.unflatten(1, (k.shape[2], group)).sum(2).transpose(1, 2)   # noqa: E731
    return out.transpose(1, 2).detach(), lse.detach(), dq.transpose(1, 2), fold(dk), fold(dv)


def check(case, dtype, device) -> list[str]:
    """One line per kernel run: its max error and verdict."""
    batch, sq, sk, hk, group, head, causal = case
    dv = min(head, 128)
    gen = torch.Generator().manual_seed(sum(case[:6]))
    q, do = (torch.randn(batch, sq, hk * group, d, generator=gen).to(dtype) for d in (head, dv))
    k, v = (torch.randn(batch, sk, hk, d, generator=gen).to(dtype) for d in (head, dv))
    out, lse, *exact = reference(q, k, v, do, causal, torch.float64)
    low = reference(q, k, v, do, causal, dtype)[2:]
    delta = (out * do.double()).sum(-1).transpose(1, 2).float().contiguous().to(device)     # (B, Hq, Sq)
    lse = lse.float().contiguous().to(device)
    q, k, v, do = (t.to(device).contiguous() for t in (q, k, v, do))
    scale = 1 / math.sqrt(head)
    gpu = device == "cuda"
    runs = [(f"dkdv{cfg}", lambda cfg=cfg: W.run_dkdv(q, k, v, do, lse, delta, causal, scale, *cfg), ("dK", "dV"))
            for cfg in (DKDV_CONFIGS if gpu else DKDV_CONFIGS[:1])]
    if head == dv:      # the lab dQ kernel has no split head dim
        runs += [(f"dq{cfg}", lambda cfg=cfg: (W.run_dq(q, k, v, do, lse, delta, causal, scale, *cfg),), ("dQ",))
                 for cfg in (DQ_CONFIGS if gpu else DQ_CONFIGS[:1])]
    lines = []
    for label, run, names in runs:
        try:
            got = run()
            wrong = None
            if gpu and not all(torch.equal(a, b) for a, b in zip(got, run())):
                wrong = "not bitwise reproducible"
            refs = dict(zip(("dQ", "dK", "dV"), zip(exact, low)))
            for name, g in zip(names, got):
                wrong = wrong or mismatch(name, g.cpu(), refs[name][0], refs[name][1], dtype)
            err = max((g.cpu().double() - refs[n][0]).abs().max().item() for n, g in zip(names, got))
            lines.append(f"{label} max|err| {err:.2e} " + (f"WRONG ({wrong})" if wrong else "ok"))
        except Exception as exc:  # noqa: BLE001 - a failure is a finding
            lines.append(f"{label} WRONG ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})")
    return lines


def kernel_time(fn, name: str, reps: int = 10) -> float:
    """CUDA time (us, mean over reps) of the kernels whose name contains `name`, by torch.profiler."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    return sum((getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0))
               for ev in prof.key_averages() if name in ev.key) / reps


def bench_rows() -> None:
    import mha
    from mha import bench
    from torch.nn.attention import SDPBackend

    print("| shape | mha bwd TFLOP/s | mha dK/dV us | lab dK/dV us (BLOCK_M, stages) | mha dQ us | "
          "lab dQ us (BLOCK_N, stages) | projected TFLOP/s | cuDNN TFLOP/s | mha/cuDNN | projected/cuDNN |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for b, hq, hk, s, d, causal in BENCH:
        dv = min(d, 128)
        shape = (b, hq, hk, s, d, dv, causal)
        flops = bench.flops(shape, True)
        ours = bench._ours(shape, True)
        t_ours = bench._time(ours) * 1e3
        t_dkdv = kernel_time(ours, "attn_bwd_dkdv")
        t_dq = kernel_time(ours, "attn_bwd_dq")
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(b, s, h, dh, device="cuda", dtype=torch.bfloat16, generator=gen)
                       for h, dh in ((hq, d), (hk, d), (hk, dv), (hq, dv)))
        out, lse = mha.flash_attn_func(q, k, v, causal=causal, return_lse=True)
        delta = (do.float() * out.float()).sum(-1).transpose(1, 2).contiguous()
        args = (q, k, v, do, lse.contiguous(), delta, causal, d ** -0.5)
        lab = min((bench._time(lambda cfg=cfg: W.run_dkdv(*args, *cfg)) * 1e3, cfg) for cfg in DKDV_CONFIGS)
        lab_dq = (min((bench._time(lambda cfg=cfg: W.run_dq(*args, *cfg)) * 1e3, cfg) for cfg in DQ_CONFIGS)
                  if d == dv else (t_dq, "the project's"))
        t_proj = t_ours - t_dkdv - t_dq + lab[0] + lab_dq[0]
        t_cudnn = bench._time(bench._sdpa(shape, True, SDPBackend.CUDNN_ATTENTION)) * 1e3
        tf = lambda us: flops / us / 1e6    # noqa: E731
        print(f"| {bench.key(shape)} | {tf(t_ours):.0f} | {t_dkdv:.0f} | {lab[0]:.0f} {lab[1]} | {t_dq:.0f} | "
              f"{lab_dq[0]:.0f} {lab_dq[1]} | {tf(t_proj):.0f} | "
              f"{tf(t_cudnn):.0f} | {t_cudnn / t_ours:.2f} | {t_cudnn / t_proj:.2f} |", flush=True)


def main() -> int:
    gpu = "--gpu" in sys.argv
    device = "cuda" if gpu else "cpu"
    if gpu:
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    bad = 0
    for dtype in ((torch.float16, torch.bfloat16) if gpu else (torch.float16,)):
        for case in CASES if gpu else CASES[:6]:
            lines = check(case, dtype, device)
            bad += sum("WRONG" in x for x in lines)
            print(f"{str(dtype)[6:]:8} b{case[0]} sq{case[1]} sk{case[2]} hk{case[3]} g{case[4]} d{case[5]} "
                  f"{'causal' if case[6] else 'full  '}: " + "; ".join(lines), flush=True)
    print(f"triton {triton.__version__} on {device}: {bad} wrong", flush=True)
    if gpu and not bad and "--no-bench" not in sys.argv:
        bench_rows()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
