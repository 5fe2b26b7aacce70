# Re-runs this record's two calibrations from the committed raw runs (no GPU):
#   bash lab/calibrate.sh [MHA_CI]     (in this record's folder; MHA_CI defaults to mha-ci on PATH)
# two-rounds:  the --against gate over the two-round A/A pairs, Triton 3.8 and 3.4 (the PR job's
#              same-code shapes too)
# cross-lease: the nightly gate, leave one lease out: the baseline is `perf combine` of one run
#              from each other lease, the candidate each side of each A/A of the held-out lease
set -e
MHA=${1:-mha-ci}; HERE=$PWD; ROUNDS=../2026-12-02-h200-rounds/raw
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
for f in $ROUNDS/call1-aa2-3.8.tgz $ROUNDS/call1-aa3-3.8.tgz $ROUNDS/call2-aa1-3.8.tgz $ROUNDS/call2-aa2-3.8.tgz \
         $ROUNDS/call3-aa1-3.8.tgz raw/s1-aa2-3.8.tgz raw/s1-prjob-3.8.tgz raw/s2-prclean-3.8.tgz \
         raw/s5-aa2-3.4-no-verdict.tgz raw/s6-prclean-3.4.tgz raw/s6-aa2-3.4.tgz; do
  n=$(basename "$f" .tgz); mkdir -p "$W/$n"; tar -C "$W/$n" -xzf "$f"
done
cd "$W"
declare -A L
L[c1]="call1-aa2-3.8/r/aa2/*against* call1-aa3-3.8/r/aa3/*against*"      # one round (2026-12-02, call 1)
L[c2]="call2-aa1-3.8/r/aa1/*against* call2-aa2-3.8/r/aa2/*against*"
L[c3]="call3-aa1-3.8/r/aa1/*against*"
L[s1]="s1-aa2-3.8/r/aa2/*against* s1-prjob-3.8/r/prjob/jobs/perf-sm90-triton-3.8"
L[s2]="s2-prclean-3.8/r/prclean/jobs/perf-sm90-triton-3.8"
# Triton 3.4 (sessions 5 and 6; session 5's A/A was stopped by the call's limit after both rounds were
# pooled, before its verdict: its pooled documents are complete).
L34="s5-aa2-3.4-no-verdict/r/aa2/*against* s6-prclean-3.4/r/prclean/jobs/perf-sm90-triton-3.4 s6-aa2-3.4/r/aa2/*against*"
P=""
for d in $(ls -d ${L[c2]} ${L[c3]} ${L[s1]} ${L[s2]} $L34); do P="$P $d/perf-base.json $d/perf-head.json"; done
$MHA perf calibrate $P --against-floor --min-us 100 --scaled-plant 3 --out "$HERE/calibrate-two-rounds" > /dev/null || true
P=""
for held in c1 c2 c3 s1 s2; do
  runs=""
  for o in c1 c2 c3 s1 s2; do [ $o = $held ] || runs="$runs $(ls -d ${L[$o]} | head -1)/perf-base.json"; done
  $MHA perf combine --out "$W/base-without-$held.json" $runs > /dev/null
  for d in $(ls -d ${L[$held]}); do P="$P $W/base-without-$held.json $d/perf-base.json $W/base-without-$held.json $d/perf-head.json"; done
done
$MHA perf calibrate $P --scaled-plant 5 --out "$HERE/calibrate-cross-lease" > /dev/null || true
echo "wrote $HERE/calibrate-two-rounds and $HERE/calibrate-cross-lease"
