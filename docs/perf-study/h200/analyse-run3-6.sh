#!/bin/bash
# Everything committed from H200 runs 3-6, rebuilt from the raw run documents in run3/..run6/
# with the mha-ci commands themselves (no GPU needed):  bash docs/perf-study/h200/analyse-run3-6.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
H=docs/perf-study/h200
B=perf_baselines/sm90
S=docs/perf-study/sm90
mha() { PYTHONPATH=src python3 -m mha_ci "$@"; }
# calibrate exits 1 when the gate misses a bar of pipelines/perf.yaml on that data: a finding,
# written into the file like any other; anything else stops the script.
calibrate() { mha perf calibrate "$@" > /dev/null || [ $? -eq 1 ]; }

# Baselines. 3.6: five full-set runs from three leases (run 3a GPU0 x2, run 4 GPU0 + GPU1,
# run 5 GPU0), so the gate knows each shape's between-lease spread. 3.8: its one full-set run
# (interleaved, GPU0).
mha perf combine $H/run3/perf-3.6-full-a.json $H/run3/perf-3.6-full-b.json $H/run4/perf-3.6-full-a-gpu0.json \
  $H/run4/perf-3.6-full-a-gpu1.json $H/run5/perf-3.6-full-a-gpu0.json --out $B/triton-3.6.json
# (3.4 is rebuilt with a second lease's runs by analyse-run7-11.sh.)
cp $H/run3/perf-3.8-full-lockstep.json $B/triton-3.8.json

# Golden (3.4) vs top of tree (3.8): full set interleaved per shape on GPU0, and the PR subset
# interleaved the same way on GPU1 as an independent second reading.
mha perf compare $H/run3/perf-3.4-full-lockstep.json $H/run3/perf-3.8-full-lockstep.json --cross-toolchain \
  --out $S/reports/golden-3.4-vs-tot-3.8-full > /dev/null || true     # exit 1: it has regressions
mha perf compare $H/run3/perf-3.4-pr-lockstep-gpu1.json $H/run3/perf-3.8-pr-lockstep-gpu1.json --cross-toolchain \
  --out $S/reports/golden-3.4-vs-tot-3.8-pr-gpu1 > /dev/null || true

# Calibration. A/A within one lease (full set and PR subset); planted slowdowns.
C=$S/calibration
calibrate $H/run3/perf-3.6-full-a.json $H/run3/perf-3.6-full-b.json --out $C/aa-full-run3
calibrate $H/run3/perf-3.6-pr-a.json $H/run3/perf-3.6-pr-b.json --out $C/aa-pr-run3
# 5 % planted (plant sized on a pilot rep); the A/A part here pairs two leases (run 5 vs run 4).
calibrate $H/run5/perf-3.6-full-a-gpu0.json $H/run4/perf-3.6-full-a-gpu0.json \
  --planted $H/run5/perf-3.6-full-planted5-dense-gpu0.json --out $C/planted5-run5
# 5 % planted with the older plant (sized on the warm-up median, which holds launch latency).
calibrate $H/run4/perf-3.6-full-a-gpu0.json $H/run4/perf-3.6-full-a-gpu1.json \
  --planted $H/run4/perf-3.6-full-planted5-dense-gpu0.json --out $C/planted5-run4-old-plant
# 10 % planted (older plant, sized on the warm-up median: it overshoots); A/A = the two GPUs of run 4.
calibrate $H/run4/perf-3.6-full-a-gpu1.json $H/run4/perf-3.6-full-a-gpu0.json \
  --planted $H/run4/perf-3.6-full-planted10-dense-gpu1.json --out $C/planted10-run4
# 7.5 % planted in a fourth lease, judged as the gate would: against the combined 3.6 baseline.
mha perf compare $B/triton-3.6.json $H/run6/perf-3.6-full-planted7.5-dense.json \
  --out $C/planted7.5-run6-vs-combined > /dev/null || true
# Every pair of single runs across leases, and each lease judged against a baseline combined
# from the other leases.
PYTHONPATH=src python3 $H/cross_lease.py > $C/cross-lease.md
# The gate's floor and k swept over the same runs.
{ echo "# Gate settings swept over H200 runs 3-6 (docs/perf-study/h200/gate_sweep.py)"; echo
  PYTHONPATH=src python3 $H/gate_sweep.py; } > $C/gate-sweep.md
echo "written: $B/triton-3.{4,6,8}.json, $S/reports/, $C/"
