"""Lab: AOT-compile sm90 forward variants through the checksums route (task_for_spec), keep
TTGIR/PTX, report WS markers, registers, spills, shared memory and the cubin sha256.

    PYTHONPATH=src <toolchain venv>/bin/python /tmp/ws_lab/compile_ws.py OUTDIR NAME[,NAME...]
NAME = dims-causal-kind, dims in d64|d128|d192x128, causal in plain|causal, kind in
ws (the config: warp_specialize true), wsoff (attn_fwd_ws, WARP_SPECIALIZE False), ws8 (ws, num_warps 8), wsoff8 (wsoff, num_warps 8),
base (the sm90 file's bucket: attn_fwd, as the records).
"""
import hashlib, json, os, re, sys, tempfile, time
from pathlib import Path

os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="ws-lab-cache-")
import triton
from triton.compiler import ASTSource
from mha import launch
from mha_ci.checksums.compile import CompileTarget, backend_class, _gpu_target
from mha_ci.checksums.resources import code_object_resources
from mha_ci.checksums.variants import task_for_spec
import importlib

TARGET = CompileTarget("cuda", 90, 32)
DIMS = {"d64": (64, 64), "d128": (128, 128), "d192x128": (192, 128)}
WS_CFG = {"d64": dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=2),
          "d128": dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2),
          "d192x128": dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=2)}
extra = json.loads(os.environ.get("WS_CFG", "{}"))


def spec_for(name):
    dims, feat, kind = name.split("-")
    dqk, dv = DIMS[dims]
    prob = launch.Problem("bf16", dqk, dv, causal=(feat == "causal"))
    if kind == "base":
        return launch.kernel_specs(prob, "sm90")["fwd"]
    cfg = dict(WS_CFG[dims], warp_specialize=True, **extra)
    if kind == "ws8":
        cfg["num_warps"] = 8
    spec = launch.kernel_specs(prob, "sm90", {"forward": cfg})["fwd"]
    if kind in ("wsoff", "wsoff8"):
        spec.constexprs["WARP_SPECIALIZE"] = False
    if kind == "wsoff8":
        spec = launch.KernelSpec(spec.name, spec.fn, spec.signature, spec.constexprs, 8, spec.num_stages, spec.bucket, spec.pass_)
    return spec


def compile_one(name, out: Path):
    spec = spec_for(name)
    task = task_for_spec(launch, spec, name, TARGET)
    t0 = time.monotonic()
    fn = importlib.import_module(task.module)
    for part in task.qualname.split("."):
        fn = getattr(fn, part)
    backend = backend_class(TARGET)
    names = list(fn.arg_names)
    attrs = {(names.index(a),): backend.parse_attr(d) for a, d in task.attr_descs}
    src = ASTSource(fn, dict(task.signature), dict(task.constexprs), attrs)
    try:
        k = triton.compile(src, target=_gpu_target(TARGET), options={"num_warps": task.num_warps,
                                                                     "num_stages": task.num_stages})
    except Exception as exc:  # noqa
        msg = f"{type(exc).__name__}: {exc}"
        c = exc.__cause__
        while c is not None:
            msg += f"\n caused by {type(c).__name__}: {c}"
            c = c.__cause__
        return {"name": name, "error": msg[-3000:], "seconds": round(time.monotonic() - t0, 1)}
    blob = k.asm["cubin"]
    for ext in ("ttgir", "ptx"):
        (out / f"{name}.{ext}").write_text(k.asm[ext])
    res = code_object_resources(blob, "cuda", k.metadata.name)
    ttgir, ptx = k.asm["ttgir"], k.asm["ptx"]
    return {"name": name, "fn": spec.fn.fn.__name__, "cfg": [spec.constexprs["BLOCK_M"], spec.constexprs["BLOCK_N"],
            task.num_warps, task.num_stages], "sha256": hashlib.sha256(blob).hexdigest()[:16],
            "registers": res.registers, "spills": res.spills, "shared": int(k.metadata.shared),
            "warp_specialize_ops": ttgir.count("ttg.warp_specialize"),
            "partition_warps": [int(x) for x in re.findall(r"\) num_warps\((\d+)\)", ttgir)],
            "setmaxnreg": sorted(set(re.sub(r"\s+", " ", x) for x in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+\d+", ptx))),
            "tma_loads": ptx.count("cp.async.bulk.tensor"), "wgmma": ptx.count("wgmma.mma_async"),
            "seconds": round(time.monotonic() - t0, 1)}


if __name__ == "__main__":
    out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2].split(","):
        r = compile_one(name, out)
        r["triton"] = triton.__version__
        print(json.dumps(r), flush=True)
        with open(out / "results.jsonl", "a") as f:
            f.write(json.dumps(r) + "\n")
