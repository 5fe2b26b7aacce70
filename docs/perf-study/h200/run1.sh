#!/bin/bash
# H200 x2, run 1 (Triton 3.6.0 of the image). Run on the GPU machine as
#   bash docs/perf-study/h200/run1.sh   carry: [.bundles34, perf_inputs]   kind: nvidia-h200-x2
# GPU0: perf full set twice (A/A) and the PR subset with a planted 5 % slowdown on dense shapes.
# GPU1: the kernel tests (bf16 included), the bench, and the code-object proof for 3.6.
# It also unpacks the Triton 3.4 bundle into /tmp/t34 for run 2 (kept while the machine is warm).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=src
R=/tmp/res; rm -rf $R; mkdir -p $R
(mkdir -p /tmp/t34 && tar -C /tmp/t34 -xJf .bundles34/triton-3.4.0.tar.xz && echo unpacked > $R/t34.ok) &
nvidia-smi > $R/nvidia-smi.txt 2>&1; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)" >> $R/nvidia-smi.txt
PINS36='{"toolchain":"triton-3.6","mode":"enforce","pins":{"triton":"3.6.0"}}'
perf() { # name subset timeout [extra env...]
  local name=$1 subset=$2 t=$3; shift 3
  env "$@" MHA_CI_PINS="$PINS36" timeout $t python3 -m mha_ci.payloads.perf --shapes perf_inputs/$subset/shapes.json \
    --method perf_inputs/$subset/method.json --out $R/$name.json --toolchain triton-3.6 --executor host \
    --dump-dispatches $R/$name.dispatches.json > $R/$name.log 2>&1; echo "rc=$?" >> $R/$name.log
}
(
  export CUDA_VISIBLE_DEVICES=0
  perf perf-3.6-full-a full 230
  perf perf-3.6-full-b full 200
  perf perf-3.6-pr-planted pr 70 MHA_PERF_PLANT_SLOWDOWN=5 MHA_PERF_PLANT_KEYS='dense_*'
) &
(
  export CUDA_VISIBLE_DEVICES=1
  timeout 200 python3 -m pytest tests/mha -q -n 8 -p no:cacheprovider --junitxml=$R/junit-3.6.xml > $R/tests-3.6.log 2>&1; echo "rc=$?" >> $R/tests-3.6.log
  timeout 150 python3 -m mha.bench --out $R/bench-3.6.md > $R/bench-3.6.log 2>&1; echo "rc=$?" >> $R/bench-3.6.log
  MHA_CI_OUT=$R MHA_CI_PINS="$PINS36" timeout 100 python3 -m mha_ci.payloads.checksums compute --target sm90=cuda:90:32 \
    --out co-3.6.json --jobs 8 --only fp16-d64-causal --cache-dir /tmp/cocache > $R/proof-3.6.log 2>&1
  MHA_CI_PINS="$PINS36" timeout 60 python3 -m mha_ci.payloads.codeobj_proof --records $R/co-3.6.json >> $R/proof-3.6.log 2>&1; echo "rc=$?" >> $R/proof-3.6.log
) &
wait
tar -C $R -czf $OUT/run1.tgz . && ls -la $OUT
