"""AOT-compile mha.kernels.backward_ws.attn_bwd_dkdv_ws for sm90; dump TTGIR/PTX per stage count."""
import os, sys, tempfile
os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp())
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
sys.path.insert(0, os.path.dirname(__file__))
import importlib
mod, name = (sys.argv[3].split(":") if len(sys.argv) > 3 else ("mha.kernels.backward_ws", "attn_bwd_dkdv_ws"))
fn = getattr(importlib.import_module(mod), name)
stages = int(sys.argv[1]); out = sys.argv[2]
sig = {n: "*bf16" for n in ("Q", "K", "V", "DOut")}
sig.update(Lse="*fp32", Delta="*fp32", DK="*bf16", DV="*bf16", batch="i32", seqlen_q="i32", seqlen_k="i32",
           num_heads="i32", group="i32", qk_scale="fp32", sm_scale="fp32", HEAD="constexpr", BLOCK_M="constexpr",
           CAUSAL="constexpr")
names = list(sig)
attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("Q", "K", "V", "DOut", "Lse", "Delta", "DK", "DV")}
src = ASTSource(fn, sig, {"HEAD": 128, "BLOCK_M": 32, "CAUSAL": True}, attrs)
k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": stages})
for ext in ("ttgir", "ptx", "llir"):
    open(f"{out}.{ext}", "w").write(k.asm[ext])
print("ok", stages, k.metadata.shared)
