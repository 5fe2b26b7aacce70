"""Compile, for sm90 without a GPU, three ways of adding a float32 [64, 128] tile into a global dQ
buffer, and count the PTX instructions each becomes."""
import os, re, sys, tempfile
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def add_tile(DQ, X, stride, MODE: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr):
    rows = tl.arange(0, BM)
    cols = tl.arange(0, BD)
    x = tl.load(X + rows[:, None] * BD + cols[None, :])
    m0 = tl.program_id(0) * BM
    if MODE == 0:      # pointer atomics, default semantics
        tl.atomic_add(DQ + (m0 + rows)[:, None] * stride + cols[None, :], x)
    elif MODE == 1:    # pointer atomics, relaxed
        tl.atomic_add(DQ + (m0 + rows)[:, None] * stride + cols[None, :], x, sem="relaxed")
    else:              # a tensor descriptor's atomic add (TMA reduce)
        desc = tl.make_tensor_descriptor(DQ, shape=[4096, BD], strides=[stride, 1], block_shape=[BM, BD])
        desc.atomic_add([m0, 0], x)


for mode, name in ((0, "tl.atomic_add (default sem)"), (1, "tl.atomic_add(sem='relaxed')"), (2, "descriptor.atomic_add")):
    src = ASTSource(add_tile, {"DQ": "*fp32", "X": "*fp32", "stride": "i32", "MODE": "constexpr", "BM": "constexpr",
                               "BD": "constexpr"}, {"MODE": mode, "BM": 64, "BD": 128})
    try:
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    except Exception as exc:  # noqa: BLE001 - the failure is the finding
        print(f"triton {triton.__version__} {name}: compile failed: {type(exc).__name__}: {str(exc)[:150]}")
        continue
    ptx = k.asm["ptx"]
    # PTX lines start with an optional predicate ("@%p1 ").
    found = re.findall(r"^\s*(?:@!?%\w+\s+)?((?:red|atom|cp\.reduce\.async\.bulk)[\w.:]*)", ptx, re.M)
    counts = {op: found.count(op) for op in sorted(set(found))}
    print(f"triton {triton.__version__} {name}: {counts}")
