"""Perf payload: time every shape of a shapes file on one GPU, write a mha-ci.perf/1 document.

    python -m mha_ci.payloads.perf --shapes shapes.json --method method.json --out perf.json
        [--kernel mha|sdpa] [--device cuda|cpu] [--toolchain NAME] [--executor E]
        [--image-digest D] [--commit SHA] [--chunk I/N] [--keys GLOB,...]
        [--dump-dispatches dispatches.json] [--lockstep DIR:ROLE] [--numerics [--save-outputs DIR]]

Inputs are JSON made on the orchestrating side (`mha-ci perf shapes`), because toolchain
environments have neither pydantic nor yaml. Relative paths resolve against $MHA_CI_OUT.

A shape times one pass (`shape["pass"]`, mha_ci.perf.shapes): "fwd" times the forward call;
"bwd" times the whole backward step of the package - every launch it makes (preprocess, dK/dV,
dQ) and the dsink reduction where a sink is given - as `torch.autograd.grad` of the output,
which is what a training step runs. Inputs, the forward and `dout` are made once per shape,
outside the timing; the graph is kept between dispatches (retain_graph), so each dispatch is one
backward of the same forward.

Code-object identity: every result records the sha256 of each compiled kernel its timed call
launched (`code_objects`, {kernel name: sha256}, through mha.launch.LAUNCH_OBSERVERS). Line info
is off (TRITON_DISABLE_LINE_INFO=1, as the checksums compile), so the hashes do not depend on
the checkout's path: two checkouts whose kernels for a shape are the same code have the same
hashes, and a refresh or an `--against` knows which shapes' kernels a change left alone.

How one shape is measured (numbers from the method file):
- inputs are random normal (seeded per shape), never zeros: zero inputs make exp() and the
  matmuls take shortcuts on some hardware and are not what serving sees;
- `warmup` dispatches, each synchronised; the first includes the JIT compile (its wall time is
  kept as `first_call_s`); their median estimates the dispatch time, from which the dispatches
  per rep are cut down so the shape's timed work stays within `max_seconds_per_shape`;
- `reps` reps of N dispatches. Each dispatch sits between its own pair of CUDA events. Before a
  rep a spin kernel (torch.cuda._sleep) holds the GPU for as long as the host needs to enqueue
  the whole rep, so the GPU finds the queue full and the events measure kernel time, not
  Python launch latency (a 20 us decode kernel launched from Python would otherwise read as
  its launch overhead). The mha varlen wrapper reads cu_seqlens on the host to validate them,
  which synchronises every dispatch: varlen times include one host launch latency (a few us),
  the same way on both sides of any comparison;
- stats come from mha_ci.perf.stats (standard library; the orchestrating side recomputes them
  from `--dump-dispatches` files with the same code).

L2 policy: no flush between dispatches (method `l2_flush: false`). Every prefill shape's
working set (Q, K, V and O of 8192-token sequences: hundreds of MB) is far beyond the H200's
L2 (about 50 MB), so a flush would change nothing there; decode and small test shapes (a few
MB to ~40 MB) fit, and are timed warm, as they run in a decode loop that re-reads one layer's
cache back to back. This understates their cold-cache time, identically on both sides of a
comparison. `l2_flush: true` writes a 256 MB buffer before every dispatch, outside the events.

Memory layout (method `relayout: true`): each rep after the first runs on inputs made anew
(same seed, same values) behind a pad allocation of a seeded size, after the allocator's cache
is emptied, and gets RELAYOUT_WARMUP untimed dispatches first. Where a shape's time depends on
where its tensors landed in device memory, one layout per process holds the whole run at that
placement's time, an offset between two processes that no number of reps shows; with a layout
per rep the offset becomes rep-to-rep spread, which the noise, the threshold and the interval
see. What it costs and what it changed on the H200: docs/perf-method.md, "Memory layout".

Planted slowdown (to check that the gate catches what it should): MHA_PERF_PLANT_SLOWDOWN=5
adds a spin kernel of 5 % of the shape's warm-up median inside every timed dispatch (after the
attention kernel); MHA_PERF_PLANT_KEYS=glob,glob limits it to matching keys. The percentage
is recorded in the provenance and per result, so a planted run is never mistaken for a
baseline. Each planted spin is one extra launch; its fixed cost on a full queue (launch gap and
kernel start, about 1.5 us behind a kernel on an H200) is measured once per process and taken
off the spin; on shapes where that cost alone exceeds the planted amount (under ~32 us at 5 %)
the slowdown overshoots (the calibrate report shows the realised delta). How the plant is sized,
and the measurements behind each choice: docs/perf-method.md, "Planted slowdowns".

Numerics (`--numerics`, kernel mha): after a shape's timing, and inside its turn, the shape runs
once more on inputs seeded by its key, and its record gains `numerics`: the sha256 of every
output and each output's error against a float64 reference (mha_ci.payloads.numerics);
`--save-outputs DIR` also keeps the outputs, for `perf measure --against` to compare bit by bit.

Interleaving (`--lockstep DIR:a` and `--lockstep DIR:b`, two processes, usually two
toolchains, on one GPU): the two take turns shape by shape in ABBA order; see
mha_ci.perf.lockstep.

Exit status: 0 results written (shapes that failed carry "error"), 3 pin mismatch or no GPU,
4 no shape could be measured.
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import hashlib
import importlib
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

from mha_ci.files import write_atomic
from mha_ci.payloads import EXIT_ENVIRONMENT, EXIT_NO_RESULT, EXIT_OK, numerics, out_path, pincheck
from mha_ci.perf import lockstep
from mha_ci.perf import provenance as prov
from mha_ci.perf.document import DISPATCHES_SCHEMA, SCHEMA, SHAPES_SCHEMA
from mha_ci.perf.shapes import CONFIG_PASS
from mha_ci.perf.stats import Method, dispatches_per_rep, shape_stats

ROOT = Path(__file__).resolve().parents[3]
_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
L2_FLUSH_BYTES = 256 * 2**20
# Longest time the pre-rep spin may hold the GPU (a rep enqueues at most `dispatches` calls).
MAX_HOLD_US = 200_000
# Shortest planted spin (us): one clock cycle's worth, so that a planted shape always gets one.
MIN_PLANT_US = 0.001
# Relayout: untimed dispatches on a rep's fresh inputs before it is timed, and the pad's grain
# and largest size (a pad in whole 64 KiB steps moves the inputs across pages and DRAM channels).
RELAYOUT_WARMUP = 2
PAD_GRAIN_BYTES = 64 * 2**10
PAD_MAX_GRAINS = 2048


# inputs and kernels ------------------------------------------------------------------------

def make_inputs(torch, shape: dict, device: str, seed: int) -> dict:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    dtype = getattr(torch, _TORCH_DTYPES[shape["dtype"]])
    b, sq, sk = shape["batch"], shape["sq"], shape["sk"]

    def randn(*dims):
        return torch.randn(*dims, generator=gen, device=device, dtype=torch.float32).to(dtype)

    if shape["layout"] == "varlen":
        q = randn(b * sq, shape["hq"], shape["dqk"])
        k = randn(b * sk, shape["hk"], shape["dqk"])
        v = randn(b * sk, shape["hk"], shape["dv"])
        extra = {"cu_seqlens_q": torch.arange(0, b + 1, device=device, dtype=torch.int32) * sq,
                 "cu_seqlens_k": torch.arange(0, b + 1, device=device, dtype=torch.int32) * sk,
                 "max_seqlen_q": sq, "max_seqlen_k": sk}
    else:
        q = randn(b, sq, shape["hq"], shape["dqk"])
        k = randn(b, sk, shape["hk"], shape["dqk"])
        v = randn(b, sk, shape["hk"], shape["dv"])
        extra = {}
    sink = randn(shape["hq"]).float() if shape.get("sink") else None
    return {"q": q, "k": k, "v": v, "sink": sink, "seed": seed, **extra}


def pad_bytes(seed: int, shape_index: int, rep: int) -> int:
    """The size of the allocation placed before a rep's fresh inputs: seeded, so both sides of a
    comparison (and a re-run) use the same sequence of pads."""
    rng = random.Random(f"{seed}:{shape_index}:{rep}")
    return rng.randrange(1, PAD_MAX_GRAINS + 1) * PAD_GRAIN_BYTES


def pass_of(shape: dict) -> str:
    """"fwd" or "bwd"; shapes files written before shapes had a pass hold forward shapes."""
    return shape.get("pass", "fwd")


def mha_forward(torch, shape: dict, inputs: dict):
    """The forward call of the kernel under test: mha.flash_attn_func / flash_attn_varlen_func."""
    import mha  # toolchain only: after the pin check

    kw = dict(dropout_p=shape.get("dropout_p", 0.0), causal=shape["causal"],
              window_size=tuple(shape.get("window", (-1, -1))), sink=inputs["sink"])
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    if shape["layout"] == "varlen":
        args = (q, k, v, inputs["cu_seqlens_q"], inputs["cu_seqlens_k"], inputs["max_seqlen_q"], inputs["max_seqlen_k"])
        return lambda: mha.flash_attn_varlen_func(*args, **kw)
    return lambda: mha.flash_attn_func(q, k, v, **kw)


def sdpa_forward(torch, shape: dict, inputs: dict):
    """Sanity mode: torch SDPA on the same inputs (window and sink are ignored; varlen runs as
    the equivalent dense batch). Useful to check the harness on any machine, not the kernel."""
    import torch.nn.functional as F  # toolchain only: after the pin check

    b, sq, sk = shape["batch"], shape["sq"], shape["sk"]
    q = inputs["q"].reshape(b, sq, shape["hq"], -1).transpose(1, 2)
    k = inputs["k"].reshape(b, sk, shape["hk"], -1).transpose(1, 2)
    v = inputs["v"].reshape(b, sk, shape["hk"], -1).transpose(1, 2)
    # SDPA's causal mask is top-left aligned; only for Sq == Sk is it the kernel's mask. Decode
    # (Sq 1, bottom-right aligned) sees every key, which is SDPA without a mask.
    causal = shape["causal"] and sq == sk
    gqa = shape["hq"] != shape["hk"]
    p = shape.get("dropout_p", 0.0)
    return lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal, enable_gqa=gqa)


def backward_of(forward):
    """The call that times one backward step of `forward`'s output (the module docstring): the
    forward runs here, once, with its inputs requiring gradients, and so does dout."""
    def make(torch, shape: dict, inputs: dict):
        grads = [inputs[name].requires_grad_() for name in ("q", "k", "v")]
        if inputs["sink"] is not None:
            grads.append(inputs["sink"].requires_grad_())
        with torch.enable_grad():
            out = forward(torch, shape, inputs)()
        gen = torch.Generator(device=out.device)
        gen.manual_seed(int(inputs["seed"]) + 1)
        dout = torch.randn(out.shape, generator=gen, device=out.device, dtype=torch.float32).to(out.dtype)

        def step():
            with torch.enable_grad():
                return torch.autograd.grad(out, grads, dout, retain_graph=True)
        return step
    return make


def kernel_call(kernel: str, shape: dict):
    """The timed call's factory (torch, shape, inputs) -> call, for the kernel and the shape's pass."""
    forward = KERNELS[kernel]
    return backward_of(forward) if pass_of(shape) == "bwd" else forward


KERNELS = {"mha": mha_forward, "sdpa": sdpa_forward}


# timers ------------------------------------------------------------------------------------

class CudaTimer:
    """Per-dispatch CUDA events; see the module docstring for the pre-rep spin."""

    def __init__(self, torch, l2_flush: bool) -> None:
        self.torch = torch
        self.flush_buf = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda") if l2_flush else None
        self.cycles_per_us = self._spin_rate()

    def _spin_rate(self) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)         # first call loads the spin kernel
        torch.cuda.synchronize()
        cycles = 20_000_000
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        return cycles / (start.elapsed_time(end) * 1000.0)

    @functools.cached_property
    def spin_cost_us(self) -> float:
        """What appending a near-empty spin to a dispatch adds between its pair of events on a
        full queue (us): the fixed cost taken off every planted spin. Only planted runs need it,
        so it is measured on first use.

        Measured the way the plant runs: a spin launched right behind a real kernel, where its
        launch overlaps the kernel's tail. Between two bare events the cost reads higher, and a
        plant sized with that undershoots, most on the shortest shapes (docs/perf-method.md)."""
        torch = self.torch
        n = 200
        buf = torch.empty(1 << 20, dtype=torch.float32, device="cuda")

        def median_of(work) -> float:
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            torch.cuda.synchronize()
            torch.cuda._sleep(int(5000 * self.cycles_per_us))     # hold the GPU while we enqueue
            for s, e in zip(starts, ends):
                s.record()
                work()
                e.record()
            torch.cuda.synchronize()
            return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends))

        def kernel():
            buf.mul_(1.0)

        def kernel_then_spin():
            buf.mul_(1.0)
            torch.cuda._sleep(1)

        kernel_then_spin()                  # load both kernels before timing
        return max(0.0, median_of(kernel_then_spin) - median_of(kernel))

    def spin(self, us: float) -> None:
        if us > 0:
            self.torch.cuda._sleep(max(1, int(us * self.cycles_per_us)))

    def one(self, fn) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1000.0

    def rep(self, fn, n: int, hold_us: float, plant_us: float) -> list[float]:
        torch = self.torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        torch.cuda.synchronize()
        self.spin(min(hold_us, MAX_HOLD_US))
        for i in range(n):
            if self.flush_buf is not None:
                self.flush_buf.zero_()
            starts[i].record()
            fn()
            if plant_us > 0:
                self.spin(plant_us)
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]


class WallTimer:
    """CPU mode (harness checks without a GPU): each dispatch timed with perf_counter."""

    spin_cost_us = 0.0

    def spin(self, us: float) -> None:
        until = time.perf_counter() + us / 1e6
        while time.perf_counter() < until:
            pass

    def one(self, fn) -> float:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6

    def rep(self, fn, n: int, hold_us: float, plant_us: float) -> list[float]:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            if plant_us > 0:
                self.spin(plant_us)
            times.append((time.perf_counter() - t0) * 1e6)
        return times


# code objects ------------------------------------------------------------------------------

class LaunchRecorder:
    """While active: the sha256 of each compiled kernel the package launches, by kernel name."""

    def __init__(self) -> None:
        self.hashes: dict[str, str] = {}
        self.names: set[str] = set()    # every kernel launched, with a code object or not (interpreter)
        self.observers: list | None = None

    def __call__(self, spec, kernel) -> None:
        self.names.add(spec.name)
        if spec.name not in self.hashes:
            digest = code_object_sha256(kernel)
            if digest is not None:
                self.hashes[spec.name] = digest

    def unordered_outputs(self) -> list[str]:
        """The outputs the launched kernels add up in no fixed order, as the package declares
        them (mha.launch.unordered_outputs; a package without the declaration declares none)."""
        declare = getattr(importlib.import_module("mha.launch"), "unordered_outputs", None)
        return list(declare(sorted(self.names))) if declare is not None else []

    def __enter__(self) -> "LaunchRecorder":
        # An older checkout's mha (a `perf measure --against` base, a bisect build) may predate
        # the observers: it is timed all the same, and its results carry no code objects.
        self.observers = getattr(importlib.import_module("mha.launch"), "LAUNCH_OBSERVERS", None)
        if self.observers is not None:
            self.observers.append(self)
        return self

    def __exit__(self, *exc) -> None:
        if self.observers is not None:
            self.observers.remove(self)


def code_object_sha256(kernel) -> str | None:
    """sha256 of a compiled kernel's binary (cubin or hsaco); None where there is none (the
    interpreter runs no compiled code)."""
    asm = getattr(kernel, "asm", None)
    if asm is None:
        return None
    for name in ("cubin", "hsaco"):
        if name in asm:
            binary = asm[name]
            return hashlib.sha256(binary if isinstance(binary, bytes) else str(binary).encode()).hexdigest()
    return None


# one shape ---------------------------------------------------------------------------------

def measure_shape(torch, timer, call, method: Method, plant_pct: float,
                  recorder=None, relayout=None) -> tuple[list[list[float]], dict]:
    """Per-dispatch times of every rep (us), and facts about the run (compile, counts). The first
    call (compile + first run) runs under `recorder`, which learns the code objects it launched.
    `relayout(rep)`, where given, returns the call for that rep on freshly placed inputs (reps
    after the first; the module docstring, "Memory layout")."""
    t0 = time.perf_counter()
    with recorder or contextlib.nullcontext():
        call()                                      # compile + first run
    if hasattr(torch, "cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()
    first_call_s = time.perf_counter() - t0
    warm = [timer.one(call) for _ in range(method.warmup)]
    estimate = statistics.median(warm)
    # Host cost of one enqueue, to size the pre-rep spin.
    t0 = time.perf_counter()
    for _ in range(3):
        call()
    enqueue_us = (time.perf_counter() - t0) / 3 * 1e6
    n = dispatches_per_rep(estimate, method)
    hold_us = n * enqueue_us * 1.5 + 100.0
    plant_base_us, plant_gap_us, plant_us = estimate, 0.0, 0.0
    if plant_pct > 0:
        # The planted amount is a share of the dispatch as the reps time it: one unplanted pilot
        # rep on a full queue (the warm-up median also holds the host's launch latency, so a
        # plant sized on it overshoots). The spin is a second launch whose fixed cost the timer
        # measured once; it comes off the spin.
        # Not corrected per shape by a planted pilot rep: the first rep after the warm-up often
        # runs faster than the later ones (the clocks have not settled), so such a correction
        # shrinks or removes whole plants.
        # A planted shape always gets its spin, even where the fixed cost alone exceeds the
        # planted amount (it then overshoots): a spin sized to nothing would leave the shape
        # unplanted while calibrate counts it as planted.
        # The measurements behind each of these: docs/perf-method.md, "Planted slowdowns".
        plant_base_us = statistics.median(timer.rep(call, n, hold_us, 0.0))
        plant_gap_us = timer.spin_cost_us
        plant_us = max(MIN_PLANT_US, plant_base_us * plant_pct / 100.0 - plant_gap_us)
    reps = []
    for r in range(method.reps):
        if relayout is not None and r > 0:
            # The last rep's inputs go before the next are made: the largest shapes' inputs (and
            # their float32 drafts) do not fit on the GPU twice.
            call = None
            call = relayout(r)
            for _ in range(RELAYOUT_WARMUP):
                timer.one(call)
        reps.append(timer.rep(call, n, hold_us, plant_us))
    return reps, {"first_call_s": round(first_call_s, 3), "warmup_median_us": round(estimate, 3),
                  "enqueue_us": round(enqueue_us, 2), "planted_us": round(plant_us, 3),
                  "planted_base_us": round(plant_base_us, 3), "planted_gap_us": round(plant_gap_us, 3)}


# driver ------------------------------------------------------------------------------------

def planted(key: str) -> float:
    pct = float(os.environ.get("MHA_PERF_PLANT_SLOWDOWN", "0") or 0)
    patterns = [p for p in os.environ.get("MHA_PERF_PLANT_KEYS", "").split(",") if p]
    if pct and patterns and not any(fnmatch.fnmatchcase(key, p) for p in patterns):
        return 0.0
    return pct


def select(entries: list[dict], chunk: str | None, keys: str | None) -> list[dict]:
    if keys:
        patterns = keys.split(",")
        entries = [e for e in entries if any(fnmatch.fnmatchcase(e["key"], p) for p in patterns)]
    if chunk:
        i, n = (int(x) for x in chunk.split("/"))
        if not 1 <= i <= n:
            raise SystemExit(f"--chunk {chunk}: expected I/N with 1 <= I <= N")
        entries = entries[i - 1::n]     # strided: every chunk gets small and large shapes
    return entries


class Progress:
    """One stderr line per shape, rewritten in place on a terminal."""

    def __init__(self, total: int) -> None:
        self.total, self.t0 = total, time.perf_counter()
        self.tty = sys.stderr.isatty()

    def update(self, done: int, key: str, note: str) -> None:
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / done * (self.total - done) if done else 0.0
        width = 24
        bar = "#" * int(width * done / self.total) + "." * (width - int(width * done / self.total))
        line = f"[{bar}] {done:>3}/{self.total} {elapsed:6.0f}s eta {eta:5.0f}s  {key}  {note}"
        print(("\r" + line[:160].ljust(160)) if self.tty else line, end="" if self.tty else "\n",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def pin_report() -> dict:
    """pincheck.report(): pins enforced (exit 3) or recorded, as the executor asked."""
    if "MHA_CI_PINS" in os.environ:
        return pincheck.enforce_report()
    # Started by hand (e.g. on a GPU host with its own torch): versions recorded, not checked.
    return {"versions": pincheck.versions({}), "pins_checked": False, "pin_mode": "none",
            "pin_mismatches": ["started without an mha-ci executor: no pins were passed"]}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m mha_ci.payloads.perf", description=__doc__.split("\n")[0])
    p.add_argument("--shapes", required=True, help="mha-ci.perf-shapes/1 JSON (mha-ci perf shapes)")
    p.add_argument("--method", required=True, help="method JSON (mha-ci perf shapes writes method.json)")
    p.add_argument("--out", required=True, help="where to write the mha-ci.perf/1 document")
    p.add_argument("--kernel", choices=sorted(KERNELS), default="mha")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--toolchain", default=os.environ.get("MHA_CI_TOOLCHAIN", "host"))
    p.add_argument("--arch", help="the pipeline's arch name of the job (archs.yaml), recorded as provenance arch; "
                                  "a GPU of another arch is refused (exit 3)")
    p.add_argument("--executor", default=os.environ.get("MHA_CI_EXECUTOR"))
    p.add_argument("--image-digest", default=os.environ.get("MHA_CI_IMAGE_DIGEST"))
    p.add_argument("--commit", default=os.environ.get("MHA_CI_COMMIT"))
    p.add_argument("--chunk", help="I/N: measure every N-th shape starting at the I-th (interleaving)")
    p.add_argument("--keys", help="comma-separated fnmatch patterns over shape keys")
    p.add_argument("--dump-dispatches", help="also write every per-dispatch time (us) here")
    p.add_argument("--lockstep", metavar="DIR:ROLE",
                   help="take turns per shape with a partner process (role a or b) through DIR")
    p.add_argument("--numerics", action="store_true",
                   help="also record each shape's output digests and error against a float64 reference")
    p.add_argument("--save-outputs", metavar="DIR", help="with --numerics: keep each shape's outputs in DIR/<key>.pt")
    p.add_argument("--precompile-workers", type=int, default=0, metavar="N",
                   help="first compile every shape's kernels on N processes at once (mha_ci.payloads.perf_precompile)")
    args = p.parse_args(argv)
    if args.save_outputs and not args.numerics:
        p.error("--save-outputs needs --numerics")
    if args.numerics and args.kernel != "mha":
        p.error("--numerics judges the mha kernel; --kernel sdpa has no numerics to record")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Before torch or triton is imported: compile without line info, so the code-object hashes
    # (and the code timed) are the checksums' path-independent ones.
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    pins = pin_report()
    shapes_doc = json.loads(out_path(args.shapes).read_text())
    if shapes_doc.get("schema") != SHAPES_SCHEMA:
        print(f"perf payload: {args.shapes} is not a {SHAPES_SCHEMA} file", file=sys.stderr)
        return EXIT_NO_RESULT
    method = Method.from_dict(json.loads(out_path(args.method).read_text()))
    entries = select(shapes_doc["shapes"], args.chunk, args.keys)
    lock = None
    if args.lockstep:
        try:
            folder, role = lockstep.parse_spec(args.lockstep)
        except ValueError as exc:
            print(f"perf payload: {exc}", file=sys.stderr)
            return EXIT_NO_RESULT
        lock = lockstep.Lockstep(out_path(str(folder)), role, len(entries))
    try:
        return _measure_all(args, pins, shapes_doc, method, entries, lock)
    except lockstep.Stopped as exc:
        print(f"perf payload: {exc}; nothing written", file=sys.stderr)
        return EXIT_NO_RESULT
    finally:
        if lock is not None:
            lock.leave()


def _precompile(args, shapes_doc, entries) -> None:
    """Fill Triton's cache for the selected shapes on several processes, before any turn is
    taken (both sides of an A/B do it at once); only time is at stake, so it only reports."""
    from mha_ci.payloads import perf_precompile  # only runs that precompile need it

    where = {id(e): i for i, e in enumerate(shapes_doc["shapes"])}
    done = perf_precompile.precompile(str(out_path(args.shapes)), [where[id(e)] for e in entries],
                                      args.precompile_workers, args.kernel, args.device)
    note = f"; {len(done['failed'])} worker(s) failed: {done['failed'][0]}" if done["failed"] else ""
    if done["left_out"]:
        note += (f"; {len(done['left_out'])} shape(s) left to the timing process for memory: "
                 f"{', '.join(done['left_out'][:3])}{' ...' if len(done['left_out']) > 3 else ''}")
    print(f"perf payload: precompiled {done['shapes']} shapes on {done['workers']} processes in "
          f"{done['seconds']} s{note}", file=sys.stderr)


def _measure_all(args, pins, shapes_doc, method, entries, lock) -> int:
    if args.precompile_workers > 0 and entries:
        _precompile(args, shapes_doc, entries)
    if lock is not None:
        lock.wait(0)
    import torch  # toolchain only: after the pin check

    refused = _device_refused(torch, args)
    if refused:
        print(f"perf payload: {refused}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    timer = CudaTimer(torch, method.l2_flush) if args.device == "cuda" else WallTimer()
    smi_start = prov.smi_sample() if args.device == "cuda" else None
    if lock is not None:
        lock.done(0)
    kernel_bucket = _kernel_bucket_rule() if args.kernel == "mha" else None
    results: list[dict] = []
    dumps: list[dict] = []
    failures = 0
    progress = Progress(len(entries))
    with torch.no_grad():
        for n, entry in enumerate(entries, 1):
            record, note = _measure_entry(torch, timer, args, method, n, entry, kernel_bucket, lock, dumps)
            if record["error"] is not None:
                failures += 1
            results.append(record)
            progress.update(n, entry["key"], note)
    progress.close()
    smi_end = prov.smi_sample() if args.device == "cuda" else None
    provenance = prov.collect(torch, args.device, toolchain=args.toolchain, pins=pins, arch=args.arch,
                              executor=args.executor, image_digest=args.image_digest,
                              commit=args.commit, root=ROOT, kernel=args.kernel,
                              planted_pct=float(os.environ.get("MHA_PERF_PLANT_SLOWDOWN", "0") or 0),
                              smi_start=smi_start, smi_end=smi_end)
    if os.environ.get("MHA_PERF_PLANT_KEYS"):
        provenance["planted_keys"] = os.environ["MHA_PERF_PLANT_KEYS"]
    # A chunk keeps its subset name (`mha-ci perf merge` joins the chunks back); a key filter
    # makes the run "custom", so the gate does not expect the whole set from it.
    selection = {"subset": "custom" if args.keys else shapes_doc.get("subset", "custom"),
                 "count": len(results), "chunk": args.chunk, "keys": args.keys}
    if lock is not None:
        selection["interleave"] = lock.record()
        if lock.broken:
            print(f"perf payload: interleaving broke ({lock.broken}); the rest was measured alone",
                  file=sys.stderr)
    doc = {"schema": SCHEMA, "provenance": provenance, "method": method.to_dict(), "selection": selection,
           "results": results}
    out = out_path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps(doc, indent=1) + "\n")
    if args.dump_dispatches:
        dump = out_path(args.dump_dispatches)
        dump.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dump, json.dumps({"schema": DISPATCHES_SCHEMA, "method": method.to_dict(),
                                       "provenance": provenance, "shapes": dumps}) + "\n")
    print(f"perf payload: {len(results) - failures}/{len(results)} shapes measured, {failures} failed -> {out}",
          file=sys.stderr)
    return EXIT_NO_RESULT if results and failures == len(results) else EXIT_OK


def _device_refused(torch, args) -> str | None:
    """Why this process cannot measure on the device it was given; None when it can."""
    if args.device == "cuda" and not torch.cuda.is_available():
        return "no CUDA/HIP device visible (use --device cpu for a harness check)"
    if args.device == "cuda" and args.arch:
        found = prov.device_facts(torch, "cuda")
        if found["arch"] != args.arch:
            return f"the job is for {args.arch}, but the GPU ({found['gpu']}) is {found['arch']}"
    return None


def _measure_entry(torch, timer, args, method: Method, n: int, entry: dict, kernel_bucket, lock,
                   dumps: list[dict]) -> tuple[dict, str]:
    """The result record of the n-th shape (its error set when it failed) and its progress note;
    the rounded dispatch times of a measured shape go to `dumps`."""
    shape, key = entry["shape"], entry["key"]
    record = {k: entry[k] for k in ("key", "shape", "bucket", "tags", "origins") if k in entry}
    if kernel_bucket is not None:
        record["kernel_bucket"] = kernel_bucket(CONFIG_PASS[pass_of(shape)], shape["dqk"], shape["dv"],
                                                shape["dtype"], shape.get("dropout_p", 0.0))
    plant = planted(key)
    inputs = call = None
    measured = False
    if lock is not None:
        lock.wait(n)
    pad = None

    def relayout(rep: int):
        nonlocal inputs, call, pad
        inputs = call = pad = None
        if args.device == "cuda":
            torch.cuda.empty_cache()
        pad = torch.empty(pad_bytes(method.seed, n, rep), dtype=torch.uint8, device=args.device)
        inputs = make_inputs(torch, shape, args.device, method.seed + n)
        call = kernel_call(args.kernel, shape)(torch, shape, inputs)
        return call

    try:
        inputs = make_inputs(torch, shape, args.device, method.seed + n)
        call = kernel_call(args.kernel, shape)(torch, shape, inputs)
        recorder = LaunchRecorder() if args.kernel == "mha" else None
        reps, facts = measure_shape(torch, timer, call, method, plant, recorder,
                                    relayout if method.relayout else None)
        # Rounded to the ns before the stats, so a --dump-dispatches file reproduces them exactly.
        reps = [[round(t, 3) for t in rep] for rep in reps]
        stats = shape_stats(reps, method)
        if recorder is not None and recorder.hashes:
            record["code_objects"] = dict(sorted(recorder.hashes.items()))
        record.update(stats=stats.to_dict(), error=None, planted_pct=plant, **facts)
        dumps.append({"key": key, "reps": reps})
        note = f"{stats.trimmed_mean_us:10.1f} us  noise {stats.noise_pct:4.1f} %"
        measured = True
        if stats.stalls:
            note += f"  STALL {max(s.us for s in stats.stalls):.0f} us"
    except Exception as exc:   # one bad shape must not lose the others' results
        record.update(stats=None, error=f"{type(exc).__name__}: {exc}"[:500], planted_pct=plant)
        note = f"FAILED {type(exc).__name__}"
    finally:
        inputs = call = pad = None
        if args.device == "cuda":
            torch.cuda.empty_cache()    # every timed rep ended synchronised
        try:
            if measured and args.numerics:
                save_to = out_path(args.save_outputs) if args.save_outputs else None
                # The code the numbers came from, so a stored accuracy record is keyed by it: every
                # kernel of the captured call, the forward of a backward shape included (the
                # timed backward step launches only the backward's).
                with LaunchRecorder() as launched:
                    record["numerics"] = numerics.capture(torch, shape, key, make_inputs, args.device, save_to)
                if launched.hashes:
                    record["numerics"]["code_objects"] = dict(sorted(launched.hashes.items()))
                # outputs the launched kernels add up in no fixed order (the single-pass dQ)
                unordered = launched.unordered_outputs()
                if unordered:
                    record["numerics"]["unordered_outputs"] = unordered
                if record["numerics"]["error"]:
                    note += f"  numerics: {record['numerics']['error'][:60]}"
                if args.device == "cuda":
                    torch.cuda.empty_cache()
        finally:
            if lock is not None:
                lock.done(n)
    return record, note


def _kernel_bucket_rule():
    """The kernel package's own bucket rule, recorded per result beside the mirrored one."""
    try:
        from mha.config import select_bucket  # toolchain only: after the pin check
    except ImportError:
        return None
    return select_bucket


if __name__ == "__main__":
    raise SystemExit(main())
