#!/bin/bash
# Everything committed from H200 runs 7-11 (run7.sh, run11.sh), rebuilt from the raw run
# documents in run7/..run11/ with the mha-ci commands themselves (no GPU needed):
#   bash docs/perf-study/h200/analyse-run7-11.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
H=docs/perf-study/h200
C=docs/perf-study/sm90/calibration
B=perf_baselines/sm90
mha() { PYTHONPATH=src python3 -m mha_ci "$@"; }
# calibrate exits 1 when the gate misses a bar of pipelines/perf.yaml on that data: a finding,
# written into the file like any other; anything else stops the script.
calibrate() { mha perf calibrate "$@" > /dev/null || [ $? -eq 1 ]; }

# The golden toolchain's baseline. Up to now it was run 3's interleaved (GPU0) and lone (GPU1)
# full-set runs, one lease. First each of run 11's runs (another lease, each alone on its GPU) is
# judged against that, as the perf job would judge a new machine; then all four are combined.
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mha perf combine $H/run3/perf-3.4-full-lockstep.json $H/run3/perf-3.4-full-alone.json --out $T/run3-3.4.json > /dev/null
for g in 0 1; do
  mha perf compare $T/run3-3.4.json $H/run11/perf-3.4-full-gpu$g.json --out $C/aa-3.4-run11-gpu$g-vs-run3 > /dev/null || true
done
mha perf combine $H/run3/perf-3.4-full-lockstep.json $H/run3/perf-3.4-full-alone.json \
  $H/run11/perf-3.4-full-gpu0.json $H/run11/perf-3.4-full-gpu1.json --out $B/triton-3.4.json

# Calibration as `mha-ci perf calibrate` reports it, on run 10 (the lease measured after the
# gate's k was chosen): A/A between the lease's two GPUs, and the 5 % plant on each GPU.
for g in 0 1; do
  o=$((1 - g))
  calibrate $H/run10/perf-3.6-full-a-gpu$g.json $H/run10/perf-3.6-full-a-gpu$o.json \
    --planted $H/run10/perf-3.6-full-planted5-dense-gpu$g.json --out $C/planted5-run10-gpu$g
done
# The 7.5 % plant of run 9 (GPU1), the A/A part the two GPUs of run 9.
calibrate $H/run9/perf-3.6-full-a-gpu1.json $H/run9/perf-3.6-full-a-gpu0.json \
  --planted $H/run9/perf-3.6-full-planted7.5-dense-gpu1.json --out $C/planted7.5-run9
# Every lease of runs 7-10, gate settings, and the committed baseline's case.
PYTHONPATH=src python3 $H/held_out.py > $C/held-out-run7-10.md
echo "written: $B/triton-3.4.json, $C/aa-3.4-run11-gpu{0,1}-vs-run3, $C/planted5-run10-gpu{0,1}, $C/planted7.5-run9, $C/held-out-run7-10.md"
