"""Compile a perf run's kernels before it is timed, on several processes at once.

    python -m mha_ci.payloads.perf_precompile --shapes shapes.json --indices 0,4,8 [--kernel mha] [--device cuda]

Why: the first call of every shape JIT-compiles its kernels one after the other in the timing
process, and in an A/B turn by turn with the other side: on a cold Triton cache (a fresh GPU
runner) much of the pull-request perf job (docs/perf-method.md). Here, workers make each
shape's call once, which fills Triton's on-disk cache (TRITON_CACHE_DIR, inherited, so the
timing process's own), then exit; the timing process's first call of a shape then loads its
kernels instead of compiling them. The inputs are made the timing process's way
(mha_ci.payloads.perf.make_inputs), so the JIT specializes the same.

It times nothing and decides nothing: a shape that fails here is measured, and fails with its
error, in the timing process as before. A failed or slow worker costs time, never a result.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

# A worker that takes longer is stopped; the timing process compiles what is left itself.
WORKER_TIMEOUT_S = 600.0
# A worker's note about one shape on stderr: NOTE + key + what happened.
NOTE = "precompile: "
LEFT_FOR_MEMORY = ": left to the timing process (memory)"


def shares(count: int, workers: int) -> list[list[int]]:
    """Shape indices 0..count-1 dealt round-robin to at most `workers` workers (none empty):
    neighbouring shapes of a workload file are often of one bucket, so dealing spreads the
    distinct kernels over the workers."""
    workers = max(1, min(workers, count))
    return [list(range(w, count, workers)) for w in range(workers)] if count else []


# Bytes an element of each dtype the shapes name takes.
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def footprint_bytes(shape: dict) -> int:
    """A generous estimate of the device memory one shape's call takes: q, k, v (made in float32
    first, then cast), the output, and for a backward step dout and the gradients with a float32
    dq sum."""
    el = DTYPE_BYTES.get(shape.get("dtype", "bf16"), 4)
    b, sq, sk, hq, hk = shape["batch"], shape["sq"], shape["sk"], shape["hq"], shape["hk"]
    q, k, v = b * sq * hq * shape["dqk"], b * sk * hk * shape["dqk"], b * sk * hk * shape["dv"]
    out = b * sq * hq * shape["dv"]
    total = (q + k + v + out) * el + max(q, k, v) * 4
    if shape.get("pass", "fwd") == "bwd":
        total += (q + k + v + 2 * out) * el + q * 4
    return total


def fits(shape: dict, free_bytes: int, share: float = 0.5) -> bool:
    """Whether a worker should make this shape's call now: its footprint within `share` of the
    device memory free at the moment (the other workers hold the rest). A shape left out is
    compiled by the timing process, alone on the device, as without precompiling."""
    return footprint_bytes(shape) <= share * free_bytes


def precompile(shapes_path: str, indices: list[int], workers: int, kernel: str, device: str,
               timeout_s: float = WORKER_TIMEOUT_S) -> dict:
    """Run the workers over `indices` (positions in the shapes file) and wait for them; returns
    {"shapes", "workers", "seconds", "failed": [worker exit notes]}. Never raises for a worker."""
    start = time.monotonic()
    parts = [[indices[i] for i in share] for share in shares(len(indices), workers)]
    procs = []
    for part in parts:
        cmd = [sys.executable, "-m", "mha_ci.payloads.perf_precompile", "--shapes", shapes_path,
               "--indices", ",".join(map(str, part)), "--kernel", kernel, "--device", device]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    failed, left_out = [], []
    for proc in procs:
        left = max(1.0, timeout_s - (time.monotonic() - start))
        try:
            _, err = proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            failed.append(f"a worker ran past {timeout_s:.0f} s and was stopped")
            continue
        left_out += shapes_left_out(err or "")
        if proc.returncode != 0:
            failed.append(f"a worker exited {proc.returncode}: {(err or '').strip().splitlines()[-1:]}")
    return {"shapes": len(indices), "workers": len(procs), "seconds": round(time.monotonic() - start, 1),
            "failed": failed, "left_out": sorted(left_out)}


def shapes_left_out(worker_stderr: str) -> list[str]:
    """The keys of the shapes a worker left to the timing process for memory (its stderr notes)."""
    return [line[len(NOTE):-len(LEFT_FOR_MEMORY)] for line in worker_stderr.splitlines()
            if line.startswith(NOTE) and line.endswith(LEFT_FOR_MEMORY)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mha_ci.payloads.perf_precompile")
    p.add_argument("--shapes", required=True)
    p.add_argument("--indices", required=True, help="comma-separated positions in the shapes file")
    p.add_argument("--kernel", default="mha")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = p.parse_args(argv)
    # As the timing process: the code objects it will look up are compiled without line info.
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    from mha_ci.payloads import out_path, perf  # the timing process's own input and call makers

    shapes = json.loads(out_path(args.shapes).read_text())["shapes"]
    import torch  # toolchain only

    failures = 0
    with torch.no_grad():
        for index in (int(i) for i in args.indices.split(",") if i):
            shape = shapes[index]["shape"]
            if args.device == "cuda" and not fits(shape, torch.cuda.mem_get_info()[0]):
                print(f"{NOTE}{shapes[index]['key']}{LEFT_FOR_MEMORY}", file=sys.stderr)
                continue
            try:
                inputs = perf.make_inputs(torch, shape, args.device, index)
                perf.kernel_call(args.kernel, shape)(torch, shape, inputs)()
                if args.device == "cuda":
                    torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - the timing process records each shape's error
                failures += 1
                print(f"{NOTE}{shapes[index]['key']}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
            finally:
                inputs = {}
                if args.device == "cuda":
                    torch.cuda.empty_cache()
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
