"""Numerics of one shape: what the kernel returned, bit for bit, and how far from float64.

    python -m mha_ci.payloads.numerics --base DIR --head DIR --out versus.json

Used two ways, both in a toolchain environment (torch):
- by the perf payload (`--numerics`), after a shape's timing: `capture` runs the shape's pass once
  more on inputs seeded by its key (so every run of a shape, on either side of `--against`, on
  any day, sees the same inputs), records the sha256 of every output, and measures each output's
  error against a float64 reference on a reduced problem (`reference_errors`). With
  `--save-outputs DIR` the outputs themselves go to DIR/<key>.pt;
- as a command, after both sides of `perf measure --against` saved their outputs: for every shape
  whose outputs the two sides saved, whether each output is bitwise identical and the largest
  distance in units in the last place (ULP) between them (`versus`).

The reduced problem is what the float64 reference can hold for any shape: batch 0 (the first
sequence of a varlen batch), KV head 0 and its query heads, full sequence lengths. The kernel
ran the whole problem; its outputs are sliced to that part, which depends on nothing outside it
(dK and dV of KV head 0 sum over exactly those query heads). dsink sums over every batch, so it
is judged only where the batch is 1. The reference runs one query head at a time, so a
group of 16 heads at 8192 x 8192 never holds more than one head's float64 scores.

The tolerance is the kernel tests' (mha.reference: flash-attn's rule): an output is within it when
its largest error is at most max(2 x the error of the same math in the input dtype, a floor per
dtype x the reference's magnitude). The relative RMS error (`rms_rel`, ||got - ref|| / ||ref||) is
what mha_ci.perf.numerics compares between two runs: a largest error moves with where the rounding
happens to land, the RMS over every element much less.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path

from mha_ci.files import write_atomic
from mha_ci.payloads import EXIT_NO_RESULT, EXIT_OK, out_path

OUTPUT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# Elements hashed or compared per step: bounds the host and device memory a 1.3 GB output needs.
CHUNK = 1 << 26


def key_seed(key: str) -> int:
    """The inputs' seed of a shape: from its key alone, so base, head and baseline runs agree."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % (2**31 - 1)


# running the shape ---------------------------------------------------------------------------

def run_outputs(torch, shape: dict, inputs: dict, seed: int) -> tuple[dict, dict]:
    """({name: output tensor}, facts) of one call of the shape's pass: out and lse, and for a
    backward shape dq, dk, dv (and dsink with a sink) for a seeded dout. facts holds what the
    reference needs to redo the call: the dropout seed the kernel drew, and dout."""
    import mha  # toolchain only: after the pin check

    backward = shape.get("pass", "fwd") == "bwd"
    q, k, v, sink = inputs["q"], inputs["k"], inputs["v"], inputs["sink"]
    leaves = [q, k, v] + ([sink] if sink is not None else [])
    if backward:
        for t in leaves:
            t.requires_grad_()
    kw = dict(dropout_p=shape.get("dropout_p", 0.0), causal=shape["causal"],
              window_size=tuple(shape.get("window", (-1, -1))), sink=sink, return_lse=True)
    torch.manual_seed(seed)     # the dropout seed the call draws (mha.dropout.draw_seed)
    with torch.enable_grad():
        if shape["layout"] == "varlen":
            out, lse = mha.flash_attn_varlen_func(q, k, v, inputs["cu_seqlens_q"], inputs["cu_seqlens_k"],
                                                  inputs["max_seqlen_q"], inputs["max_seqlen_k"], **kw)
        else:
            out, lse = mha.flash_attn_func(q, k, v, **kw)
    facts: dict = {"dropout_seed": None, "dout": None}
    if kw["dropout_p"] > 0:
        from mha.dropout import draw_seed  # toolchain only
        torch.manual_seed(seed)
        facts["dropout_seed"] = draw_seed()
    outputs = {"out": out.detach(), "lse": lse.detach()}
    if backward:
        gen = torch.Generator(device=out.device)
        gen.manual_seed(seed + 1)
        dout = torch.randn(out.shape, generator=gen, device=out.device, dtype=torch.float32).to(out.dtype)
        grads = torch.autograd.grad(out, leaves, dout)
        outputs.update(dq=grads[0], dk=grads[1], dv=grads[2])
        if sink is not None:
            outputs["dsink"] = grads[3]
        facts["dout"] = dout
        for t in leaves:
            t.requires_grad_(False)
    return outputs, facts


def digest(torch, tensor) -> str:
    """sha256 of the tensor's bytes in memory order (contiguous), chunk by chunk."""
    flat = tensor.detach().contiguous().reshape(-1)
    h = hashlib.sha256()
    for start in range(0, flat.numel(), CHUNK):
        h.update(flat[start:start + CHUNK].cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def describe(torch, outputs: dict) -> dict:
    return {name: {"sha256": digest(torch, t), "dtype": OUTPUT_DTYPES[str(t.dtype).removeprefix("torch.")],
                   "numel": t.numel()} for name, t in outputs.items()}


# the float64 reference on the reduced problem ------------------------------------------------

def _reduced(shape: dict, inputs: dict, outputs: dict, facts: dict) -> dict:
    """Batch 0, KV head 0 and its query group: inputs (B=1 dense layout) and the kernel's outputs."""
    group = shape["hq"] // shape["hk"]
    sq, sk = shape["sq"], shape["sk"]

    def rows(t, n):     # dense (B, S, H, D) -> batch 0; varlen (total, H, D) -> first sequence
        return t[:1] if shape["layout"] != "varlen" else t[None, :n]

    red = {"q": rows(inputs["q"], sq)[:, :, :group], "k": rows(inputs["k"], sk)[:, :, :1],
           "v": rows(inputs["v"], sk)[:, :, :1],
           "sink": None if inputs["sink"] is None else inputs["sink"][:group],
           "dout": None if facts["dout"] is None else rows(facts["dout"], sq)[:, :, :group]}
    got = {"out": rows(outputs["out"], sq)[:, :, :group]}
    lse = outputs["lse"]        # dense (B, Hq, Sq); varlen (Hq, total)
    got["lse"] = lse[:1, :group] if shape["layout"] != "varlen" else lse[None, :group, :sq]
    if "dq" in outputs:
        got.update(dq=rows(outputs["dq"], sq)[:, :, :group], dk=rows(outputs["dk"], sk)[:, :, :1],
                   dv=rows(outputs["dv"], sk)[:, :, :1])
        if "dsink" in outputs and shape["batch"] == 1:
            got["dsink"] = outputs["dsink"][:group]
    red["got"] = got
    return red


def _reference(torch, shape: dict, red: dict, facts: dict, compute_dtype) -> dict:
    """{name: reference output} of the reduced problem in compute_dtype, one query head at a time."""
    from mha import reference  # toolchain only

    group = shape["hq"] // shape["hk"]
    backward = red["dout"] is not None
    p = shape.get("dropout_p", 0.0)
    keep = None
    if p > 0:
        from mha.dropout import dropout_mask  # toolchain only
        seed, offset = facts["dropout_seed"]
        # The kernels key the draws by seed + batch * Hq + head: batch 0's heads come first.
        keep = dropout_mask(1, shape["hq"], shape["sq"], shape["sk"], p, seed, offset,
                            device=red["q"].device)[:, :group]
    leaf_dtype = torch.float64 if compute_dtype == torch.float64 else red["q"].dtype
    k = red["k"].detach().to(leaf_dtype).requires_grad_(backward)
    v = red["v"].detach().to(leaf_dtype).requires_grad_(backward)
    outs, lses, dqs, dsinks = [], [], [], []
    dk = dv = None
    for h in range(group):
        q = red["q"][:, :, h:h + 1].detach().to(leaf_dtype).requires_grad_(backward)
        sink = None
        if red["sink"] is not None:
            sink = red["sink"][h:h + 1].detach().to(torch.float64 if leaf_dtype == torch.float64
                                                    else torch.float32).requires_grad_(backward)
        with torch.enable_grad():
            out, lse = reference.attention(q, k, v, causal=shape["causal"],
                                           window=tuple(shape.get("window", (-1, -1))), sink=sink, dropout_p=p,
                                           keep_mask=None if keep is None else keep[:, h:h + 1],
                                           compute_dtype=compute_dtype)
        outs.append(out.detach())
        lses.append(lse.detach())
        if backward:
            wrt = [q, k, v] + ([sink] if sink is not None else [])
            grads = torch.autograd.grad(out, wrt, red["dout"][:, :, h:h + 1].to(out.dtype))
            dqs.append(grads[0])
            dk = grads[1] if dk is None else dk + grads[1]
            dv = grads[2] if dv is None else dv + grads[2]
            if sink is not None:
                dsinks.append(grads[3])
    ref = {"out": torch.cat(outs, dim=2), "lse": torch.cat(lses, dim=1)}
    if backward:
        ref.update(dq=torch.cat(dqs, dim=2), dk=dk, dv=dv)
        if dsinks and "dsink" in red["got"]:
            ref["dsink"] = torch.cat(dsinks)
    return ref


def error_of(torch, got, exact, lowp, floor: float) -> dict:
    """The error record of one output: max_abs, rms_rel, tol_abs, lowp_max_abs, nonfinite_mismatch."""
    got, lowp = got.to(torch.float64), lowp.to(torch.float64)
    finite = torch.isfinite(exact)
    mismatch = not torch.equal(finite, torch.isfinite(got)) or not torch.equal(got[~finite], exact[~finite])
    if not finite.any():
        return {"max_abs": 0.0, "rms_rel": 0.0, "tol_abs": 0.0, "lowp_max_abs": 0.0,
                "nonfinite_mismatch": mismatch}
    e, g, low = exact[finite], got[finite], lowp[finite]
    diff = torch.nan_to_num(g - e, nan=math.inf)
    max_abs = diff.abs().max().item()
    lowp_max = (low - e).abs().max().item()
    norm = e.norm().item()
    rms_rel = diff.norm().item() / norm if norm > 0 else diff.norm().item()
    tol = max(2 * lowp_max, floor * max(1.0, e.abs().max().item()))
    return {"max_abs": max_abs, "rms_rel": rms_rel, "tol_abs": tol, "lowp_max_abs": lowp_max,
            "nonfinite_mismatch": mismatch}


def reference_errors(torch, shape: dict, inputs: dict, outputs: dict, facts: dict) -> dict:
    """{"problem": what the reduced problem is, "errors": {name: error record}}."""
    red = _reduced(shape, inputs, outputs, facts)
    exact = _reference(torch, shape, red, facts, torch.float64)
    lowp = _reference(torch, shape, red, facts, red["q"].dtype)
    from mha.reference import TOLERANCE_FLOORS  # toolchain only

    floor = TOLERANCE_FLOORS[red["q"].dtype]
    group = shape["hq"] // shape["hk"]
    errors = {name: error_of(torch, red["got"][name], exact[name], lowp[name], floor) for name in exact}
    where = "the first sequence" if shape["layout"] == "varlen" else "batch 0"
    problem = f"{where}, KV head 0 and its {group} query head(s), float64"
    if "dsink" in outputs and "dsink" not in errors:
        problem += "; dsink not judged (it sums over every batch)"
    return {"problem": problem, "errors": errors}


def capture(torch, shape: dict, key: str, make_inputs, device: str, save_to: Path | None = None) -> dict:
    """The numerics record of one shape (see mha_ci.perf.numerics for how it is judged)."""
    seed = key_seed(key)
    t0 = time.perf_counter()
    record: dict = {"seed": seed, "error": None}
    try:
        inputs = make_inputs(torch, shape, device, seed)
        outputs, facts = run_outputs(torch, shape, inputs, seed)
        record["outputs"] = describe(torch, outputs)
        if save_to is not None:
            save_to.mkdir(parents=True, exist_ok=True)
            torch.save({name: t.cpu() for name, t in outputs.items()}, save_to / f"{key}.pt")
        record["reference"] = reference_errors(torch, shape, inputs, outputs, facts)
    except Exception as exc:    # the timing stands; the numerics of this shape are unmeasured
        record["error"] = f"{type(exc).__name__}: {exc}"[:500]
    record["seconds"] = round(time.perf_counter() - t0, 3)
    return record


# base against head ---------------------------------------------------------------------------

def bits_of(torch, t):
    """The raw bits of a 16- or 32-bit float tensor as signed integers."""
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def ordered(torch, t):
    """Integers in the order of the floats (sign-magnitude to two's complement): the difference
    of two is their distance in ULPs; +0 and -0 are 0 apart."""
    bits = bits_of(torch, t).to(torch.int64)
    mag = bits & (0x7FFF if t.element_size() == 2 else 0x7FFFFFFF)
    return torch.where(bits < 0, -mag, mag)


def versus(torch, a, b) -> dict:
    """identical, max_ulp (None where the non-finite values differ), differing, numel."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return {"identical": False, "max_ulp": None, "differing": a.numel(), "numel": a.numel(),
                "note": f"shape or dtype differs: {tuple(a.shape)} {a.dtype} against {tuple(b.shape)} {b.dtype}"}
    fa, fb = a.reshape(-1), b.reshape(-1)
    differing, max_ulp, nonfinite = 0, 0, False
    for start in range(0, fa.numel(), CHUNK):
        x, y = fa[start:start + CHUNK], fb[start:start + CHUNK]
        differing += int((bits_of(torch, x) != bits_of(torch, y)).sum().item())
        ox, oy = ordered(torch, x), ordered(torch, y)
        finite = torch.isfinite(x) & torch.isfinite(y)
        if not torch.equal(torch.isfinite(x), torch.isfinite(y)):
            nonfinite = True
        if finite.any():
            max_ulp = max(max_ulp, int((ox[finite] - oy[finite]).abs().max().item()))
    return {"identical": differing == 0, "max_ulp": None if nonfinite else max_ulp,
            "differing": differing, "numel": fa.numel()}


def compare_saved(torch, base_dir: Path, head_dir: Path, device: str) -> dict:
    """{key: {name: versus record}} for every key both folders hold."""
    result = {}
    for head_file in sorted(head_dir.glob("*.pt")):
        base_file = base_dir / head_file.name
        if not base_file.is_file():
            continue
        a = torch.load(base_file, map_location=device)
        b = torch.load(head_file, map_location=device)
        result[head_file.stem] = {name: versus(torch, a[name], b[name]) for name in b if name in a}
        del a, b
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mha_ci.payloads.numerics", description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True, help="the base side's saved outputs (a folder of <key>.pt)")
    p.add_argument("--head", required=True, help="the head side's saved outputs")
    p.add_argument("--out", required=True, help="where to write {key: {output: versus}} as JSON")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = p.parse_args(argv)
    import torch  # toolchain only

    base, head = out_path(args.base), out_path(args.head)
    if not head.is_dir() or not base.is_dir():
        print(f"numerics payload: {base if not base.is_dir() else head} is not a folder", file=sys.stderr)
        return EXIT_NO_RESULT
    device = args.device if args.device == "cpu" or torch.cuda.is_available() else "cpu"
    result = compare_saved(torch, base, head, device)
    out = out_path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps(result, indent=1) + "\n")
    print(f"numerics payload: {len(result)} shape(s) compared -> {out}", file=sys.stderr)
    return EXIT_OK if result else EXIT_NO_RESULT


if __name__ == "__main__":
    raise SystemExit(main())
