"""Compile one sm90 bf16 forward (causal, head dim 128, 128x128 tile, 4 warps, 2 stages, the loop
warp-specialized) ahead of time, without a GPU, and print what the Hopper warp-specialization pass
made of the tile's rows in each consumer partition.

    PYTHONPATH=src <toolchain python> docs/records/2026-12-03-ws-rows-ttgir/lab/ttgir.py FORM [OUT.ttgir]

FORM: row-offsets (ws_row_offsets: mha.kernels.forward_ws at 327212a, rows = m0 + tl.arange),
tile-rows (ws_tile_rows: the same at 3e2300f, rows = tl.arange, m0 in scalars), halves-one-loop,
halves-two-loops (lab/ws_halves.py). lab/run.sh takes the first two from git and puts them on
PYTHONPATH.
"""
import dataclasses
import importlib
import os
import re
import sys
import tempfile

os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
sys.path.insert(0, os.path.dirname(__file__))

import triton  # noqa: E402

from mha import launch  # noqa: E402
from mha_ci.checksums.compile import CompileTarget, compile_kernel  # noqa: E402
from mha_ci.checksums.resources import code_object_resources  # noqa: E402
from mha_ci.checksums.variants import task_for_spec  # noqa: E402

FORMS = {  # module, function, extra constexprs
    "row-offsets": ("ws_row_offsets", "attn_fwd_ws", {}),
    "tile-rows": ("ws_tile_rows", "attn_fwd_ws", {}),
    "halves-one-loop": ("ws_halves", "attn_fwd_dp", {"TWO_LOOPS": False}),
    "halves-two-loops": ("ws_halves", "attn_fwd_dp", {"TWO_LOOPS": True}),
}


def main(form: str, out: str | None) -> int:
    module, name, extra = FORMS[form]
    fn = getattr(importlib.import_module(module), name)
    problem = launch.Problem(dtype="bf16", dqk=128, dv=128, causal=True)
    cfg = {"warp_specialize": True, "num_warps": 4, "num_stages": 2, "BLOCK_M": 128, "BLOCK_N": 128}
    spec = launch.kernel_specs(problem, "sm90", {"forward": cfg})["fwd"]
    # The guard ws-two-consumer-groups-band-or-dropout made BLOCK_M 64: set 128 back, as the form under study.
    cx = dict(spec.constexprs, BLOCK_M=128, WARP_SPECIALIZE=True, **extra)
    spec = dataclasses.replace(spec, fn=fn, constexprs=cx, signature=launch._ordered(fn, launch._fwd_signature("*bf16"), cx))
    target = CompileTarget("cuda", 90, 32)
    task = task_for_spec(launch, spec, form, target)
    print(f"{form}: triton {triton.__version__}, sm90, bf16 causal d128, BLOCK_M 128, BLOCK_N 128, 4 warps, 2 stages")
    try:
        kernel = compile_kernel(task)
    except Exception as exc:  # noqa: BLE001 - the failure is the finding
        print(f"  compile failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        return 0
    ttgir = kernel.asm["ttgir"]
    if out:
        with open(out, "w") as f:
            f.write(ttgir)
    res = code_object_resources(kernel.asm["cubin"], "cuda", kernel.metadata.name)
    print(f"  shared {kernel.metadata.shared} B, registers {res.registers}, spills {res.spills}")
    parts = re.split(r"\n    (partition\d+)\(", ttgir)
    for label, body in zip(parts[1::2], parts[2::2]):
        dots = re.findall(r"ttng.warp_group_dot .*-> tensor<(\d+)x(\d+)xf32", body)
        if not dots:
            continue          # the producer (loads only)
        print(f"  {label}: {len(dots)} warp_group_dot of {sorted(set(f'{m}x{n}' for m, n in dots))}")
        for m in re.finditer(r"tt.make_range \{[^}]*end = (\d+) : i32, start = (\d+) : i32\} : tensor<(\d+)xi32, "
                             r"#ttg.slice<\{dim = 1", body):
            print(f"    row range: make_range [{m.group(2)}, {m.group(1)})")
        for m in re.finditer(r"(%\w+) = arith.addi (%\w+), %c64_i32\w* ", body):
            uses = [u.group(0).strip() for u in re.finditer(rf"\n\s+%\w+ = tt.splat {m.group(1)} [^\n]*", body)]
            shape = [re.search(r"-> (tensor<[^>]*>>?)", u).group(1) for u in uses]
            print(f"    scalar {m.group(1)} = {m.group(2)} + 64, splat to {shape or 'no tensor'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
