"""Benchmark: TFLOP/s of mha vs torch SDPA (cuDNN and flash backends), bf16, forward and backward.

    python -m mha.bench [--out FILE] [--shape KEY ...] [--sweep [--pass PASS]]

All columns come from one run on one GPU, so the ratios compare like with like. Times are
medians of triton.testing.do_bench. FLOPs: forward 2*B*Hq*Sq*Sk*(Dqk+Dv), halved for causal
(the flash-attn convention); backward 2.5x forward.

Before a config of mha is timed, its results are checked (`check`): a kernel that computes wrong
numbers is reported as wrong, not as fast (a miscompile can be faster than the right code:
docs/records/2026-12-01-h200-ws-forward).
"""
from __future__ import annotations

import argparse
import re
import sys

import torch

# (batch, Hq, Hk, S, Dqk, Dv, causal), from docs/facts.md.
SHAPES = [
    (1, 128, 128, 8192, 192, 128, True),
    (8, 48, 8, 2048, 64, 64, True),
    (1, 64, 8, 8192, 128, 128, True),
    (4, 32, 8, 4096, 128, 128, False),
]
FWD_SWEEP = [dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)
             for bm, bn, w, s in [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (128, 128, 8, 2),
                                  (128, 64, 8, 4), (128, 128, 4, 2), (64, 64, 4, 4), (128, 32, 4, 4)]]
# The warp-specialized forward (mha.kernels.forward_ws, sm90): 4 warps, the pass adds the producer
# group, and a 128-row tile gets two consumer groups (one of 64 rows on the causal shapes: the
# guard ws-two-consumer-groups-band-or-dropout); 3 stages run as 2 before Triton 3.8.
FWD_WS_SWEEP = [dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=4, num_stages=s, warp_specialize=True)
                for bm, bn, s in [(128, 128, 2), (128, 64, 2), (128, 128, 1), (128, 64, 3), (64, 128, 2)]]
SWEEPS = {"forward": FWD_SWEEP + FWD_WS_SWEEP, "forward-ws": FWD_WS_SWEEP}
BWD_SWEEP = [dict(BLOCK_M1=m1, BLOCK_N1=n1, BLOCK_M2=m2, BLOCK_N2=n2, num_warps=w, num_stages=s)
             for m1, n1, m2, n2, w, s in [(32, 128, 128, 32, 4, 3), (32, 128, 128, 32, 8, 3),
                                          (64, 128, 128, 64, 8, 2), (64, 64, 64, 64, 4, 3),
                                          (32, 64, 64, 32, 4, 3)]]
# Smaller tiles for the small-head buckets (Dv <= 64), whose backward trailed cuDNN most under 3.4.
BWD_SMALL_HEAD_SWEEP = [dict(BLOCK_M1=m1, BLOCK_N1=n1, BLOCK_M2=m2, BLOCK_N2=n2, num_warps=w, num_stages=s)
                        for m1, n1, m2, n2, w, s in [(32, 128, 128, 32, 4, 2), (64, 128, 128, 64, 4, 2),
                                                     (64, 128, 128, 64, 8, 3), (32, 64, 64, 64, 4, 3),
                                                     (64, 64, 128, 64, 4, 3), (16, 64, 64, 32, 4, 4)]]
# The single-pass backward (docs/configs.md): its kernel takes BLOCK_M1/N1 (BLOCK_M2 sizes only the
# preprocess kernel's rows); bench calls use the API's default, deterministic=False.
BWD_SINGLE_PASS_SWEEP = [dict(BLOCK_M1=m1, BLOCK_N1=n1, BLOCK_M2=64, BLOCK_N2=64, num_warps=w, num_stages=s,
                              single_pass=True)
                         for m1, n1, w, s in [(32, 128, 8, 3), (64, 128, 8, 2), (32, 64, 4, 3), (64, 64, 4, 3),
                                              (16, 128, 8, 3)]]
SWEEPS["backward"] = BWD_SWEEP
SWEEPS["backward-small-head"] = BWD_SMALL_HEAD_SWEEP
SWEEPS["backward-single-pass"] = BWD_SINGLE_PASS_SWEEP


def flops(shape, backward: bool) -> float:
    b, hq, _hk, s, dqk, dv, causal = shape
    f = 2.0 * b * hq * s * s * (dqk + dv) * (0.5 if causal else 1.0)
    return f * 2.5 if backward else f


def key(shape) -> str:
    b, hq, hk, s, dqk, dv, causal = shape
    return f"b{b}_hq{hq}_hk{hk}_s{s}_dqk{dqk}_dv{dv}_c{int(causal)}"


def _inputs(shape, requires_grad: bool, device="cuda", dtype=torch.bfloat16):
    b, hq, hk, s, dqk, dv, _ = shape
    gen = torch.Generator(device=device).manual_seed(0)
    mk = lambda h, d: torch.randn(b, s, h, d, device=device, dtype=dtype, generator=gen).requires_grad_(requires_grad)
    return mk(hq, dqk), mk(hk, dqk), mk(hk, dv)


def reduced(shape):
    """One KV head and its query group: the same kernels, tiles and rows per program as `shape`,
    with a reference small enough to hold (the float32 scores of b1 hq128 s8192 would not be)."""
    b, hq, hk, s, dqk, dv, causal = shape
    return (b, hq // hk, 1, s, dqk, dv, causal)


def check(shape, backward: bool, config=None, device="cuda", dtype=torch.bfloat16) -> str | None:
    """None when mha's results for `shape` (reduced) are right, else what is wrong: every output
    (and gradient) against a float32 reference by the kernel tests' rule (reference.mismatch)."""
    import mha
    from mha import reference

    shape = reduced(shape)
    q, k, v = _inputs(shape, backward, device, dtype)
    out = mha.flash_attn_func(q, k, v, causal=shape[6], config=config)
    do = torch.randn_like(out)
    got = [out] + (list(torch.autograd.grad(out, (q, k, v), do)) if backward else [])
    refs = {}
    for compute in (torch.float32, dtype):
        leaves = [t.detach().requires_grad_(backward) for t in (q, k, v)]
        ref, _ = reference.attention(*leaves, causal=shape[6], compute_dtype=compute)
        refs[compute] = [ref] + (list(torch.autograd.grad(ref, leaves, do.to(compute))) if backward else [])
    for name, ours, exact, lowp in zip(("out", "dq", "dk", "dv"), got, refs[torch.float32], refs[dtype]):
        wrong = reference.mismatch(name, ours, exact, lowp, dtype)
        if wrong:
            return wrong
    return None


def _time(fn) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _ours(shape, backward: bool, config=None):
    import mha

    q, k, v = _inputs(shape, backward)
    call = lambda: mha.flash_attn_func(q, k, v, causal=shape[6], config=config)
    if not backward:
        return call
    out = call()
    do = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)


def _sdpa(shape, backward: bool, backend):
    from torch.nn.attention import sdpa_kernel
    import torch.nn.functional as F

    q, k, v = _inputs(shape, backward)
    group = shape[1] // shape[2]
    # SDPA takes (B, H, S, D); expand the KV heads once outside the timing (cuDNN has no GQA path
    # in every torch build).
    qt = q.transpose(1, 2)
    kt = k.repeat_interleave(group, dim=2).transpose(1, 2) if group > 1 else k.transpose(1, 2)
    vt = v.repeat_interleave(group, dim=2).transpose(1, 2) if group > 1 else v.transpose(1, 2)

    def call():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=shape[6])

    call()  # raises when the backend has no kernel for this shape
    if not backward:
        return call
    out = call()
    do = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)


def _tflops(make, shape, backward, verify=None):
    """TFLOP/s; None when the backend has no kernel for the shape; "wrong" when `verify` (a
    call returning what is wrong, or None) finds the results wrong, and then nothing is timed."""
    try:
        wrong = verify() if verify else None
        if wrong:
            print(f"  {key(shape)} {'bwd' if backward else 'fwd'}: wrong: {wrong}", file=sys.stderr)
            return "wrong"
        fn = make()
        ms = _time(fn)
    except Exception as e:  # a backend without a kernel for the shape
        print(f"  {key(shape)} {'bwd' if backward else 'fwd'}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
        return None
    return flops(shape, backward) / (ms * 1e-3) / 1e12


KEY_FORM = re.compile(r"b(\d+)_hq(\d+)_hk(\d+)_s(\d+)_dqk(\d+)_dv(\d+)_c([01])")


def parse_key(text: str):
    """The shape a key names (mha.bench.key's form), or None when `text` is not of that form or
    its query heads are not a multiple of its key heads."""
    m = KEY_FORM.fullmatch(text)
    if not m:
        return None
    b, hq, hk, s, dqk, dv, c = (int(g) for g in m.groups())
    if min(b, hq, hk, s, dqk, dv) < 1 or hq % hk:
        return None
    return (b, hq, hk, s, dqk, dv, bool(c))


def chosen_shapes(keys: list[str] | None) -> list:
    """SHAPES, or the shapes `keys` name (mha.bench.key's form; any such shape, not only the
    table's), in the order given."""
    if not keys:
        return SHAPES
    shapes = [parse_key(k) for k in keys]
    unknown = [k for k, s in zip(keys, shapes) if s is None]
    if unknown:
        raise ValueError(f"unknown shape(s) {', '.join(unknown)}: a key is b<B>_hq<Hq>_hk<Hk>_s<S>_dqk<D>_dv<D>_c<0|1> "
                         f"with Hq a multiple of Hk, e.g. {key(SHAPES[1])}")
    return shapes


def table(shapes=SHAPES) -> str:
    from torch.nn.attention import SDPBackend

    rows = ["| shape | pass | mha TFLOP/s | cuDNN TFLOP/s | flash TFLOP/s | mha/cuDNN | mha/flash |",
            "|---|---|---|---|---|---|---|"]
    fmt = lambda x: "n/a" if x is None else x if isinstance(x, str) else f"{x:.0f}"
    ratio = lambda a, b: "n/a" if not isinstance(a, float) or b is None else f"{a / b:.2f}"
    for shape in shapes:
        for backward in (False, True):
            ours = _tflops(lambda: _ours(shape, backward), shape, backward, lambda: check(shape, backward))
            cudnn = _tflops(lambda: _sdpa(shape, backward, SDPBackend.CUDNN_ATTENTION), shape, backward)
            flash = _tflops(lambda: _sdpa(shape, backward, SDPBackend.FLASH_ATTENTION), shape, backward)
            rows.append(f"| {key(shape)} | {'bwd' if backward else 'fwd'} | {fmt(ours)} | {fmt(cudnn)} | "
                        f"{fmt(flash)} | {ratio(ours, cudnn)} | {ratio(ours, flash)} |")
            print(rows[-1], flush=True)
    return "\n".join(rows)


def sweep(passes=("forward", "backward"), shapes=SHAPES) -> str:
    """Per-config TFLOP/s of mha alone (to choose the sm90 JSON values)."""
    rows = ["| shape | pass | config | TFLOP/s |", "|---|---|---|---|"]
    chosen = [(p.startswith("backward"), SWEEPS[p]) for p in passes]
    for shape in shapes:
        for backward, cands in chosen:
            for cfg in cands:
                override = {"backward" if backward else "forward": cfg}
                t = _tflops(lambda: _ours(shape, backward, override), shape, backward,
                            lambda: check(shape, backward, override))
                shown = "fail" if t is None else t if isinstance(t, str) else f"{t:.0f}"
                rows.append(f"| {key(shape)} | {'bwd' if backward else 'fwd'} | {cfg} | {shown} |")
                print(rows[-1], flush=True)
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mha.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the markdown table to this file")
    ap.add_argument("--sweep", action="store_true", help="time candidate configs of each pass instead")
    ap.add_argument("--pass", dest="passes", choices=sorted(SWEEPS), action="append",
                    help="with --sweep: only these candidates (repeatable; default forward and backward; "
                         "forward-ws: the warp-specialized forward ones; backward-small-head: smaller tiles; "
                         "backward-single-pass: the single-pass backward)")
    ap.add_argument("--shape", dest="shapes", action="append", metavar="KEY",
                    help="only this shape (repeatable), named as in the table (any shape of that form), "
                         "e.g. b8_hq48_hk8_s2048_dqk64_dv64_c1")
    args = ap.parse_args(argv)
    if args.passes and not args.sweep:
        ap.error("--pass goes with --sweep")
    try:
        shapes = chosen_shapes(args.shapes)
    except ValueError as e:
        ap.error(str(e))
    if not torch.cuda.is_available():
        print("mha.bench needs a CUDA GPU", file=sys.stderr)
        return 3
    import triton

    header = (f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
              "bf16, TFLOP/s from do_bench medians\n\n")
    text = header + (sweep(tuple(args.passes or ("forward", "backward")), shapes) if args.sweep else table(shapes)) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
