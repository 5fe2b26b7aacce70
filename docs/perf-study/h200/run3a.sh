#!/bin/bash
# H200 x2, run 3a (after the int64-offset and cu_seqlens-sync fixes). Run on the GPU machine as
#   MHA_CI_COMMIT=<sha> bash docs/perf-study/h200/run3a.sh   carry: [.bundles34, perf_inputs]   kind: nvidia-h200-x2
# Unpacks 3.4.0 into .tri/t34 (an ignored folder of the checkout, kept for run 3b while the
# machine stays warm) and measures Triton 3.6 (the image's):
# GPU0: full set A, full set B (the A/A pair), then the full set with a 5 % slowdown planted
#       on the dense shapes (varlen shapes stay unplanted as the control);
# GPU1: PR subset A and B (the PR-subset A/A pair), then the full set under 3.4.0 alone (it also
#       fills Triton's compile cache for the interleaved run of run 3b).
set -u
export PYTHONUNBUFFERED=1 MHA_CI_COMMIT=${MHA_CI_COMMIT:-unknown}
R=/tmp/res3a; rm -rf $R; mkdir -p $R
mkdir -p .tri/t34 && tar -C .tri/t34 -xJf .bundles34/triton-3.4.0.tar.xz
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $R/smi-start.csv
perf() { # name subset timeout triton-version pythonpath [VAR=value ...]
  local name=$1 subset=$2 limit=$3 version=$4 pp=$5 t0=$SECONDS; shift 5
  env MHA_CI_PINS="{\"toolchain\":\"triton-${version%.0}\",\"mode\":\"enforce\",\"pins\":{\"triton\":\"$version\"}}" \
    PYTHONPATH="$pp" "$@" timeout "$limit" python3 -m mha_ci.payloads.perf \
    --shapes "perf_inputs/$subset/shapes.json" --method "perf_inputs/$subset/method.json" \
    --out "$R/$name.json" --dump-dispatches "$R/$name.dispatches.json" --toolchain "triton-${version%.0}" \
    --executor host > "$R/$name.log" 2>&1
  echo "rc=$? wall_s=$((SECONDS - t0))" >> "$R/$name.log"
}
(
  export CUDA_VISIBLE_DEVICES=0
  perf perf-3.6-full-a full 220 3.6.0 src
  perf perf-3.6-full-b full 170 3.6.0 src
  perf perf-3.6-full-planted5-dense full 160 3.6.0 src MHA_PERF_PLANT_SLOWDOWN=5 'MHA_PERF_PLANT_KEYS=dense_*'
) &
(
  export CUDA_VISIBLE_DEVICES=1
  sleep 20   # let GPU0 start compiling first: the PR shapes then mostly hit the shared cache
  perf perf-3.6-pr-a pr 120 3.6.0 src
  perf perf-3.6-pr-b pr 60 3.6.0 src
  perf perf-3.4-full-alone full 300 3.4.0 .tri/t34:src
) &
wait
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $R/smi-end.csv
tar -C $R -czf $OUT/run3a.tgz . && ls -la $OUT
