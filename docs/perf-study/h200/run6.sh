#!/bin/bash
# H200 (one GPU), run 6: the full set with a 7.5 % slowdown planted on the dense shapes, judged
# against the baseline combined from runs 3a, 4 and 5 (other leases: the real gate's case), then
# the PR subset unplanted (one more lease for the between-run noise). Sent as
#   MHA_CI_COMMIT=<sha> bash docs/perf-study/h200/run6.sh   carry: [perf_inputs]   kind: nvidia-h200
set -u
export PYTHONUNBUFFERED=1 MHA_CI_COMMIT=${MHA_CI_COMMIT:-unknown}
R=/tmp/res6; rm -rf $R; mkdir -p $R
perf() { # name subset timeout [VAR=value ...]
  local name=$1 subset=$2 limit=$3 t0=$SECONDS; shift 3
  env MHA_CI_PINS='{"toolchain":"triton-3.6","mode":"enforce","pins":{"triton":"3.6.0"}}' PYTHONPATH=src "$@" \
    timeout "$limit" python3 -m mha_ci.payloads.perf --shapes "perf_inputs/$subset/shapes.json" \
    --method "perf_inputs/$subset/method.json" --out "$R/$name.json" --toolchain triton-3.6 --executor host \
    > "$R/$name.log" 2>&1
  echo "rc=$? wall_s=$((SECONDS - t0))" >> "$R/$name.log"
}
perf perf-3.6-full-planted7.5-dense full 200 MHA_PERF_PLANT_SLOWDOWN=7.5 'MHA_PERF_PLANT_KEYS=dense_*'
perf perf-3.6-pr pr 60
tar -C $R -czf $OUT/run6.tgz . && ls -la $OUT
