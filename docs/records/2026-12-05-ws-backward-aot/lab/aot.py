"""Compile lab/attn_bwd_ws.py ahead of time for sm90 (no GPU) and print, per variant, what
Triton's Hopper warp-specialization pass made of it.

    PYTHONPATH=src <toolchain python> <this folder>/aot.py [FILTER]
    PYTHONPATH=src <toolchain python> <this folder>/aot.py --ttgir "VARIANT" OUT.ttgir   # one variant's TTGIR

Per variant (bf16, 4 warps; the kernel; head dim 64 or 128; causal or not; the block that steps:
query rows for dK/dV, whose key tile is 128, keys for dQ, whose query tile is 128; the loop
warp-specialized or not; stages): compiled or the error; shared memory; registers and spills
(mha_ci's reader of the cubin: the launch value and the local frame); the highest register and
the LDL/STL count in the SASS; the wgmma.wait_group counts by pending groups allowed (0: each MMA
waited on at once), setmaxnreg values, wgmma and TMA loads in the PTX; the dots of each partition
in the TTGIR.
"""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp())
sys.path.insert(0, str(Path(__file__).resolve().parent))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from attn_bwd_ws import attn_bwd_dkdv_ws, attn_bwd_dq_ws  # noqa: E402
from mha_ci.checksums.resources import code_object_resources  # noqa: E402

OUTPUTS = {"dkdv": {"DK": "*bf16", "DV": "*bf16"}, "dq": {"DQ": "*bf16"}}
INPUTS = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "DO": "*bf16", "Lse": "*fp32", "Delta": "*fp32"}
SCALARS = {"batch": "i32", "seqlen_q": "i32", "seqlen_k": "i32", "num_heads_k": "i32", "group": "i32",
        "qk_scale": "fp32", "sm_scale": "fp32"}
ALIGNED = ("Q", "K", "V", "DO", "Lse", "Delta", "DK", "DV", "DQ", "seqlen_q", "seqlen_k")
BLOCKS = {"dkdv": (32, 64, 128), "dq": (64, 128), "dq-pointer": (64, 128)}
HEADS = {"dkdv": (128, 64, 192), "dq": (128, 64), "dq-pointer": (128, 64)}     # Dqk; Dv is 128 for 192


def variants():
    for kernel in ("dkdv", "dq", "dq-pointer"):
        for head in HEADS[kernel]:
            for causal in (True, False):
                for block in BLOCKS[kernel]:
                    for ws in (True, False):
                        for stages in (2, 3):
                            yield kernel, head, causal, block, ws, stages


def compile_one(kernel, head, causal, block, ws, stages):
    tiles = {"BLOCK_M": block, "BLOCK_N": 128} if kernel == "dkdv" else {"BLOCK_M": 128, "BLOCK_N": block}
    const = {"HEAD": min(head, 128), **tiles, "CAUSAL": causal, "WARP_SPECIALIZE": ws}
    if kernel == "dkdv":
        const["HEAD_TAIL"] = head - min(head, 128)
    if kernel != "dkdv":
        const["ROW_STATS"] = "pointer" if kernel == "dq-pointer" else "descriptor"
    outputs = OUTPUTS["dkdv" if kernel == "dkdv" else "dq"]
    sig = {**INPUTS, **outputs, **SCALARS, **{k: "constexpr" for k in const}}
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ALIGNED if n in sig}
    source = ASTSource(attn_bwd_dkdv_ws if kernel == "dkdv" else attn_bwd_dq_ws, sig, const, attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": stages})


def sass_local(cubin: bytes) -> str:
    """The SASS's highest register index and its local-memory instructions (LDL/STL: spill
    traffic). With setmaxnreg the launch value (.maxnreg) is not what the partitions use."""
    nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([str(nvdisasm), "-c", f.name], capture_output=True, text=True, check=True).stdout
    top = max((int(r) for r in re.findall(r"\bR(\d+)\b", sass)), default=-1)
    local = len(re.findall(r"\b(?:LDL|STL)\b", sass))
    return f"SASS max R{top}, LDL/STL {local}"


def describe(kernel) -> str:
    res = code_object_resources(kernel.asm["cubin"], "cuda", kernel.metadata.name)
    ttgir, ptx = kernel.asm["ttgir"], kernel.asm["ptx"]
    parts = re.split(r"\n\s+(partition\d+)\(", ttgir)
    groups = []
    for label, body in zip(parts[1::2], parts[2::2]):
        dots = re.findall(r"ttng.warp_group_dot .*-> tensor<(\d+)x(\d+)xf32", body)
        loads = len(re.findall(r"ttng.async_tma_copy_global_to_local|ttng.async_copy_global_to_local", body))
        groups.append(f"{label}: {len(dots)} dots {sorted(set(f'{m}x{n}' for m, n in dots))}, {loads} TMA loads")
    regs = sorted({f"{d} {n}" for d, n in re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)})
    main_dots = sorted(set(f"{m}x{n}" for m, n in re.findall(r"ttng.warp_group_dot .*-> tensor<(\d+)x(\d+)xf32",
                                                           ttgir)))
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)
    lines = [f"shared {kernel.metadata.shared} B, registers {res.registers}, spills {res.spills}, "
             f"{sass_local(kernel.asm['cubin'])}, "
             f"wgmma.wait_group {dict(sorted((w, waits.count(w)) for w in set(waits)))}, "
             f"setmaxnreg {regs or '-'}, wgmma {ptx.count('wgmma.mma_async')}, "
             f"TMA loads {ptx.count('cp.async.bulk.tensor')}, dots {main_dots}"]
    lines += [f"      {g}" for g in groups] or ["      no partitions"]
    return "\n".join(lines)


def one(name: str) -> str:
    variant = next(v for v in variants() if label(*v) == name)
    try:
        return describe(compile_one(*variant))
    except Exception as exc:  # noqa: BLE001 - the failure is the finding
        msg = str(exc).strip().splitlines()
        cause = exc.__cause__ or exc.__context__
        text = f"compile failed: {type(exc).__name__}: {(msg[0] if msg else '')[:160]}"
        if cause is not None:
            text += f" <- {type(cause).__name__}: {str(cause).strip()[:160]}"
        return text


def label(kernel, head, causal, block, ws, stages) -> str:
    step = "BLOCK_M" if kernel == "dkdv" else "BLOCK_N"
    return f"{kernel} d{head} {'causal' if causal else 'full'} {step} {block} {'ws' if ws else 'no-ws'} s{stages}"


def main() -> int:
    """Each variant compiles in a process of its own: a failed assertion in the pass aborts the
    process (SIGABRT), which is then the variant's finding."""
    if sys.argv[1:2] == ["--one"]:
        print(one(sys.argv[2]), flush=True)
        return 0
    if sys.argv[1:2] == ["--ttgir"]:
        variant = next(v for v in variants() if label(*v) == sys.argv[2])
        Path(sys.argv[3]).write_text(compile_one(*variant).asm["ttgir"])
        return 0
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    print(f"triton {triton.__version__}, sm90, bf16, 4 warps", flush=True)
    for v in variants():
        name = label(*v)
        if only not in name:
            continue
        r = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True)
        lines = r.stderr.splitlines()
        asserts = [x for x in lines if "Assertion" in x or "UNREACHABLE" in x or "LLVM ERROR" in x] or [x for x in lines if "error:" in x]
        if r.returncode == 0:
            text = r.stdout.strip() + (f" [{asserts[0][-200:]}]" if asserts else "")
        else:
            text = f"compile aborted (exit {r.returncode}): {(asserts[0] if asserts else r.stderr.strip()[-200:])[-220:]}"
        print(f"  {name}: {text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
