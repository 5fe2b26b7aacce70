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
V=$1; TC=triton-$V; export ROOT=$PWD; B=.b${V/./}; T0=$(date +%s); L=$OUT/log.txt
rm -rf /tmp/tri; mkdir -p /tmp/tri /tmp/site /tmp/r/mccorr && tar -C /tmp/tri -xJf $B/triton-$V.0.tar.xz || exit 9
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
M="python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain $TC"
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
  mccorr) TAIL=40 step mccorr $left bash -c "python3 -m mha_ci run --executor host --pins record --job memcheck-sm90-$TC-${MC:-2}of2 --out /tmp/r/mccorr/mc${MC:-2} > /tmp/r/mccorr/mc${MC:-2}.log 2>&1 & for i in 1 2 3 4; do python3 -m mha_ci run --executor host --pins record --job correctness-sm90-$TC-\${i}of4 --out /tmp/r/mccorr/corrp\$i > /tmp/r/mccorr/corrp\$i.log 2>&1 & done; wait; for f in /tmp/r/mccorr/*.log; do echo == \$f; grep -v '^\[' \$f | tail -5; done" ;;
  pers)  # the persistent Gluon forward (.lab/persistent.patch): GPU tests with 3 programs (many tiles each) and the
         # default grid, the bench shapes (checked, then timed), perf measure against HEAD over the Gluon-served forward
         # shapes, and the same code at one program per tile over 4 of them (the loop's own cost)
         git apply $ROOT/.lab/persistent.patch || { echo "pers: the patch does not apply: not run" | tee -a $L; continue; }
         git diff --stat | tee -a $L
         mkdir -p /tmp/r/pers; TAIL=80 step pers $left bash -c "MHA_LAB_GLUON_GRID=3 timeout 180 python3 -m pytest -q -p no:cacheprovider -rfs tests/mha/test_forward_gluon.py; \
           timeout 180 python3 -m pytest -q -p no:cacheprovider -rfs tests/mha/test_forward_gluon.py; \
           MHA_LAB_GLUON_GRID=3 python3 -m mha.bench --shape b8_hq6_hk1_s2048_dqk64_dv64_c1 --shape b1_hq8_hk1_s1024_dqk192_dv128_c1; \
           python3 -m mha.bench --out /tmp/r/pers/bench.md; \
           $M --subset full --shape 'dense_*_dqk128_dv128_c?' --shape 'dense_*_dqk192_dv128_c?' --shape 'dense_*_dqk64_dv64_c?' --against HEAD --out /tmp/r/pers/ab; \
           MHA_LAB_GLUON_GRID=tiles $M --subset full --shape 'dense_b8_hq48_hk8_sq2048_*_dqk64_dv64_c1' --shape 'dense_b1_hq64_hk8_sq8192_*_dqk128_dv128_c?' \
             --shape 'dense_b4_hq32_hk8_sq4096_*_dqk128_dv128_c0' --shape 'dense_b1_hq128_hk128_sq8192_*_dqk192_dv128_c1' --against HEAD --out /tmp/r/pers/tiles"
         git checkout -q -- . ;;
  pol)   # the persistent forward with its grid policy (.lab/pol.patch, main's src to this tree): perf measure against
         # main over the Gluon-served forward shapes, then the Gluon forward GPU tests and the bench
         git apply -R $ROOT/.lab/pol.patch && git add -A && git -c user.name=lab -c user.email=lab@invalid commit -qm "base: main's src" && git apply $ROOT/.lab/pol.patch \
           || { echo "pol: the patch does not apply: not run" | tee -a $L; continue; }
         git status --short | tee -a $L
         mkdir -p /tmp/r/pol; TAIL=100 step pol $left bash -c "$M --subset full $(for s in 256 1024 8192; do for d in dqk128_dv128 dqk192_dv128; do echo --shape dense_*_sq${s}_sk${s}_${d}_c1; done; done) --shape 'dense_*_sq2048_sk2048_dqk64_dv64_c1' --against HEAD --out /tmp/r/pol/ab; \
           timeout 200 python3 -m pytest -q -p no:cacheprovider -rfs tests/mha/test_forward_gluon.py tests/mha/test_tile_schedule.py; \
           python3 -m mha.bench --out /tmp/r/pol/bench.md; \
           MHA_GLUON_PROGRAMS=tiles python3 -m mha.bench --shape b8_hq48_hk8_s2048_dqk64_dv64_c1 --out /tmp/r/pol/bench-d64-tiles.md" ;;
  pol2)  # as pol, over the shapes the policy gives one program per tile and 3 persistent controls
         git apply -R $ROOT/.lab/pol.patch && git add -A && git -c user.name=lab -c user.email=lab@invalid commit -qm "base: main's src" && git apply $ROOT/.lab/pol.patch \
           || { echo "pol2: the patch does not apply: not run" | tee -a $L; continue; }
         mkdir -p /tmp/r/pol2; TAIL=60 step pol2 $left bash -c "$M --subset full --shape dense_b1_hq128_hk128_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b1_hq64_hk64_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b1_hq16_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b8_hq6_hk1_sq2048_sk2048_dqk64_dv64_c1 --shape dense_b32_hq5_hk1_sq256_sk256_dqk128_dv128_c1 --shape dense_b8_hq8_hk8_sq1024_sk1024_dqk192_dv128_c1 --shape dense_b8_hq6_hk1_sq1024_sk1024_dqk128_dv128_c1 --shape dense_b1_hq6_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b8_hq5_hk1_sq1024_sk1024_dqk128_dv128_c1 --shape dense_b1_hq8_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b8_hq4_hk1_sq1024_sk1024_dqk128_dv128_c1 --shape dense_b1_hq5_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b1_hq16_hk16_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b1_hq8_hk8_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b1_hq4_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b1_hq64_hk8_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1 --shape dense_b8_hq16_hk16_sq1024_sk1024_dqk192_dv128_c1 --against HEAD --out /tmp/r/pol2/ab; \
           timeout 150 python3 -m pytest -q -p no:cacheprovider -rfs tests/mha/test_forward_gluon.py tests/mha/test_tile_schedule.py; \
           python3 -m mha.bench --out /tmp/r/pol2/bench.md" ;;
  tile)  ORIG=$(git rev-parse HEAD)   # the one-tile form (this tree): against main before the persistent forward (.lab/pol.patch reversed) over
         # pol2's 18 shapes, then the Gluon forward GPU tests (default grid: the one-tile form; 3 programs: the walk)
         git apply -R $ROOT/.lab/pol.patch && git add -A && git -c user.name=lab -c user.email=lab@invalid commit -qm "base: 36ed7e3 src" && git apply $ROOT/.lab/pol.patch \
           || { echo "tile: the patch does not apply: not run" | tee -a $L; continue; }
         mkdir -p /tmp/r/tile; TAIL=60 step tile $left bash -c "$M --subset full --shape dense_b1_hq128_hk128_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b1_hq64_hk64_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b1_hq16_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b8_hq6_hk1_sq2048_sk2048_dqk64_dv64_c1 --shape dense_b32_hq5_hk1_sq256_sk256_dqk128_dv128_c1 --shape dense_b8_hq8_hk8_sq1024_sk1024_dqk192_dv128_c1 --shape dense_b8_hq6_hk1_sq1024_sk1024_dqk128_dv128_c1 --shape dense_b1_hq6_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b8_hq5_hk1_sq1024_sk1024_dqk128_dv128_c1 --shape dense_b1_hq8_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b8_hq4_hk1_sq1024_sk1024_dqk128_dv128_c1 --shape dense_b1_hq5_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b1_hq16_hk16_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b1_hq8_hk8_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b1_hq4_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b1_hq64_hk8_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1 --shape dense_b8_hq16_hk16_sq1024_sk1024_dqk192_dv128_c1 --against HEAD --out /tmp/r/tile/ab; \
           timeout 150 python3 -m pytest -q -p no:cacheprovider -rfs tests/mha/test_forward_gluon.py tests/mha/test_tile_schedule.py"
         git reset -q --hard $ORIG ;;
  tileab) ORIG=$(git rev-parse HEAD)   # the one-tile form against the walking form at one program per tile (main, 299373c: .lab/tile.patch reversed)
         git apply -R $ROOT/.lab/tile.patch && git add -A && git -c user.name=lab -c user.email=lab@invalid commit -qm "base: walking form" && git apply $ROOT/.lab/tile.patch \
           || { echo "tileab: the patch does not apply: not run" | tee -a $L; continue; }
         mkdir -p /tmp/r/tileab; TAIL=40 step tileab $left bash -c "$M --subset full --shape dense_b1_hq128_hk128_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b1_hq64_hk64_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b1_hq16_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b8_hq6_hk1_sq2048_sk2048_dqk64_dv64_c1 --shape dense_b32_hq5_hk1_sq256_sk256_dqk128_dv128_c1 --shape dense_b8_hq8_hk8_sq1024_sk1024_dqk192_dv128_c1 --shape dense_b8_hq6_hk1_sq1024_sk1024_dqk128_dv128_c1 --shape dense_b1_hq6_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b8_hq5_hk1_sq1024_sk1024_dqk128_dv128_c1 --shape dense_b1_hq8_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b8_hq4_hk1_sq1024_sk1024_dqk128_dv128_c1 --shape dense_b1_hq5_hk1_sq8192_sk8192_dqk128_dv128_c1 --shape dense_b1_hq16_hk16_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b1_hq8_hk8_sq8192_sk8192_dqk192_dv128_c1 --shape dense_b1_hq4_hk1_sq8192_sk8192_dqk128_dv128_c1 --against HEAD --out /tmp/r/tileab/ab"
         git reset -q --hard $ORIG ;;
  ncupair) git apply $ROOT/.lab/d64.patch && TAIL=40 step ncupair $left bash $ROOT/.lab/ncu_d64.sh pair; git checkout -q -- . ;;
  ncu)   TAIL=40 step ncu $left bash $ROOT/.lab/ncu_d64.sh main ;;
  d64)   # the d64 pair patch on this checkout: its Gluon GPU tests, perf measure against HEAD over the d64 forward shapes, bench and ncu of the shape
         git apply $ROOT/.lab/d64.patch || { echo "d64: the patch does not apply: not run" | tee -a $L; continue; }
         git diff --stat | tee -a $L
         TAIL=60 step d64 $left bash -c "timeout 100 python3 -m pytest -q -p no:cacheprovider -rfs tests/mha/test_forward_gluon.py; \
           $M --subset full --shape 'dense_*_dqk64_dv64_c?' --against HEAD --out /tmp/r/d64/ab; \
           python3 -m mha.bench --shape b8_hq48_hk8_s2048_dqk64_dv64_c1 --out /tmp/r/d64/bench.md; bash $ROOT/.lab/ncu_d64.sh pair"
         git checkout -q -- . ;;
  d64why) TAIL=30 step d64why $left python3 $ROOT/.lab/d64why.py ;;
  bench) TAIL=10 step bench $left python3 -m mha.bench --out /tmp/r/bench-$V.md; cp /tmp/r/bench-$V.md $OUT/ 2>/dev/null ;;
  esac
done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
