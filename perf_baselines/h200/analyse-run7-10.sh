#!/bin/bash
# Everything committed from H200 runs 7-10 (run7.sh), rebuilt from the raw run documents in
# run7/..run10/ with the mha-ci commands themselves (no GPU needed):
#   bash perf_baselines/h200/analyse-run7-10.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
H=perf_baselines/h200
C=perf_baselines/sm90/calibration
mha() { PYTHONPATH=src python3 -m mha_ci "$@"; }

# Calibration as `mha-ci perf calibrate` reports it, on run 10 (the lease measured after the
# gate's k was chosen): A/A between the lease's two GPUs, and the 5 % plant on each GPU.
for g in 0 1; do
  o=$((1 - g))
  mha perf calibrate $H/run10/perf-3.6-full-a-gpu$g.json $H/run10/perf-3.6-full-a-gpu$o.json \
    --planted $H/run10/perf-3.6-full-planted5-dense-gpu$g.json --out $C/planted5-run10-gpu$g > /dev/null
done
# The 7.5 % plant of run 9 (GPU1), the A/A part the two GPUs of run 9.
mha perf calibrate $H/run9/perf-3.6-full-a-gpu1.json $H/run9/perf-3.6-full-a-gpu0.json \
  --planted $H/run9/perf-3.6-full-planted7.5-dense-gpu1.json --out $C/planted7.5-run9 > /dev/null
# Every lease of runs 7-10, gate settings, and the committed baseline's case.
PYTHONPATH=src python3 $H/held_out.py > $C/held-out-run7-10.md
echo "written: $C/planted5-run10-gpu{0,1}, $C/planted7.5-run9, $C/held-out-run7-10.md"
