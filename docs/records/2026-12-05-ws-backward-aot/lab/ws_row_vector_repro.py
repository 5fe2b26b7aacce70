"""Minimal reproducer: Triton's Hopper warp-specialization pass rejects a loop whose 128-row tile
(two consumer groups) uses a per-row vector read with a pointer load. Compiled ahead of time for
sm90, no GPU needed.

    <python with triton 3.4.0 or 3.8.0> ws_row_vector_repro.py

The kernel: C[m0:m0+128] = sum over blocks j of (A_tile @ B_j^T - r[:, None]) @ B_j, where r is
one float per row of the tile. Four forms, each compiled in a process of its own (a failed
assertion aborts the process):
  row-vector, ws        r = tl.load(R + m0 + arange), the loop warp-specialized
  row-vector, no ws     the same, warp_specialize=False (control)
  no row vector, ws     r = 0 (control: the same loop without the load)
  row-vector in loop    the load inside the loop, warp-specialized
  column-vector in loop one float per column of block j instead (64 of them, along the dimension
                        the pass does not split), loaded inside the loop, warp-specialized (control)
  row-vector by 1-D descriptor  r loaded through a 1-D tensor descriptor (TMA), warp-specialized:
                        the workaround
"""
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp())

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

FORMS = {  # name: (the vector, warp-specialized)
    "row-vector, ws": ("row", True), "row-vector, no ws": ("row", False), "no row vector, ws": ("none", True),
    "row-vector in loop, ws": ("row-in-loop", True), "column-vector in loop, ws": ("column", True), "row-vector by 1-D descriptor, ws": ("row-desc", True)}


@triton.jit
def kernel(A, B, R, C, rows, n_blocks, VECTOR: tl.constexpr, WS: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(A, shape=[rows, 64], strides=[64, 1], block_shape=[128, 64])
    b_desc = tl.make_tensor_descriptor(B, shape=[n_blocks * 64, 64], strides=[64, 1], block_shape=[64, 64])
    c_desc = tl.make_tensor_descriptor(C, shape=[rows, 64], strides=[64, 1], block_shape=[128, 64])
    m0 = tl.program_id(0) * 128
    a = a_desc.load([m0, 0])
    offs = tl.arange(0, 128)
    r = tl.zeros([128], dtype=tl.float32)
    if VECTOR == "row":
        r = tl.load(R + m0 + offs)
    if VECTOR == "row-desc":
        r_desc = tl.make_tensor_descriptor(R, shape=[rows], strides=[1], block_shape=[128])
        r = r_desc.load([m0])
    acc = tl.zeros([128, 64], dtype=tl.float32)
    for j in tl.range(0, n_blocks, warp_specialize=WS):
        b = b_desc.load([j * 64, 0])
        s = tl.dot(a, tl.trans(b))
        if VECTOR == "column":
            s = s - tl.load(R + j * 64 + tl.arange(0, 64))[None, :]
        else:
            if VECTOR == "row-in-loop":
                r = tl.load(R + m0 + offs)
            s = s - r[:, None]
        acc = tl.dot(s.to(tl.bfloat16), b, acc=acc)
    c_desc.store([m0, 0], acc.to(tl.bfloat16))


def compile_form(name: str) -> str:
    vector, ws = FORMS[name]
    sig = {"A": "*bf16", "B": "*bf16", "R": "*fp32", "C": "*bf16", "rows": "i32", "n_blocks": "i32",
           "VECTOR": "constexpr", "WS": "constexpr"}
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(4)}
    k = triton.compile(ASTSource(kernel, sig, {"VECTOR": vector, "WS": ws}, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "num_stages": 2})
    return f"compiled, {k.asm['ttgir'].count('ttg.warp_specialize(')} warp_specialize op(s)"


def main() -> int:
    if sys.argv[1:2] == ["--one"]:
        print(compile_form(sys.argv[2]))
        return 0
    print(f"triton {triton.__version__}, sm90, 4 warps, 2 stages")
    for name in FORMS:
        r = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True)
        lines = r.stderr.splitlines()
        why = [x for x in lines if "Assertion" in x or "UNREACHABLE" in x or "LLVM ERROR" in x] or [x for x in lines if "error:" in x]
        verdict = r.stdout.strip() if r.returncode == 0 else f"FAILED (exit {r.returncode}): {why[0] if why else ''}"
        print(f"  {name}: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
