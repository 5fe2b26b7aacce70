"""Compile kernel specs of the package for sm90 ahead of time (no GPU), each several times in
fresh processes, and count the distinct code objects: is the compile deterministic?

    PYTHONPATH=src <toolchain python> compile_again.py [RUNS]          # the table
    PYTHONPATH=src <toolchain python> compile_again.py --one SPEC D CAUSAL OUT   # one compile

Each compile runs in its own process (the compile cache off, line info off) with the specs as
Triton 3.4 selects them (mha.config.triton_version pinned to 3.4.0, so that under 3.8 too the
`ws` configs are used). `--one` prints the sha of the cubin, PTX and TTGIR and writes the TTGIR
to OUT. Set ONE_THREAD=1 to compile in an MLIR context without its thread pool.
"""
import hashlib
import os
import subprocess
import sys
import tempfile
from collections import Counter

VARIANTS = [("bwd_dkdv_ws", 64, False), ("bwd_dkdv_ws", 128, True), ("bwd_dkdv_ws", 192, True),
            ("bwd_dq_ws", 64, False), ("bwd_dq_ws", 128, True),
            ("fwd", 128, False),       # the warp-specialized forward (`unmasked`): the control
            ("bwd_dkdv", 128, True)]   # the Triton dK/dV kernel: a control without the pass


def one(name: str, d: int, causal: bool, out: str) -> None:
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    import triton
    import triton.compiler.compiler as compiler
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from mha import config, launch
    if os.environ.get("ONE_THREAD"):
        make_context, ir = compiler.ir.context, compiler.ir

        class OneThread:
            def __getattr__(self, attr):
                return getattr(ir, attr)

            @staticmethod
            def context():
                context = make_context()
                context.disable_multithreading()
                return context
        compiler.ir = OneThread()
    config.triton_version = lambda: "3.4.0"
    spec = launch.kernel_specs(launch.Problem("bf16", d, 128 if d == 192 else d, causal=causal), "sm90")[name]
    aligned = launch.aligned_specialization(spec)
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(spec.fn.arg_names) if aligned.get(n) == "aligned16"}
    kernel = triton.compile(ASTSource(spec.fn, dict(spec.signature), dict(spec.constexprs), attrs),
                            target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})
    sha = {k: hashlib.sha256(kernel.asm[k] if k == "cubin" else kernel.asm[k].encode()).hexdigest()[:12]
           for k in ("cubin", "ptx", "ttgir")}
    print(sha["cubin"], sha["ptx"], sha["ttgir"])
    with open(out, "w") as f:
        f.write(kernel.asm["ttgir"])


def table(runs: int) -> None:
    import triton
    print(f"triton {triton.__version__}; {runs} compiles of each variant, each in a fresh process"
          f"{' (ONE_THREAD)' if os.environ.get('ONE_THREAD') else ''}")
    print("| spec | head dim | causal | distinct cubins | distinct TTGIRs |")
    print("|---|---|---|---|---|")
    for name, d, causal in VARIANTS:
        shas = []
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(runs):
                done = subprocess.run([sys.executable, __file__, "--one", name, str(d), str(int(causal)),
                                       f"{tmp}/{i}.ttgir"], capture_output=True, text=True, check=True)
                shas.append(done.stdout.split())
        cubins, ttgirs = Counter(s[0] for s in shas), Counter(s[2] for s in shas)
        print(f"| {name} | {d if d != 192 else '192/128'} | {causal} | {len(cubins)} | {len(ttgirs)} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        one(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5])
    else:
        table(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
