#!/bin/bash
# H200 x2, run 11 (lease "L11"): the golden toolchain (Triton 3.4.0, carried bundle) on the full
# set, once alone on each GPU. Until now its baseline came from one lease (run 3), so it knew
# nothing of the shapes that move between machines. Sent as
#   MHA_CI_COMMIT=<sha> bash docs/perf-study/h200/run11.sh   carry: [.bundles34, perf_inputs]   kind: nvidia-h200-x2
set -u
export PYTHONUNBUFFERED=1 MHA_CI_COMMIT=${MHA_CI_COMMIT:-unknown}
R=/tmp/res11; rm -rf $R; mkdir -p $R
mkdir -p .tri/t34 && tar -C .tri/t34 -xJf .bundles34/triton-3.4.0.tar.xz
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $R/smi-start.csv
perf() { # gpu
  local name=perf-3.4-full-gpu$1 t0=$SECONDS
  CUDA_VISIBLE_DEVICES=$1 MHA_CI_PINS='{"toolchain":"triton-3.4","mode":"enforce","pins":{"triton":"3.4.0"}}' \
    PYTHONPATH=.tri/t34:src timeout 230 python3 -m mha_ci.payloads.perf --shapes perf_inputs/full/shapes.json \
    --method perf_inputs/full/method.json --out "$R/$name.json" --toolchain triton-3.4 --executor host \
    > "$R/$name.log" 2>&1
  echo "rc=$? wall_s=$((SECONDS - t0))" >> "$R/$name.log"
}
perf 0 &
(sleep 15; perf 1) &   # GPU0 compiles first; GPU1 then mostly reads the shared compile cache
wait
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $R/smi-end.csv
tar -C $R -czf $OUT/run11.tgz . && ls -la $OUT
