"""Compile the product's backward kernels of a few problems ahead of time (sm90 and gfx942, no
GPU) through the checksums job's own route, shipped tiles with and without `single_pass`, and
count what the pipeliner made of the dK/dV loop (sm90: cp.async copies) and the resources.

    PYTHONPATH=src <toolchain python> docs/records/2026-12-03-fused-bwd-pipelining/lab/product.py
"""
import os
import re
import tempfile

os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()

import triton  # noqa: E402

from mha import config, launch  # noqa: E402
from mha_ci.checksums.compile import CompileTarget, compile_kernel, prepare_environment  # noqa: E402
from mha_ci.checksums.resources import code_object_resources  # noqa: E402
from mha_ci.checksums.variants import task_for_spec  # noqa: E402

PROBLEMS = {"d128 causal": launch.Problem("bf16", 128, 128, causal=True),
            "d64 causal": launch.Problem("bf16", 64, 64, causal=True),
            "d192/128 causal": launch.Problem("bf16", 192, 128, causal=True)}
TARGETS = {"sm90": CompileTarget("cuda", 90, 32), "gfx942": CompileTarget("hip", "gfx942", 64)}


def main() -> None:
    prepare_environment(list(TARGETS.values()))   # the checksums job's compile environment (the ROCm linker)
    for arch, target in TARGETS.items():
        for label, problem in PROBLEMS.items():
            shipped = config.resolve("backward", arch, problem.dqk, problem.dv, problem.dtype, 0.0)[1]
            specs = launch.kernel_specs(problem, arch, {"backward": dict(shipped, single_pass=True)})
            tiles = "/".join(str(shipped[k]) for k in ("BLOCK_M1", "BLOCK_N1")) + \
                f" w{shipped['num_warps']} s{shipped['num_stages']}"
            for name in ("bwd_dkdv", "bwd_dq", "bwd_dkdv_dq"):
                kern = compile_kernel(task_for_spec(launch, specs[name], name, target))
                blob = kern.asm["cubin" if target.backend == "cuda" else "hsaco"]
                res = code_object_resources(blob, target.backend, kern.metadata.name)
                copies = len(re.findall(r"cp\.async\.c[ag]", kern.asm.get("ptx", "")))
                print(f"triton {triton.__version__} {arch} {label} (tiles {tiles}) {name}: registers "
                      f"{res.registers}, spills {res.spills}, shared {int(kern.metadata.shared)}"
                      + (f", cp.async {copies}" if target.backend == "cuda" else ""), flush=True)


if __name__ == "__main__":
    main()
