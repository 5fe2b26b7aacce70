"""Print the TTGIR of an sm90 forward compiled ahead of time (no GPU), the way the checksums job
compiles a variant: the compiler's view, which the interpreter (TRITON_INTERPRET=1, as the kernel
tests run) never builds, so tests run this in a process of its own without it.

    python sm90_ttgir.py '{"label": [{"causal": true}, {"warp_specialize": true, ...}, BLOCK_M or null], ...}'

prints {label: TTGIR} as JSON: one process for every compile (importing torch and Triton is most
of its time).
"""
import dataclasses
import json
import sys

from mha import launch
from mha_ci.checksums.compile import CompileTarget, compile_kernel
from mha_ci.checksums.variants import task_for_spec


def ttgir(problem: launch.Problem, cfg: dict, block_m: int | None = None) -> str:
    spec = launch.kernel_specs(problem, "sm90", {"forward": cfg})["fwd"]
    if block_m:
        spec = dataclasses.replace(spec, constexprs=dict(spec.constexprs, BLOCK_M=block_m))
    return compile_kernel(task_for_spec(launch, spec, "ttgir", CompileTarget("cuda", 90, 32))).asm["ttgir"]


if __name__ == "__main__":
    wanted = json.loads(sys.argv[1])
    print(json.dumps({label: ttgir(launch.Problem("bf16", 128, 128, **flags), cfg, block_m)
                      for label, (flags, cfg, block_m) in wanted.items()}))
