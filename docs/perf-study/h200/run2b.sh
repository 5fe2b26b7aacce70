#!/bin/bash
# H200 x2, run 2b (Triton 3.8.0 bundle; 3.4.0 still unpacked in /tmp/t34 from run 2a). Sent as
#   bash docs/perf-study/h200/run2b.sh   carry: [.bundles38, perf_inputs]   kind: nvidia-h200-x2
# GPU0: golden (3.4) vs top of tree (3.8) on the full set, interleaved in ABBA chunk order on one
#       GPU so clock and temperature drift cancel: A1 B1 B2 A2 A3 B3 B4 A4.
# GPU1: kernel tests under 3.8, then the 3.6 full set once more (A/A against run 1 is NOT used:
#       different process and machine; this one pairs with perf-3.6-full-a2 measured right after).
set -u
export PYTHONUNBUFFERED=1
R=/tmp/res2b; rm -rf $R; mkdir -p $R
mkdir -p /tmp/t38 && tar -C /tmp/t38 -xJf .bundles38/triton-3.8.0.tar.xz
test -d /tmp/t34/triton && echo "t34 present" > $R/t34.txt || echo "t34 MISSING (machine was not warm)" > $R/t34.txt
chunk() { # toolchain version dir i
  MHA_CI_PINS="{\"toolchain\":\"$1\",\"mode\":\"enforce\",\"pins\":{\"triton\":\"$2\"}}" PYTHONPATH=$3:src \
    timeout 150 python3 -m mha_ci.payloads.perf --shapes perf_inputs/full/shapes.json --method perf_inputs/full/method.json \
    --chunk $4/4 --out $R/perf-$1-c$4.json --toolchain $1 --executor host >> $R/perf-$1.log 2>&1; echo "c$4 rc=$?" >> $R/perf-$1.log
}
(
  export CUDA_VISIBLE_DEVICES=0
  if test -d /tmp/t34/triton; then
    chunk triton-3.4 3.4.0 /tmp/t34 1; chunk triton-3.8 3.8.0 /tmp/t38 1
    chunk triton-3.8 3.8.0 /tmp/t38 2; chunk triton-3.4 3.4.0 /tmp/t34 2
    chunk triton-3.4 3.4.0 /tmp/t34 3; chunk triton-3.8 3.8.0 /tmp/t38 3
    chunk triton-3.8 3.8.0 /tmp/t38 4; chunk triton-3.4 3.4.0 /tmp/t34 4
  else
    for i in 1 2 3 4; do chunk triton-3.8 3.8.0 /tmp/t38 $i; done
  fi
) &
(
  export CUDA_VISIBLE_DEVICES=1
  PYTHONPATH=/tmp/t38:src timeout 200 python3 -m pytest tests/mha -q -n 8 -p no:cacheprovider --junitxml=$R/junit-3.8.xml > $R/tests-3.8.log 2>&1; echo "rc=$?" >> $R/tests-3.8.log
  for ab in a b; do
    MHA_CI_PINS='{"toolchain":"triton-3.6","mode":"enforce","pins":{"triton":"3.6.0"}}' PYTHONPATH=src timeout 150 python3 -m mha_ci.payloads.perf \
      --shapes perf_inputs/full/shapes.json --method perf_inputs/full/method.json --out $R/perf-3.6-full-$ab.json --toolchain triton-3.6 \
      --executor host > $R/perf-3.6-full-$ab.log 2>&1; echo "rc=$?" >> $R/perf-3.6-full-$ab.log
  done
) &
wait
tar -C $R -czf $OUT/run2b.tgz . && ls -la $OUT
