"""Lab (issue 39): the PTX of one code-object variant, compiled as `mha-ci checksums` compiles it.
usage: PYTHONPATH=src:<the runner's src> <toolchain python> ptx.py KEY OUT.ptx
(KEY as in perf_baselines/code_objects/, e.g. sm90/forward/default/fwd_gluon/bf16-d128-causal)"""
import sys

from mha_ci.checksums.compile import CompileTarget, compile_kernel, prepare_environment
from mha_ci.checksums.variants import enumerate_variants

target = CompileTarget.parse("cuda:90:32")
prepare_environment([target])
wanted, out = sys.argv[1], sys.argv[2]
variants = enumerate_variants("sm90", target, "mha", lambda key: key == wanted, None)
if len(variants) != 1:
    sys.exit(f"{wanted}: {len(variants)} variants match")
open(out, "w").write(compile_kernel(variants[0].task).asm["ptx"])
print(out)
