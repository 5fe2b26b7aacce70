#!/bin/bash
# H200 x2, run 5: the planted-slowdown check once more, the plant now a share of a pilot rep
# (run 4's plant was a share of the warm-up median, which holds the host's launch latency: the
# 5 % plant realised a median 7.1 % on shapes of 200 us and more). Sent as
#   MHA_CI_COMMIT=<sha> bash docs/perf-study/h200/run5.sh   carry: [perf_inputs]   kind: nvidia-h200-x2 (or nvidia-h200: then GPU0's part only)
# Triton 3.6 (the image's), full set; on each GPU an unplanted run A, then the same build with a
# slowdown planted on the dense shapes (the varlen shapes stay unplanted as the control):
# GPU0 5 %, GPU1 7.5 %.
set -u
export PYTHONUNBUFFERED=1 MHA_CI_COMMIT=${MHA_CI_COMMIT:-unknown}
R=/tmp/res5; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $R/smi-start.csv
perf() { # name timeout [VAR=value ...]
  local name=$1 limit=$2 t0=$SECONDS; shift 2
  env MHA_CI_PINS='{"toolchain":"triton-3.6","mode":"enforce","pins":{"triton":"3.6.0"}}' PYTHONPATH=src "$@" \
    timeout "$limit" python3 -m mha_ci.payloads.perf --shapes perf_inputs/full/shapes.json \
    --method perf_inputs/full/method.json --out "$R/$name.json" --dump-dispatches "$R/$name.dispatches.json" \
    --toolchain triton-3.6 --executor host > "$R/$name.log" 2>&1
  echo "rc=$? wall_s=$((SECONDS - t0))" >> "$R/$name.log"
}
(
  export CUDA_VISIBLE_DEVICES=0
  perf perf-3.6-full-a-gpu0 230
  perf perf-3.6-full-planted5-dense-gpu0 180 MHA_PERF_PLANT_SLOWDOWN=5 'MHA_PERF_PLANT_KEYS=dense_*'
) &
[ "$(nvidia-smi -L | wc -l)" -ge 2 ] && (   # nvidia-h200 (one GPU) was all that was lent: GPU0 part only
  export CUDA_VISIBLE_DEVICES=1
  sleep 15   # GPU0 compiles first; GPU1 then mostly reads the shared compile cache
  perf perf-3.6-full-a-gpu1 230
  perf perf-3.6-full-planted7.5-dense-gpu1 180 MHA_PERF_PLANT_SLOWDOWN=7.5 'MHA_PERF_PLANT_KEYS=dense_*'
) &
wait
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $R/smi-end.csv
tar -C $R -czf $OUT/run5.tgz . && ls -la $OUT
