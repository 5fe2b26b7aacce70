#!/bin/bash
# H200 x2, run 2a (Triton 3.4.0 bundle). Run on the GPU machine as
#   bash docs/perf-study/h200/run2a.sh   carry: [.bundles34, perf_inputs]   kind: nvidia-h200-x2
# Unpacks 3.4 into /tmp/t34 (kept for run 2b while the machine stays warm), runs the kernel tests
# under 3.4 on GPU0, and on GPU1 the code-object proof against sm90 records compiled on the
# CPU-only machine (perf_inputs/co-sm90-*-triton-3.4-cpu.json) and the 3.6 PR-subset A/A pair.
set -u
export PYTHONUNBUFFERED=1
R=/tmp/res2a; rm -rf $R; mkdir -p $R
mkdir -p /tmp/t34 && tar -C /tmp/t34 -xJf .bundles34/triton-3.4.0.tar.xz
PINS34='{"toolchain":"triton-3.4","mode":"enforce","pins":{"triton":"3.4.0"}}'
PINS36='{"toolchain":"triton-3.6","mode":"enforce","pins":{"triton":"3.6.0"}}'
(
  export CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/t34:src
  timeout 170 python3 -m pytest tests/mha -q -n 8 -p no:cacheprovider --junitxml=$R/junit-3.4.xml > $R/tests-3.4.log 2>&1; echo "rc=$?" >> $R/tests-3.4.log
) &
(
  export CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/t34:src
  MHA_CI_PINS="$PINS34" timeout 60 python3 -m mha_ci.payloads.codeobj_proof --records perf_inputs/co-sm90-fp16-d64-triton-3.4-cpu.json > $R/proof-3.4.log 2>&1; echo "rc=$?" >> $R/proof-3.4.log
  export PYTHONPATH=src
  for ab in a b; do
    MHA_CI_PINS="$PINS36" timeout 50 python3 -m mha_ci.payloads.perf --shapes perf_inputs/pr/shapes.json --method perf_inputs/pr/method.json \
      --out $R/perf-3.6-pr-$ab.json --toolchain triton-3.6 --executor host > $R/perf-3.6-pr-$ab.log 2>&1; echo "rc=$?" >> $R/perf-3.6-pr-$ab.log
  done
) &
wait
tar -C $R -czf $OUT/run2a.tgz . && ls -la $OUT
