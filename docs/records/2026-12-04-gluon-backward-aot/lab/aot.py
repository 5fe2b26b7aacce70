"""Compile the lab's Gluon backward kernels (attn_bwd_dkdv_gluon.py, attn_bwd_dq_gluon.py) ahead of
time for sm90 (no GPU), one line per variant.

    PYTHONPATH=src <triton-3.8 python> <this folder>/aot.py [FILTER]

Per variant: compiled or the error, shared memory, registers and spills (ptxas -v on the PTX,
and the SASS's highest register and LDL/STL count: with setmaxnreg, ptxas's count is the launch
value), setmaxnreg values and key PTX instruction counts. The helpers are those of
../../2026-12-03-gluon-forward-aot/lab/aot.py (imported, not copied).
"""
import importlib.util
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FWD_AOT = HERE.parents[1] / "2026-12-03-gluon-forward-aot" / "lab" / "aot.py"
sys.path.insert(0, str(FWD_AOT.parent))
spec = importlib.util.spec_from_file_location("fwd_aot", FWD_AOT)
A = importlib.util.module_from_spec(spec)
spec.loader.exec_module(A)            # sets TRITON_CACHE_DIR and line info off, as for the forward

import re  # noqa: E402

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402

sys.path.insert(0, str(HERE))
import attn_bwd_dkdv_gluon as K  # noqa: E402
import attn_bwd_dq_gluon as Q  # noqa: E402


def build_dkdv(d, causal, block_m, stages, el=gl.bfloat16, dstr="bf16"):
    qt = A.desc_type(dstr, [block_m, d], K.layout(block_m, d, el))
    kt = A.desc_type(dstr, [K.ROWS, d], K.layout(K.ROWS, d, el))
    sig = {"q_desc": qt, "do_desc": qt, "k_desc": kt, "v_desc": kt, "dk_desc": kt, "dv_desc": kt,
           "lse_desc": A.desc_type("fp32", [block_m], K.row_layout(block_m)),
           "delta_desc": A.desc_type("fp32", [block_m], K.row_layout(block_m)), "qk_scale": "fp32", "sm_scale": "fp32", "seqlen_q": "i32",
           "seqlen_k": "i32", "num_heads_k": "i32", "group": "i32"}
    const = {"HEAD_DIM": d, "HEAD_DV": d, "BLOCK_M": block_m, "BLOCK_N": K.BLOCK_N, "STAGES": stages,
             "CAUSAL": causal, "NUM_CONSUMERS": K.NUM_CONSUMERS, "LOADER_REGS": K.LOADER_REGS,
             "CONSUMER_REGS": K.CONSUMER_REGS}
    for name in const:
        sig[name] = "constexpr"
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("seqlen_q", "seqlen_k")}
    return GluonASTSource(K.attn_bwd_dkdv_gluon, sig, const, attrs), {"num_warps": 4, "maxnreg": K.MAXNREG}


def build_dq(d, causal, block_n, stages, el=gl.bfloat16, dstr="bf16"):
    qt = A.desc_type(dstr, [Q.ROWS, d], Q.layout(Q.ROWS, d, el))
    kt = A.desc_type(dstr, [block_n, d], Q.layout(block_n, d, el))
    sig = {"q_desc": qt, "do_desc": qt, "k_desc": kt, "v_desc": kt, "dq_desc": qt, "Lse": "*fp32",
           "Delta": "*fp32", "qk_scale": "fp32", "sm_scale": "fp32", "seqlen_q": "i32", "seqlen_k": "i32",
           "num_heads_q": "i32", "group": "i32"}
    const = {"HEAD_DIM": d, "HEAD_DV": d, "BLOCK_M": Q.BLOCK_M, "BLOCK_N": block_n, "STAGES": stages,
             "CAUSAL": causal, "NUM_CONSUMERS": Q.NUM_CONSUMERS, "LOADER_REGS": Q.LOADER_REGS,
             "CONSUMER_REGS": Q.CONSUMER_REGS}
    for name in const:
        sig[name] = "constexpr"
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("Lse", "Delta", "seqlen_q", "seqlen_k")}
    return GluonASTSource(Q.attn_bwd_dq_gluon, sig, const, attrs), {"num_warps": 4, "maxnreg": Q.MAXNREG}


def variants():
    for d in (64, 128):
        for causal in (False, True):
            c = "causal" if causal else "noncausal"
            for block_m, stages in ((64, 2), (64, 3), (128, 2)):
                yield f"dkdv d{d} {c} M{block_m} s{stages}", build_dkdv, (d, causal, block_m, stages)
            for block_n, stages in ((64, 2), (64, 3), (128, 2)):
                yield f"dq d{d} {c} N{block_n} s{stages}", build_dq, (d, causal, block_n, stages)


def main():
    flt = sys.argv[1] if len(sys.argv) > 1 else ""
    print(f"triton {triton.__version__}, target cuda:90 (sm_90a), bf16, {K.NUM_CONSUMERS} consumers; "
          f"dkdv: BLOCK_N {K.BLOCK_N} keys per program; dq: BLOCK_M {Q.BLOCK_M} rows per program; "
          "ptxas and nvdisasm from the triton package")
    for label, build, args in variants():
        if flt not in label:
            continue
        src, opts = build(*args)
        t0 = time.time()
        try:
            kern = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
        except Exception as exc:  # noqa: BLE001 - a failure is a finding
            print(f"{label} | FAILED {type(exc).__name__}: {' '.join(str(exc).split())[:2500]}", flush=True)
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
