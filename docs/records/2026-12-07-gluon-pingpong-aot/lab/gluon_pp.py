"""Lab (issue 39): the Gluon forward with and without ping-pong and the folded softmax scale
(lab/pingpong.patch applied), at d128 and at d64, against the Triton forward and cuDNN, in one
process on one GPU.

usage (from a checkout with the patch applied): python3 gluon_pp.py [ROUNDS]   (default 5)

Each candidate is a `gluon` config put into the loaded sm90 config file (mha.config's cache), or
none (the bucket's Triton forward), with mha.kernels.forward_gluon.PINGPONG and FOLD_SCALE set. Each one is first
checked by mha.bench.check (every output against a float32 reference, the kernel tests' rule),
then timed by do_bench, ROUNDS times, with the order reversed every other round. The table gives
medians and each one's ratio to the shipped form of its shape, from the same process. A launch
observer records what ran; a candidate whose launches do not match it is reported, not timed."""
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend

from mha import bench, config as cfgmod, launch
from mha.kernels import forward_gluon as fg

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
FILES = cfgmod.load_arch_configs("sm90")
SHIPPED_GLUON = dict(FILES["forward"]["default"]["gluon"])


def gluon(block_n, stages):
    return dict(SHIPPED_GLUON, BLOCK_N=block_n, num_stages=stages)


# (shape, bucket, [(name, gluon config or None, ping-pong, folded scale)]); the first entry is
# the shipped form.
D128 = [("gluon N128 s2 (shipped)", gluon(128, 2), False, False), ("+ fold", gluon(128, 2), False, True),
        ("+ ping-pong", gluon(128, 2), True, False), ("+ ping-pong + fold", gluon(128, 2), True, True)]
PLAN = [
    ((1, 64, 8, 8192, 128, 128, True), "default", D128 + [("triton", None, False, False)]),
    ((4, 32, 8, 4096, 128, 128, False), "default", D128),
    ((8, 48, 8, 2048, 64, 64, True), "small_head",
     [("triton (shipped)", None, False, False), ("gluon N128 s2", gluon(128, 2), False, False),
      ("gluon N128 s2 + ping-pong + fold", gluon(128, 2), True, True),
      ("gluon N128 s3 + ping-pong + fold", gluon(128, 3), True, True),
      ("gluon N64 s3 + ping-pong + fold", gluon(64, 3), True, True)]),
]

seen = []
launch.LAUNCH_OBSERVERS.append(lambda spec, kernel: seen.append(
    (spec.name, spec.constexprs.get("PINGPONG"), spec.constexprs.get("FOLD_SCALE"), spec.constexprs.get("BLOCK_N"),
     spec.num_stages)))


def select(bucket, cfg, pingpong, fold):
    section = FILES["forward"][bucket]
    section.pop("gluon", None)
    if cfg is not None:
        section["gluon"] = cfg
    fg.PINGPONG, fg.FOLD_SCALE = pingpong, fold
    launch._gluon_forward_spec.cache_clear()   # its key holds neither flag


def expected(cfg, pingpong, fold):
    return None if cfg is None else ("fwd_gluon", pingpong, fold, cfg["BLOCK_N"], cfg["num_stages"])


def main():
    print("triton", __import__("triton").__version__, "torch", torch.__version__, torch.cuda.get_device_name(),
          flush=True)
    rows = ["| shape | candidate | TFLOP/s (median of rounds) | rounds | / shipped | / cuDNN |", "|---|---|---|---|---|---|"]
    for shape, bucket, cands in PLAN:
        name = bench.key(shape)
        cudnn = bench._tflops(lambda: bench._sdpa(shape, False, SDPBackend.CUDNN_ATTENTION), shape, False)
        ok = []
        for cand, cfg, pp, fold in cands:
            select(bucket, cfg, pp, fold)
            seen.clear()
            wrong = bench.check(shape, False)
            ran = set(seen)
            want = expected(cfg, pp, fold)
            if wrong:
                print(f"{name} {cand}: WRONG: {wrong}", flush=True)
            elif want is not None and ran != {want}:
                print(f"{name} {cand}: launched {sorted(ran, key=str)}, not {want}: not timed", flush=True)
            elif want is None and any(r[0] == "fwd_gluon" for r in ran):
                print(f"{name} {cand}: launched the Gluon forward: not timed", flush=True)
            else:
                print(f"{name} {cand}: right ({sorted(ran, key=str)})", flush=True)
                ok.append((cand, cfg, pp, fold))
        times = {c[0]: [] for c in ok}
        for r in range(ROUNDS):
            for cand, cfg, pp, fold in (ok if r % 2 == 0 else ok[::-1]):
                select(bucket, cfg, pp, fold)
                t = bench._tflops(lambda: bench._ours(shape, False), shape, False)
                times[cand].append(t if isinstance(t, float) else float("nan"))
        base = statistics.median(times[ok[0][0]]) if ok and ok[0][0] == cands[0][0] else None
        for cand, *_ in ok:
            med = statistics.median(times[cand])
            rel = f"{med / base:.3f}" if base else "n/a"
            rows.append(f"| {name} | {cand} | {med:.0f} | {' '.join(f'{t:.0f}' for t in times[cand])} | {rel} | "
                        f"{(med / cudnn) if isinstance(cudnn, float) else float('nan'):.2f} |")
            print(rows[-1], flush=True)
        rows.append(f"| {name} | cuDNN | {cudnn if isinstance(cudnn, str) else f'{cudnn:.0f}'} | 1 | | |")
        print(rows[-1], flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
