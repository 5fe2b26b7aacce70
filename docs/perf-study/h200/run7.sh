#!/bin/bash
# H200 x2, run 7: the planted-slowdown check with the spin's fixed cost measured behind a real
# kernel, and a planted shape never left without its spin (run 5 subtracted 2.05 us measured
# between bare events: 5 % realised 3.2 % on 70 us shapes and nothing under 41 us). Sent as
#   MHA_CI_COMMIT=<sha> bash docs/perf-study/h200/run7.sh   carry: [perf_inputs]   kind: nvidia-h200-x2 (or nvidia-h200: GPU0's part only)
# Run 8 is the same script at commit da4b9cd, whose plant was corrected per shape by a planted
# pilot rep (run 7's realised 2.3-3.9 % on power-bound prefill shapes of GPU1); that made it
# worse and was taken back (see measure_shape): RUN=8 bash ... . Run 9 is run 7's plant again,
# 7.5 % on GPU1: RUN=9 PLANT1=7.5 bash ... . Run 10, after the gate's k was lowered to 2: RUN=10.
# Triton 3.6 (the image's), full set. On each GPU an unplanted run A, then the same build with
# 5 % planted on the dense shapes (the varlen shapes stay unplanted as the control).
set -u
export PYTHONUNBUFFERED=1 MHA_CI_COMMIT=${MHA_CI_COMMIT:-unknown}
RUN=${RUN:-7}; R=/tmp/res$RUN; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $R/smi-start.csv
perf() { # name timeout [VAR=value ...]
  local name=$1 limit=$2 t0=$SECONDS; shift 2
  env MHA_CI_PINS='{"toolchain":"triton-3.6","mode":"enforce","pins":{"triton":"3.6.0"}}' PYTHONPATH=src "$@" \
    timeout "$limit" python3 -m mha_ci.payloads.perf --shapes perf_inputs/full/shapes.json \
    --method perf_inputs/full/method.json --out "$R/$name.json" \
    --toolchain triton-3.6 --executor host > "$R/$name.log" 2>&1
  echo "rc=$? wall_s=$((SECONDS - t0))" >> "$R/$name.log"
}
pair() { # gpu planted-%
  export CUDA_VISIBLE_DEVICES=$1
  perf perf-3.6-full-a-gpu$1 240
  perf perf-3.6-full-planted$2-dense-gpu$1 260 MHA_PERF_PLANT_SLOWDOWN=$2 'MHA_PERF_PLANT_KEYS=dense_*'
}
pair 0 5 &
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  (sleep 15; pair 1 "${PLANT1:-5}") &   # GPU0 compiles first; GPU1 then mostly reads the shared compile cache
fi
wait
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $R/smi-end.csv
tar -C $R -czf $OUT/run$RUN.tgz . && ls -la $OUT
