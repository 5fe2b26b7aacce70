"""Print the TTGIR of an sm90 forward compiled ahead of time (no GPU): the compiler's view, which the
interpreter (TRITON_INTERPRET=1, as the kernel tests run) never builds, so tests run this in a
process of its own without it.

    python sm90_ttgir.py '{"label": [{"causal": true}, {"warp_specialize": true, ...}, BLOCK_M or null], ...}'

prints {label: TTGIR} as JSON: one process for every compile (importing torch and Triton is most
of its time).
"""
import json
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from mha import launch


def ttgir(problem: launch.Problem, cfg: dict, block_m: int | None = None) -> str:
    spec = launch.kernel_specs(problem, "sm90", {"forward": cfg})["fwd"]
    constexprs = dict(spec.constexprs, **({"BLOCK_M": block_m} if block_m else {}))
    signature = {name: spec.signature[name] for name in spec.fn.arg_names}
    kernel = triton.compile(ASTSource(spec.fn, signature, constexprs), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})
    return kernel.asm["ttgir"]


if __name__ == "__main__":
    wanted = json.loads(sys.argv[1])
    print(json.dumps({label: ttgir(launch.Problem("bf16", 128, 128, **flags), cfg, block_m)
                      for label, (flags, cfg, block_m) in wanted.items()}))
