# Lab script (issue 39; the one of docs/records/2026-12-06-h100-ws-race with fwdn and ctl): steps on the device for one carried Triton; setup as in
# docs/records/2026-12-04-h200-gluon-checks-tma-reduce/lab/ab.sh.
# usage: STEPS="nan big" DEADLINE=560 CASES="s8k_c s64k_c" bash .lab/ab.sh 3.4   (carry .b34 .whl .lab)
#   nan    .lab/nan/ws_race_probe.py $CASES;  ws3, wsm64: over $WSCASES with the ws config at 3 stages, BLOCK_M1 64
#   fwd    .lab/nan/ws_fwd_probe.py: the shipped ws forward (2 stages) and at 3 stages, out/lse starting as a sentinel
#   fwdn   .lab/nan/fwdn.sh: the shipped ws forward, 1000 runs of the small shapes and 100 of the long ones
#   pp     (3.8) .lab/pingpong.patch applied to the checkout, then its GPU Gluon forward tests and .lab/gluon_pp.py ($PPR rounds)
#   ppab   (3.8, after pp) mha-ci perf measure --against HEAD over the Gluon forward's 55 d128 shapes and 5 controls
#   ctl    .lab/nan/ctl.sh: the ws forward at 3 stages with BLOCK_N 64, and the dK/dV race at 3 stages (shipped, ptr, early)
#   races  tests/mha/test_races.py;  big    tests/mha/test_large_gpu.py;  wsq: tests/mha/test_backward_ws.py
#   refresh/mc/corrp/bench as in that record's script
# A step starts only when DEADLINE (s after start) leaves it its expected time (EXPECT_<step>).
V=$1; TC=triton-$V; ROOT=$PWD; B=.b${V/./}; T0=$(date +%s); L=$OUT/log.txt
rm -rf /tmp/tri; mkdir -p /tmp/tri /tmp/site /tmp/r && tar -C /tmp/tri -xJf $B/triton-$V.0.tar.xz || exit 9
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 9
# A git checkout of this tree, so that HEAD is a base: the plant is its only change.
rm -rf /tmp/w && mkdir -p /tmp/w && tar -C . --exclude=./.b34 --exclude=./.b38 --exclude=./.whl --exclude=./.lab -cf - . | tar -C /tmp/w -xf -
cd /tmp/w && git init -q && git add -A && git -c user.name=lab -c user.email=lab@invalid commit -qm base || exit 9
export PYTHONPATH=/tmp/tri:/tmp/site:/tmp/w/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc-$V
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)" | tee $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $L
echo "setup $(( $(date +%s) - T0 )) s; triton cache entries before: $(ls /tmp/tc-$V 2>/dev/null | wc -l)" | tee -a $L
step() {  # step NAME SECONDS command...: run, log, pack its results into $OUT at once
  local name=$1 secs=$2; shift 2; local t=$(date +%s)
  timeout "$secs" "$@" > /tmp/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t )) s (at $(( $(date +%s) - T0 )) s)" | tee -a $L
  grep -v "^\[perf\] \[#*\.*\]" /tmp/$name.log | grep -v "pin" | tail -${TAIL:-8} | tee -a $L
  (cd /tmp && tar czf $OUT/$name-$V.tgz --exclude='base-checkout' --exclude='outputs' --exclude='*.npz' $name.log r/$name 2>/dev/null)
}
M="python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain $TC --subset pr"
n=0
for s in ${STEPS:-nan}; do
  n=$((n+1)); left=$(( ${DEADLINE:-560} - ($(date +%s) - T0) ))
  want=$(eval echo \${EXPECT_$s:-130}); [ $left -lt $want ] && { echo "skip $s$n: $left s left" | tee -a $L; continue; }
  case $s in
  nan)   TAIL=80 step nan$n $left python3 $ROOT/.lab/nan/ws_race_probe.py ${CASES:-s8k_c s64k_c} ;;
  ws3)   TAIL=40 step ws3 $left env WS='{"num_stages": 3}' python3 $ROOT/.lab/nan/ws_race_probe.py ${WSCASES:-s64k_c} ;;
  wsm64) TAIL=40 step wsm64 $left env WS='{"BLOCK_M1": 64}' python3 $ROOT/.lab/nan/ws_race_probe.py ${WSCASES:-s64k_c} ;;
  pp)    git apply $ROOT/.lab/pingpong.patch || { echo "pp: the patch does not apply: not run" | tee -a $L; continue; }
         git diff --stat | tee -a $L
         TAIL=60 step pp $left bash -c "timeout 240 python3 -m pytest -q -p no:cacheprovider -rfs tests/mha/test_forward_gluon.py; timeout 400 python3 $ROOT/.lab/gluon_pp.py ${PPR:-5}" ;;
  ppab)  git diff --quiet && { echo "ppab: no change applied (run pp first): not measured" | tee -a $L; continue; }
         TAIL=40 step ppab $left python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain $TC --subset full \
           --shape 'dense_*_sq8192_*_dqk128_dv128_c?' --shape 'dense_b32_*_dqk128_dv128_c1' --shape 'dense_b8_*_dqk128_dv128_c?' \
           --shape 'varlen_b1_hq64_hk8_*_dqk128_dv128_c?' --shape 'dense_b64_hq64_hk8_sq1_sk8192_*' --shape 'dense_b8_hq48_hk8_*_dqk64_dv64_c1' \
           --against HEAD --out /tmp/r/ppab ;;
  peab)  # A/B against main: the base commit is this tree without .lab/pe-src.patch (src/ since main)
         git apply -R $ROOT/.lab/pe-src.patch && git commit -qam "base: main's src" && git apply $ROOT/.lab/pe-src.patch \
           || { echo "peab: the patch does not apply: not measured" | tee -a $L; continue; }
         git diff --stat | tee -a $L
         TAIL=60 step peab $left python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain $TC --subset full \
           --shape 'dense_b1_*_dqk192_dv128_c?' --shape 'dense_b8_*_dqk192_dv128_c?' --shape 'dense_b32_*_dqk192_dv128_c?' \
           --shape 'dense_b1_*_dqk128_dv128_c1' --shape 'dense_b8_*_dqk128_dv128_c1' --shape 'dense_b32_*_dqk128_dv128_c1' \
           --shape 'dense_b4_hq32_hk8_sq4096_sk4096_dqk128_dv128_c0' --against HEAD --out /tmp/r/peab ;;
  ctl)   TAIL=60 step ctl $left bash $ROOT/.lab/nan/ctl.sh ;;
  fwdn)  TAIL=20 step fwdn $left bash $ROOT/.lab/nan/fwdn.sh ;;
  matrix) TAIL=60 step matrix $left bash $ROOT/.lab/nan/matrix.sh ;;
  fwd)   TAIL=30 step fwd $left bash -c "REPS=${FR:-10} python3 $ROOT/.lab/nan/ws_fwd_probe.py s64k b4_s4k b8_s8k b2_s32k; STAGES=3 REPS=${FR:-10} python3 $ROOT/.lab/nan/ws_fwd_probe.py s64k b8_s8k" ;;
  big)   TAIL=20 step big$n $left python3 -m pytest -q -p no:cacheprovider -rfs tests/mha/test_large_gpu.py ;;
  gtest) TAIL=20 step gtest$n $left python3 -m pytest -q -p no:cacheprovider -rfs tests/mha/test_forward_gluon.py ;;
  bgtest) TAIL=20 step bgtest$n $left python3 -m pytest -q -p no:cacheprovider -rfs tests/mha/test_backward_gluon.py ;;
  races) TAIL=20 step races$n $left python3 -m pytest -q -p no:cacheprovider -rfs tests/mha/test_races.py ;;
  wsq)   TAIL=20 step wsq$n $left python3 -m pytest -q -p no:cacheprovider -rfs tests/mha/test_backward_ws.py ;;
  refresh) TAIL=30 step refresh $left python3 -m mha_ci run --executor host --pins record --job refresh-sm90-$TC --out /tmp/r/refresh
         for b in $(git for-each-ref --format='%(refname:short)' refs/heads/baseline-refresh); do git format-patch -1 "$b" --stdout > $OUT/refresh-$V.patch; done ;;
  mc)    TAIL=30 step mc $left bash -c "for i in ${MCS:-1 2}; do python3 -m mha_ci run --executor host --pins record --job memcheck-sm90-$TC-\${i}of2 --out /tmp/r/mc/\$i > /tmp/r/mc\$i.log 2>&1 & done; wait; for i in ${MCS:-1 2}; do grep -v '^\[' /tmp/r/mc\$i.log | tail -6; done" ;;
  corrp) TAIL=40 step corrp $left bash -c "for i in ${SHARDS:-1 2 3 4}; do python3 -m mha_ci run --executor host --pins record --job correctness-sm90-$TC-\${i}of4 --out /tmp/r/corrp/\$i > /tmp/r/corrp\$i.log 2>&1 & done; wait; for i in ${SHARDS:-1 2 3 4}; do grep -v '^\[' /tmp/r/corrp\$i.log | tail -5; done" ;;
  bench) TAIL=10 step bench $left python3 -m mha.bench --out /tmp/r/bench-$V.md; cp /tmp/r/bench-$V.md $OUT/ 2>/dev/null ;;
  esac
done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
