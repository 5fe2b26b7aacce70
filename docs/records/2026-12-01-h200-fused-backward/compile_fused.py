# lab (not product): AOT-compile the sm90 backward kernels of one problem per item through the checksums route
# and report registers, spills, shared memory and cp.async count (whether the loads were pipelined).
# PYTHONPATH=src <triton-3.4 venv>/bin/python compile_fused.py OUTDIR "name:dqk:dv:c|p:{backward config json}[;...]"
import sys, os, json, hashlib, re, time, importlib, tempfile
os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="cf-"))
import triton
from triton.compiler import ASTSource
from pathlib import Path
from mha import launch
from mha_ci.checksums.compile import CompileTarget, backend_class, _gpu_target
from mha_ci.checksums.resources import code_object_resources
from mha_ci.checksums.variants import task_for_spec
TARGET = CompileTarget("cuda", 90, 32)
out = Path(sys.argv[1]); out.mkdir(exist_ok=True)
for item in sys.argv[2].split(";"):
    name, dqk, dv, causal, extra = item.split(":", 4)
    cfg = json.loads(extra) if extra else {}
    prob = launch.Problem("bf16", int(dqk), int(dv), causal=causal == "c")
    specs = launch.kernel_specs(prob, "sm90", {"backward": cfg} if cfg else None)
    for sname, spec in specs.items():
        if not sname.startswith("bwd_dk") and sname != "bwd_dq":
            continue
        task = task_for_spec(launch, spec, name, TARGET)
        fn = importlib.import_module(task.module)
        for part in task.qualname.split("."):
            fn = getattr(fn, part)
        backend = backend_class(TARGET)
        names = list(fn.arg_names)
        attrs = {(names.index(a),): backend.parse_attr(d) for a, d in task.attr_descs}
        src = ASTSource(fn, dict(task.signature), dict(task.constexprs), attrs)
        t0 = time.monotonic()
        try:
            k = triton.compile(src, target=_gpu_target(TARGET), options={"num_warps": task.num_warps, "num_stages": task.num_stages})
        except Exception as e:
            import traceback; traceback.print_exc(); continue
        for ext in ("ttgir", "ptx"):
            (out / f"{name}-{sname}.{ext}").write_text(k.asm[ext])
        res = code_object_resources(k.asm["cubin"], "cuda", k.metadata.name)
        ptx = k.asm["ptx"]
        print(name, sname, dict(regs=res.registers, spills=res.spills, shared=int(k.metadata.shared),
              cp_async=ptx.count("cp.async.cg") + ptx.count("cp.async.ca"), wgmma=ptx.count("wgmma.mma_async"),
              red=len(re.findall(r"\bred\.global|\batom\.global", ptx)), secs=round(time.monotonic() - t0, 1)), flush=True)
