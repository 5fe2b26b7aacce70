"""Compile, for sm90 without a GPU, the key-block loop of a single-pass backward (dK/dV in registers,
each step's dQ share = dS @ K added into a float32 buffer) in several forms of that add, and count
what Triton's software pipeliner made of the loop's Q/dO loads.

    PYTHONPATH=src python pipe.py [BLOCK_M BLOCK_N D WARPS STAGES]   (from the repository root, under
    the Triton to test; one line per form)
"""
import os, re, sys, tempfile
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from mha_ci.checksums.compile import code_object_resources

FORMS = {0: "no dQ (the dK/dV kernel's loop)", 1: "dQ: plain tl.store", 2: "dQ: tl.atomic_add (acq_rel)",
         3: "dQ: tl.atomic_add(sem='relaxed')", 4: "dQ: descriptor atomic_add (TMA reduce)",
         5: "dQ: tl.atomic_add with a row mask", 6: "dQ: tl.atomic_add, then a CTA barrier (tl.debug_barrier)",
         7: "dQ: descriptor atomic_add, then a CTA barrier"}


@triton.jit
def loop(Q, K, V, DO, Lse, Delta, DQ, DK, DV, seqlen_q, stride_s, n_blocks,
         FORM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    n0 = tl.program_id(0) * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    k = tl.load(K + offs_n[:, None] * stride_s + offs_d[None, :])
    v = tl.load(V + offs_n[:, None] * stride_s + offs_d[None, :])
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    if FORM == 4 or FORM == 7:
        dq_desc = tl.make_tensor_descriptor(DQ, shape=[seqlen_q, D], strides=[D, 1], block_shape=[BLOCK_M, D])
    for i in range(0, n_blocks):
        start_m = i * BLOCK_M
        offs_m = start_m + tl.arange(0, BLOCK_M)
        qt = tl.load(Q + offs_m[None, :] * stride_s + offs_d[:, None])
        do = tl.load(DO + offs_m[:, None] * stride_s + offs_d[None, :])
        lse = tl.load(Lse + offs_m)
        delta = tl.load(Delta + offs_m)
        pt = tl.math.exp2(tl.dot(k, qt) - lse[None, :])
        dv = tl.dot(pt.to(tl.bfloat16), do, dv)
        dpt = tl.dot(v, tl.trans(do))
        dst = (pt * (dpt - delta[None, :])).to(tl.bfloat16)
        dk = tl.dot(dst, tl.trans(qt), dk)
        if FORM > 0:
            dq = tl.dot(tl.trans(dst), k)      # [BLOCK_M, D] float32
            ptrs = DQ + offs_m[:, None] * D + offs_d[None, :]
            if FORM == 1:
                tl.store(ptrs, dq)
            elif FORM == 2:
                tl.atomic_add(ptrs, dq)
            elif FORM == 3:
                tl.atomic_add(ptrs, dq, sem="relaxed")
            elif FORM == 5:
                tl.atomic_add(ptrs, dq, mask=offs_m[:, None] < seqlen_q)
            elif FORM == 6:
                tl.atomic_add(ptrs, dq)
                tl.debug_barrier()
            elif FORM == 4:
                dq_desc.atomic_add([start_m, 0], dq)
            else:
                dq_desc.atomic_add([start_m, 0], dq)
                tl.debug_barrier()
    tl.store(DK + offs_n[:, None] * D + offs_d[None, :], dk)
    tl.store(DV + offs_n[:, None] * D + offs_d[None, :], dv)


PRED = r"^\s*(?:@!?%\w+\s+)?"          # PTX lines start with an optional predicate
PATTERNS = {  # what is counted, in which text
    "cp.async": ("ptx", PRED + r"cp\.async\.c[ag]"),
    "TTGIR async_copy": ("ttgir", r"ttg\.async_copy_global_to_local"),
    "reduce.async.bulk": ("ptx", r"cp\.reduce\.async\.bulk"),
    "atom": ("ptx", PRED + r"atom\."),
    "wgmma": ("ptx", r"wgmma\.mma_async"),
}


def counts(kern) -> str:
    found = [f"{what} {len(re.findall(pat, kern.asm[stage], re.M))}" for what, (stage, pat) in PATTERNS.items()]
    res = code_object_resources(kern.asm["cubin"], "cuda", kern.metadata.name)
    return ", ".join(found + [f"registers {res.registers}", f"spills {res.spills}"])


def main():
    block_m, block_n, d, warps, stages = (int(x) for x in (sys.argv[1:] or ["64", "128", "128", "8", "2"]))
    sig = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "DO": "*bf16", "Lse": "*fp32", "Delta": "*fp32",
           "DQ": "*fp32", "DK": "*fp32", "DV": "*fp32", "seqlen_q": "i32", "stride_s": "i32", "n_blocks": "i32",
           "FORM": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "D": "constexpr"}
    # Every pointer and the row stride 16-aligned, as the product's launches specialize them.
    aligned = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 4, 5, 6, 7, 8, 10)}
    for form, name in FORMS.items():
        src = ASTSource(loop, sig, {"FORM": form, "BLOCK_M": block_m, "BLOCK_N": block_n, "D": d}, aligned)
        head = f"triton {triton.__version__} M{block_m} N{block_n} d{d} w{warps} s{stages} | {name} |"
        try:
            kern = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": warps, "num_stages": stages})
        except Exception as exc:  # noqa: BLE001 - a failure is a finding
            print(f"{head} compile failed: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
            continue
        print(f"{head} {counts(kern)}", flush=True)


if __name__ == "__main__":
    main()
