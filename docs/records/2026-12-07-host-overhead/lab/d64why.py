"""Lab (issue 39): why mha.bench and perf measure disagree on the d64 forward. Per shape and grid
(the policy's, one program per tile): do_bench's median (L2 flushed before each call), a median of
per-call CUDA events without the flush, 50 calls back to back over events, the kernel's own time
from torch.profiler, and the host's time per call while the GPU is held busy."""
import os, statistics, sys, time
import torch, triton, triton.testing
import mha
from mha import bench
from mha.kernels import forward_gluon
from mha.launch import _gluon_forward_problem  # noqa: F401  (import check only)

def events(fn, n=100):
    out = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); out.append(a.elapsed_time(b))
    return statistics.median(out)

def burst(fn, n=50):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(); a.record()
    for _ in range(n): fn()
    b.record(); torch.cuda.synchronize(); return a.elapsed_time(b) / n

def host(fn, n=100):
    torch.cuda.synchronize(); torch.cuda._sleep(int(2e9))  # ~1 s of GPU spin: the calls only queue
    t = time.perf_counter()
    for _ in range(n): fn()
    dt = (time.perf_counter() - t) / n * 1e3; torch.cuda.synchronize(); return dt

def kernel_ms(fn, n=20):
    try:
        return _kernel_ms(fn, n)
    except Exception as e:  # a profiler API difference must not cost the timings
        return f"profiler: {type(e).__name__}: {e}"

def _kernel_ms(fn, n):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(n): fn()
        torch.cuda.synchronize()
    ks = {}
    for e in p.events():
        if e.device_type.name == "CUDA":
            ks.setdefault(e.name, []).append(e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total)
    return {k[:40]: round(statistics.median(v) / 1e3, 4) for k, v in ks.items()}

from torch.nn.attention import SDPBackend
for k in sys.argv[1:] or ["b8_hq48_hk8_s2048_dqk64_dv64_c1", "b1_hq64_hk8_s8192_dqk128_dv128_c1"]:
    shape = bench.parse_key(k); fl = bench.flops(shape, False)
    q, kk, v = bench._inputs(shape, False)
    for grid in ("", "tiles", "132"):
        os.environ[forward_gluon.tile_schedule.PROGRAMS_ENV] = grid
        fn = lambda: mha.flash_attn_func(q, kk, v, causal=shape[6])
        fn(); torch.cuda.synchronize()
        r = dict(do_bench=triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"),
                 events=events(fn), burst=burst(fn), host=host(fn))
        print(k, f"grid={grid or 'policy'}", " ".join(f"{n}={ms:.4f}ms({fl / ms / 1e9:.0f}TF)" if n != "host" else f"host={ms:.4f}ms"
                                            for n, ms in r.items()), "kernels", kernel_ms(fn), flush=True)
    os.environ.pop(forward_gluon.tile_schedule.PROGRAMS_ENV)
    c = bench._sdpa(shape, False, SDPBackend.CUDNN_ATTENTION)
    r = dict(do_bench=triton.testing.do_bench(c, warmup=25, rep=100, return_mode="median"), events=events(c), burst=burst(c))
    print(k, "cudnn", " ".join(f"{n}={ms:.4f}ms({fl / ms / 1e9:.0f}TF)" for n, ms in r.items()), "kernels", kernel_ms(c), flush=True)
