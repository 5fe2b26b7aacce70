"""Host time a call spends building its kernel specs: launch.kernel_specs (what every call built
before launch.call_specs) against launch.call_specs (cached per problem), per problem, in us.
CPU only; run from the repository root with a toolchain venv's python:
    PYTHONPATH=src <venv>/bin/python docs/records/2026-12-07-host-overhead/lab/specs_time.py"""
import timeit

import triton

from mha import launch

N = 2000
print(f"triton {triton.__version__}; sm90; median of 5 runs of {N} calls, us per call")
for dqk, dv, causal in [(64, 64, True), (128, 128, True), (192, 128, True), (128, 128, False)]:
    p = launch.Problem(dtype="bf16", dqk=dqk, dv=dv, causal=causal)
    row = []
    for name, fn in (("kernel_specs", launch.kernel_specs), ("call_specs", launch.call_specs)):
        fn(p, "sm90")
        runs = sorted(timeit.repeat(lambda: fn(p, "sm90"), number=N, repeat=5))
        row.append(f"{name} {runs[2] / N * 1e6:7.2f}")
    print(f"bf16 d{dqk}/{dv} {'causal' if causal else 'full  '}: " + "  ".join(row))
