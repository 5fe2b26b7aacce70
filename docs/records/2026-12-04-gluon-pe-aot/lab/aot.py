"""Compile lab/attn_fwd_gluon_pe.py and lab/attn_bwd_gluon_pe.py ahead of time for sm90 (no GPU),
one line per variant.

    PYTHONPATH=src <triton-3.8 python> <this folder>/aot.py [FILTER]

Per variant: compiled or the error, shared memory, registers and spills (ptxas -v on the PTX,
and the SASS's highest register and LDL/STL count), setmaxnreg values and key PTX instruction
counts, by the helpers of ../../2026-12-03-gluon-forward-aot/lab/aot.py (imported, not copied).
"""
import importlib.util
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FWD_AOT = HERE.parents[1] / "2026-12-03-gluon-forward-aot" / "lab" / "aot.py"
sys.path.insert(0, str(FWD_AOT.parent))
spec = importlib.util.spec_from_file_location("fwd_aot", FWD_AOT)
A = importlib.util.module_from_spec(spec)
spec.loader.exec_module(A)            # sets TRITON_CACHE_DIR and line info off

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402

sys.path.insert(0, str(HERE))
import attn_bwd_gluon_pe as B  # noqa: E402
import attn_fwd_gluon_pe as K  # noqa: E402


def build(dqk, dv, causal, block_n, stages, el=gl.bfloat16, dstr="bf16"):
    d0, d1 = dv, dqk - dv
    sig = {"q_desc": A.desc_type(dstr, [K.ROWS, d0], K.layout(K.ROWS, d0, el)),
           "q2_desc": A.desc_type(dstr, [K.ROWS, d1], K.layout(K.ROWS, d1, el)),
           "k_desc": A.desc_type(dstr, [block_n, d0], K.layout(block_n, d0, el)),
           "k2_desc": A.desc_type(dstr, [block_n, d1], K.layout(block_n, d1, el)),
           "v_desc": A.desc_type(dstr, [block_n, dv], K.layout(block_n, dv, el)),
           "o_desc": A.desc_type(dstr, [K.ROWS, dv], K.layout(K.ROWS, dv, el)),
           "Lse": "*fp32", "qk_scale": "fp32", "seqlen_q": "i32", "seqlen_k": "i32", "num_heads_q": "i32",
           "group": "i32"}
    const = K.constexprs(dqk, dv, block_n, stages, causal)
    for name in const:
        sig[name] = "constexpr"
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("Lse", "seqlen_q", "seqlen_k")}
    return GluonASTSource(K.attn_fwd_gluon, sig, const, attrs), {"num_warps": 4, "maxnreg": K.MAXNREG}


def _bwd_source(fn, sig, const, pointers):
    for name in const:
        sig[name] = "constexpr"
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in (*pointers, "seqlen_q", "seqlen_k")}
    return GluonASTSource(fn, sig, const, attrs), {"num_warps": 4, "maxnreg": B.MAXNREG}


def build_dkdv(dqk, dv, causal, block_m, stages, el=gl.bfloat16, dstr="bf16"):
    d0, d1, rows = dv, dqk - dv, B.DKDV_KEYS // B.NUM_CONSUMERS
    box = lambda r, c: A.desc_type(dstr, [r, c], B.layout((r, c), el))      # noqa: E731
    row = A.desc_type("fp32", [block_m], B.layout((block_m,), gl.float32))
    sig = {"q_desc": box(block_m, d0), "q2_desc": box(block_m, d1), "do_desc": box(block_m, dv),
           "k_desc": box(rows, d0), "k2_desc": box(rows, d1), "v_desc": box(rows, dv), "dk_desc": box(rows, d0),
           "dk2_desc": box(rows, d1), "dv_desc": box(rows, dv), "lse_desc": row, "delta_desc": row,
           "qk_scale": "fp32", "sm_scale": "fp32", "seqlen_q": "i32", "seqlen_k": "i32", "num_heads": "i32",
           "group": "i32"}
    return _bwd_source(B.attn_bwd_dkdv_gluon_pe, sig, B.constexprs(dqk, dv, block_m, B.DKDV_KEYS, stages, causal), ())


def build_dq(dqk, dv, causal, block_n, stages, el=gl.bfloat16, dstr="bf16"):
    d0, d1, rows = dv, dqk - dv, B.DQ_ROWS // B.NUM_CONSUMERS
    box = lambda r, c: A.desc_type(dstr, [r, c], B.layout((r, c), el))      # noqa: E731
    sig = {"q_desc": box(rows, d0), "q2_desc": box(rows, d1), "do_desc": box(rows, dv), "k_desc": box(block_n, d0),
           "k2_desc": box(block_n, d1), "v_desc": box(block_n, dv), "dq_desc": box(rows, d0),
           "dq2_desc": box(rows, d1), "Lse": "*fp32", "Delta": "*fp32", "qk_scale": "fp32", "sm_scale": "fp32",
           "seqlen_q": "i32", "seqlen_k": "i32", "num_heads": "i32", "group": "i32"}
    return _bwd_source(B.attn_bwd_dq_gluon_pe, sig, B.constexprs(dqk, dv, B.DQ_ROWS, block_n, stages, causal),
                       ("Lse", "Delta"))


def variants():
    for causal in (True, False):
        c = "causal" if causal else "noncausal"
        for block_n, stages in ((128, 2), (64, 2), (64, 3), (128, 3)):
            yield f"fwd d192/128 {c} N{block_n} s{stages}", build, (192, 128, causal, block_n, stages)
        for block_m, stages in ((32, 2), (32, 3), (64, 2)):
            yield f"dkdv d192/128 {c} M{block_m} s{stages}", build_dkdv, (192, 128, causal, block_m, stages)
        for block_n, stages in ((64, 2), (64, 3), (128, 2)):
            yield f"dq d192/128 {c} N{block_n} s{stages}", build_dq, (192, 128, causal, block_n, stages)


def main():
    flt = sys.argv[1] if len(sys.argv) > 1 else ""
    print(f"triton {triton.__version__}, target cuda:90 (sm_90a), bf16, {K.NUM_CONSUMERS} consumers of "
          f"{K.ROWS} rows; ptxas and nvdisasm from the triton package")
    for label, make, args in variants():
        if flt not in label:
            continue
        src, opts = make(*args)
        t0 = time.time()
        try:
            kern = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
        except Exception as exc:  # noqa: BLE001 - a failure is a finding
            print(f"{label} | FAILED {type(exc).__name__}: {' '.join(str(exc).split())[:600]}", flush=True)
            continue
        ptx = kern.asm["ptx"]
        parts = [f"compiled {time.time() - t0:.0f}s", f"shared {kern.metadata.shared} B",
                 A.ptxas_v(ptx), A.sass_stats(kern.asm["cubin"])]
        nreg = re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)
        parts.append("setmaxnreg " + (",".join(f"{a}{n}" for a, n in nreg) or "none"))
        parts.append(", ".join(f"{k} {len(re.findall(p, ptx))}" for k, p in A.PATTERNS.items()))
        print(f"{label} | " + " | ".join(parts), flush=True)


if __name__ == "__main__":
    main()
