"""Compile lab/attn_fwd_gluon.py's kernel ahead of time for sm90 (no GPU), one line per variant.

    PYTHONPATH=src python docs/records/2026-12-03-gluon-forward-aot/lab/aot.py [FILTER]

(from the repository root, under the Triton to test; FILTER: only variants whose label contains
it). Per variant: compiled or the error, shared memory bytes (metadata "shared"), registers and
spills (the cubin's .nv.info through mha_ci.checksums.resources, and ptxas -v on the PTX), the
highest register index and LDL/STL count in the SASS (nvdisasm), the setmaxnreg values in the
PTX, and counts of key PTX instructions.
"""
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="gluon-aot-")
os.environ["TRITON_DISABLE_LINE_INFO"] = "1"

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attn_fwd_gluon as K  # noqa: E402

try:
    from mha_ci.checksums.resources import code_object_resources
except ImportError:  # run without the project's src on the path: ptxas -v only
    code_object_resources = None

PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
PATTERNS = {
    "wgmma.mma_async": r"wgmma\.mma_async",
    "wgmma.wait_group": r"wgmma\.wait_group",
    "cp.async.bulk.tensor(load)": r"cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global",
    "cp.async.bulk.tensor(store)": r"cp\.async\.bulk\.tensor\.\dd\.global\.shared",
    "mbarrier.try_wait": r"mbarrier\.try_wait",
    "mbarrier.arrive": r"mbarrier\.arrive\.shared",
    "mbarrier.arrive.expect_tx": r"mbarrier\.arrive\.expect_tx",
    "bar.sync(named,partition)": r"\bbar\.sync\s+\d+,",
    "barrier.sync": r"\bbarrier\.sync",
    "ex2": r"ex2\.approx",
    "fence.proxy.async": r"fence\.proxy\.async",
}


def desc_type(dtype_str, block, layout):
    # What the runtime's TensorDescriptor.__mangle__ gives for a gluon descriptor argument.
    return f"tensordesc<{dtype_str}[{','.join(map(str, block))}],{layout!r}>"


def build(d, causal, block_n, stages, consumers, el=gl.bfloat16, dstr="bf16"):
    rows = K.BLOCK_M // consumers
    q_layout = gl.NVMMASharedLayout.get_default_for([rows, d], el)
    kv_layout = gl.NVMMASharedLayout.get_default_for([block_n, d], el)
    num_warps, maxnreg, loader_regs, consumer_regs = K.launch_options(consumers)
    sig = {"q_desc": desc_type(dstr, [rows, d], q_layout), "k_desc": desc_type(dstr, [block_n, d], kv_layout),
           "v_desc": desc_type(dstr, [block_n, d], kv_layout), "o_desc": desc_type(dstr, [rows, d], q_layout),
           "Lse": "*fp32", "qk_scale": "fp32", "seqlen_q": "i32", "seqlen_k": "i32", "num_heads_q": "i32",
           "group": "i32"}
    const = {"HEAD_DIM": d, "BLOCK_M": K.BLOCK_M, "BLOCK_N": block_n, "STAGES": stages, "CAUSAL": causal,
             "NUM_CONSUMERS": consumers, "LOADER_REGS": loader_regs, "CONSUMER_REGS": consumer_regs}
    for name in const:
        sig[name] = "constexpr"
    # The runtime marks a 16-byte aligned pointer and ints divisible by 16 ("D"): Lse, the
    # sequence lengths (multiples of 128) and, for the bench shapes, num_heads_q.
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("Lse", "seqlen_q", "seqlen_k")}
    src = GluonASTSource(K.attn_fwd_kernel, sig, const, attrs)
    opts = {"num_warps": num_warps, "maxnreg": maxnreg}
    return src, opts


def ptxas_v(ptx, arch="sm_90a"):
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "k.ptx"
        p.write_text(ptx)
        r = subprocess.run([str(PTXAS), "-v", f"--gpu-name={arch}", str(p), "-o", str(Path(tmp) / "k.cubin")],
                           capture_output=True, text=True, timeout=600)
    text = r.stdout + r.stderr
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    stack = re.search(r"(\d+) bytes stack frame", text)
    return (f"ptxas -v: regs {regs.group(1) if regs else '?'}, stack {stack.group(1) if stack else '?'} B, "
            f"spill st/ld {spill.group(1) + '/' + spill.group(2) if spill else '?'} B")


def sass_stats(cubin):
    """Highest general register index in the SASS and local-memory (spill) instructions: with
    setmaxnreg, ptxas's "Used N registers" is the launch value, the partitions may use more."""
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "k.cubin"
        p.write_bytes(cubin)
        r = subprocess.run([str(PTXAS.parent / "nvdisasm"), "-c", str(p)], capture_output=True, text=True,
                           timeout=600)
    sass = r.stdout
    regs = [int(x) for x in re.findall(r"\bR(\d+)\b", sass)]
    local = len(re.findall(r"\b(?:LDL|STL)\b", sass))
    return f"SASS: max R{max(regs) if regs else '?'}, LDL/STL {local}"


def main():
    flt = sys.argv[1] if len(sys.argv) > 1 else ""
    variants = []
    for consumers in (2, 1):
        for d in (64, 128):
            for causal in (False, True):
                for block_n in (64, 128):
                    for stages in (2, 3):
                        if consumers == 1 and (block_n, stages) != K.DEFAULTS[d]:
                            continue   # the one-consumer step: default tiles only
                        variants.append((d, causal, block_n, stages, consumers))
    print(f"triton {triton.__version__}, target cuda:90 (sm_90a), bf16, BLOCK_M {K.BLOCK_M}; "
          "ptxas and nvdisasm from the triton package")
    for d, causal, block_n, stages, consumers in variants:
        label = (f"d{d} {'causal' if causal else 'noncausal'} M{K.BLOCK_M} N{block_n} s{stages} "
                 f"consumers{consumers}")
        if flt not in label:
            continue
        src, opts = build(d, causal, block_n, stages, consumers)
        t0 = time.time()
        try:
            kern = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
        except Exception as exc:  # noqa: BLE001 - a failure is a finding
            msg = " ".join(str(exc).split())
            print(f"{label} | FAILED {type(exc).__name__}: {msg[:1500]}", flush=True)
            continue
        secs = time.time() - t0
        ptx = kern.asm["ptx"]
        md = kern.metadata
        parts = [f"compiled {secs:.0f}s", f"maxnreg {opts['maxnreg']}", f"shared {md.shared} B"]
        if code_object_resources is not None:
            res = code_object_resources(kern.asm["cubin"], "cuda", md.name)
            parts.append(f"cubin: regs {res.registers}, spills {res.spills}")
        parts.append(ptxas_v(ptx))
        parts.append(sass_stats(kern.asm["cubin"]))
        nreg = re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)
        parts.append("setmaxnreg " + (",".join(f"{a}{n}" for a, n in nreg) or "none"))
        parts.append(", ".join(f"{k} {len(re.findall(p, ptx))}" for k, p in PATTERNS.items()))
        print(f"{label} | " + " | ".join(parts), flush=True)


if __name__ == "__main__":
    main()
