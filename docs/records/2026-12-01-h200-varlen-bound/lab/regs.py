# lab: registers of one sm90 kernel for a problem, compiled ahead of time (tree from PYTHONPATH)
import sys
from mha import launch
from mha_ci.checksums.compile import CompileTarget, compile_task
from mha_ci.checksums.variants import task_for_spec
dtype, d, causal, kern = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
p = launch.Problem(dtype=dtype, dqk=d, dv=d, causal=causal, window=(-1, -1), has_sink=False, dropout=len(sys.argv) > 5, varlen=True)
spec = launch.kernel_specs(p, "sm90")[kern]
t = task_for_spec(launch, spec, "x", CompileTarget("cuda", 90, 32))
r = compile_task(t)
print(kern, dtype, d, "causal" if causal else "", "regs", r.registers, "spills", r.spills, "smem", r.shared_bytes, r.error or "")
