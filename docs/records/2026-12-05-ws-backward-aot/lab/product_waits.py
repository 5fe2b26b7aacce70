"""The wgmma waits of the product's sm90 backward kernels (bf16, d128, causal), for comparison with
the lab kernels' (aot.py prints theirs): how many `wgmma.wait_group N` the PTX holds for each N.
N = 0 waits for every MMA issued; N = 1 leaves one group in flight (a softmax overlapping an MMA).

    PYTHONPATH=src <toolchain python> <this folder>/product_waits.py
"""
import os
import re
import tempfile

os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp())

import triton  # noqa: E402

from mha import launch  # noqa: E402
from mha_ci.checksums.compile import CompileTarget, compile_kernel  # noqa: E402
from mha_ci.checksums.variants import task_for_spec  # noqa: E402


def main() -> None:
    print(f"triton {triton.__version__}, sm90, bf16 d128 causal, the shipped configs")
    specs = launch.kernel_specs(launch.Problem(dtype="bf16", dqk=128, dv=128, causal=True), "sm90", None)
    for name, spec in specs.items():
        if not name.startswith("bwd_d"):
            continue
        ptx = compile_kernel(task_for_spec(launch, spec, name, CompileTarget("cuda", 90, 32))).asm["ptx"]
        waits = re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)
        print(f"  {name}: wgmma.wait_group {dict(sorted((w, waits.count(w)) for w in set(waits)))}")


if __name__ == "__main__":
    main()
