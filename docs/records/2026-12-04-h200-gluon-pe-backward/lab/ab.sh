# On the H200: the pull-request perf job as a same-GPU A/B (issue 36), for one carried Triton.
# usage: STEPS="prjob aa aa pl3" DEADLINE=560 bash .lab/ab.sh 3.8     (the bundle in .b38/ or .b34/)
#   prjob  the perf job of the PR pipeline (mha-ci run --perf-against HEAD) with a planted config
#          change in the working tree: backward `default` BLOCK_N2 64 -> 32 (red on that bucket's
#          backward shapes, and on nothing else)
#   aa     perf measure --against HEAD of the PR subset on the clean tree (an A/A run)
#   layout the .lab/layout.py experiment in two processes over $LKEYS
#   prclean the perf job of the PR pipeline on the clean tree (its wall time; an A/A)
#   refresh the nightly refresh job of the toolchain (mha-ci run --job refresh-sm90-<tc>); its
#          baseline commit comes back as refresh-<V>.patch
#   cfg    perf measure --against HEAD of the full set's small_head backward shapes with that bucket's
#          tiles set to $CFG_TILES (BLOCK_M1 N1 M2 N2 warps stages; default 32 64 64 64 4 3) in the working tree (issue 39)
#   bwdsweep mha.bench --sweep of the backward candidates on the small-head bench shape (issue 39)
#   sp     the single-pass backward (issue 39): mha.bench --sweep of the two-kernel and
#          the single-pass backward candidates on the four bench shapes
#   d32    mha.bench --sweep of the two-kernel, small-head and single-pass backward candidates on a d32 shape
#   spmem  the single-pass backward's GPU tests under compute-sanitizer memcheck (caching allocator off)
#   final  perf measure --against HEAD, both passes, of the full set's d64 and d32 shapes: HEAD is the tree with
#          .lab/change.patch reversed, the working tree has it (the change as committed)
#   corr   the four sm90 correctness shards with --select of the head-dim, determinism and single-pass tests
#   hdmem  the d24/d32/d40/d64 head-dim tests under compute-sanitizer memcheck
#   gluon  the Gluon forward's H200 check and timing (.lab/gluon/gpu_check.py; Triton 3.8 only)
#   tune32 mha-ci tune of the small_head_32 backward bucket on its workload shape
#   gbtest the Gluon backward's GPU tests (with the Gluon forward's and the determinism tests), then its gradient
#          tests under compute-sanitizer memcheck (Triton 3.8 only)
#   gbfinal perf measure --against HEAD of the full set's d128 backward shapes and controls: HEAD is the tree with
#          .lab/change.patch reversed, the working tree has it (the Gluon backward, as committed)
#   gbfix  the strided-input Gluon backward test, then .lab/bits.py (Gluon vs Triton backward, bit for bit)
#   gbwd   the Gluon backward kernels' H200 check and timing (.lab/gbwd/gpu_check.py; Triton 3.8 only)
#   gpe    the pe lab kernels' H200 check and timing (.lab/gpe/gpu_check.py; Triton 3.8 only)
#   corrbg the four sm90 correctness shards with --select of the Gluon backward's tests
#   pefinal perf measure --against HEAD of the full set's d192/128 backward shapes and controls: HEAD is the tree with
#          .lab/change.patch reversed, the working tree has it (the pe Gluon dK/dV, as committed)
#   bench  mha.bench (the four bench shapes against cuDNN)
#   repro  .lab/wsrepro.py, the warp-specialization reproducer of issue 39 (its output: wsrepro-<V>.txt)
#   ws39   issue 39: .lab/ws39.patch applied (the guard ws-two-consumer-groups-band-or-dropout removed): the
#          reproducer with the workaround, mha.bench --sweep --pass forward-ws, and mha.bench
#   pl3    the same with MHA_PERF_PLANT_SLOWDOWN=3 on the candidate side (the payload's spin plant)
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
for s in ${STEPS:-prjob aa aa}; do
  n=$((n+1)); left=$(( ${DEADLINE:-560} - ($(date +%s) - T0) ))
  want=$(eval echo \${EXPECT_$s:-130}); [ $left -lt $want ] && { echo "skip $s$n: $left s left" | tee -a $L; continue; }
  case $s in
  prjob) python3 - <<'PY'
import json
p = "src/mha/configs/sm90-MHA-DEFAULT.json"
d = json.load(open(p)); d["backward"]["default"]["BLOCK_N2"] = 32
open(p, "w").write(json.dumps(d, indent=2) + "\n")
PY
         git diff --stat | tail -1 | tee -a $L
         TAIL=40 step prjob $left python3 -m mha_ci run --executor host --pins record --event pull_request --job perf-sm90-$TC --perf-against HEAD --out /tmp/r/prjob
         git checkout -q . ;;
  prclean) TAIL=12 step prclean $left python3 -m mha_ci run --executor host --pins record --event pull_request --job perf-sm90-$TC --perf-against HEAD --out /tmp/r/prclean ;;
  refresh) TAIL=30 step refresh $left python3 -m mha_ci run --executor host --pins record --job refresh-sm90-$TC --out /tmp/r/refresh
         git branch --list | tee -a $L
         for b in $(git for-each-ref --format='%(refname:short)' refs/heads/baseline-refresh); do git format-patch -1 "$b" --stdout > $OUT/refresh-$V.patch; done
         (cd /tmp/r/refresh && find . -name '*.json' -path '*refresh*' | head -20 | tar czf $OUT/refresh-out-$V.tgz -T - 2>/dev/null) ;;
  ws39)  mkdir -p /tmp/r; git apply $ROOT/.lab/ws39.patch || exit 9
         git diff --stat | tail -1 | tee -a $L
         TAIL=60 step ws39 $left bash -c "python3 -m mha.bench --sweep --pass forward-ws --out /tmp/r/sweep39-$V.md; python3 -m mha.bench --out /tmp/r/bench39-$V.md; python3 $ROOT/.lab/wsrepro.py > /tmp/r/wsrepro39-$V.txt 2>&1; tail -1 /tmp/r/wsrepro39-$V.txt"
         cp /tmp/r/*39-$V.* $OUT/ 2>/dev/null; git checkout -q . ;;
  cfg)   python3 - ${CFG_TILES:-32 64 64 64 4 3} <<'PY'
import json, sys
p = "src/mha/configs/sm90-MHA-DEFAULT.json"
m1, n1, m2, n2, w, s = map(int, sys.argv[1:])
d = json.load(open(p)); d["backward"]["small_head"].update(BLOCK_M1=m1, BLOCK_N1=n1, BLOCK_M2=m2, BLOCK_N2=n2, num_warps=w, num_stages=s)
open(p, "w").write(json.dumps(d, indent=2) + "\n")
PY
         git diff | grep "^[-+] " | tr -d '\n' | tee -a $L; echo | tee -a $L
         git diff --stat | tail -1 | tee -a $L
         TAIL=30 step cfg $left python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain $TC --subset full --shape '*_dv64_*_bwd' --shape '*_dv32_*_bwd' --against HEAD --out /tmp/r/cfg
         git checkout -q . ;;
  bwdsweep) TAIL=20 step bwdsweep $left python3 -m mha.bench --sweep --pass backward --pass backward-small-head --shape b8_hq48_hk8_s2048_dqk64_dv64_c1 --out /tmp/r/bwdsweep-$V.md
         cp /tmp/r/bwdsweep-$V.md $OUT/ 2>/dev/null ;;
  sp)    TAIL=30 step sp $left bash -c "python3 -m mha.bench --sweep --pass backward --pass backward-single-pass --out /tmp/r/sp-$V.md"
         cp /tmp/r/sp-$V.md $OUT/ 2>/dev/null ;;
  d32)   TAIL=30 step d32 $left python3 -m mha.bench --sweep --pass backward --pass backward-small-head --pass backward-single-pass --shape b4_hq16_hk16_s2048_dqk32_dv32_c1 --out /tmp/r/d32-$V.md
         cp /tmp/r/d32-$V.md $OUT/ 2>/dev/null ;;
  spmem) CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
         TAIL=30 step spmem $left env PYTORCH_NO_CUDA_MEMORY_CACHING=1 $CS --tool memcheck --error-exitcode 9 --report-api-errors no --leak-check no --print-limit 20 python3 -m pytest -q -p no:cacheprovider -x tests/mha/test_single_pass_backward.py ;;
  final) git apply -R $ROOT/.lab/change.patch && git -c user.name=lab -c user.email=lab@invalid commit -qam main || exit 9
         git apply $ROOT/.lab/change.patch || exit 9
         git diff --stat | tail -1 | tee -a $L
         TAIL=40 step final $left python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain $TC --subset full --shape '*_dv64_*' --shape '*_dv32_*' --against HEAD --out /tmp/r/final ;;
  corr)  TAIL=40 step corr $left bash -c "for i in 1 2 3 4; do python3 -m mha_ci run --executor host --pins record --job correctness-sm90-$TC-\${i}of4 --select 'tests/mha/test_head_dim_classes.py*' --select 'tests/mha/test_determinism.py*' --select 'tests/mha/test_single_pass_backward.py*' --select 'tests/mha/test_forward_gluon.py*' --out /tmp/r/corr 2>&1 | grep -v '^\[' | tail -4; done" ;;
  hdmem) CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
         TAIL=20 step hdmem $left env PYTORCH_NO_CUDA_MEMORY_CACHING=1 $CS --tool memcheck --error-exitcode 9 --report-api-errors no --leak-check no --print-limit 20 python3 -m pytest -q -p no:cacheprovider tests/mha/test_head_dim_classes.py -k "d24 or d32 or d40 or d64" ;;
  gluon) TAIL=60 step gluon $(( left < ${GLUON_CAP:-300} ? left : ${GLUON_CAP:-300} )) python3 $ROOT/.lab/gluon/gpu_check.py ;;   # .lab/gluon = docs/records/2026-12-03-gluon-forward-aot/lab
  tune32) TAIL=40 step tune32 $left python3 -m mha_ci tune --executor host --pins record --arch sm90 --toolchain $TC --bucket small_head_32 --pass backward --no-check --out /tmp/r/tune32 ;;
  gtest) CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
         TAIL=30 step gtest $left bash -c "python3 -m pytest -q -p no:cacheprovider -rs tests/mha/test_forward_gluon.py 2>&1 | tail -15; PYTORCH_NO_CUDA_MEMORY_CACHING=1 $CS --tool memcheck --error-exitcode 9 --report-api-errors no --leak-check no --print-limit 20 python3 -m pytest -q -p no:cacheprovider tests/mha/test_forward_gluon.py -k 'results or triton_forward' 2>&1 | tail -6; echo memcheck rc=\$?" ;;
  gfinal) git apply -R $ROOT/.lab/change.patch && git -c user.name=lab -c user.email=lab@invalid commit -qam main || exit 9
         git apply $ROOT/.lab/change.patch || exit 9
         git diff --stat | tail -1 | tee -a $L
         TAIL=60 step gfinal $left python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain $TC --subset full --shape 'dense_*_sq8192_*_dqk128_dv128_c?' --shape 'dense_b32_*_dqk128_dv128_c1' --shape 'dense_b8_*_dqk128_dv128_c?' --shape 'varlen_b1_hq64_hk8_*_dqk128_dv128_c?' --shape 'dense_b64_hq64_hk8_sq1_sk8192_*' --shape 'dense_b8_hq48_hk8_*_dqk64_dv64_c1' --against HEAD --out /tmp/r/gfinal ;;
  sptma) git apply $ROOT/.lab/tma.patch || exit 9
         git diff --stat | tail -1 | tee -a $L
         TAIL=40 step sptma $left bash -c "python3 -m mha.bench --sweep --pass backward-single-pass --out /tmp/r/sptma-$V.md; python3 -m mha.bench --out /tmp/r/benchsp-$V.md"
         cp /tmp/r/sptma-$V.md /tmp/r/benchsp-$V.md $OUT/ 2>/dev/null; git checkout -q . ;;
  mc)    TAIL=30 step mc $left bash -c "for i in 1 2; do python3 -m mha_ci run --executor host --pins record --job memcheck-sm90-$TC-\${i}of2 --out /tmp/r/mc/\$i > /tmp/r/mc\$i.log 2>&1 & done; wait; for i in 1 2; do grep -v '^\[' /tmp/r/mc\$i.log | tail -6; done" ;;
  corrp) TAIL=40 step corrp $left bash -c "for i in ${SHARDS:-2 3 4}; do python3 -m mha_ci run --executor host --pins record --job correctness-sm90-$TC-\${i}of4 --out /tmp/r/corrp/\$i > /tmp/r/corrp\$i.log 2>&1 & done; wait; for i in ${SHARDS:-2 3 4}; do grep -v '^\[' /tmp/r/corrp\$i.log | tail -5; done" ;;
  par)   TAIL=60 step par $left bash -c "for i in ${MCSHARDS:-2}; do python3 -m mha_ci run --executor host --pins record --job memcheck-sm90-$TC-\${i}of2 --out /tmp/r/par/mc\$i > /tmp/r/par-mc\$i.log 2>&1 & done; for i in ${SHARDS:-2 3 4}; do python3 -m mha_ci run --executor host --pins record --job correctness-sm90-$TC-\${i}of4 --out /tmp/r/par/corr\$i > /tmp/r/par-corr\$i.log 2>&1 & done; wait; for f in /tmp/r/par-*.log; do echo == \$f; grep -v '^\[' \$f | grep -v pin | tail -4; done" ;;
  gbtest) CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
         TAIL=40 step gbtest $left bash -c "python3 -m pytest -q -p no:cacheprovider -rs tests/mha/test_backward_gluon.py tests/mha/test_forward_gluon.py tests/mha/test_determinism.py 2>&1 | tail -15; PYTORCH_NO_CUDA_MEMORY_CACHING=1 $CS --tool memcheck --error-exitcode 9 --report-api-errors no --leak-check no --print-limit 20 python3 -m pytest -q -p no:cacheprovider tests/mha/test_backward_gluon.py -k 'gradients and bf16 or bitwise or strided' 2>&1 | tail -6; echo memcheck rc=\${PIPESTATUS[0]}" ;;
  gbfinal) git apply -R $ROOT/.lab/change.patch && git -c user.name=lab -c user.email=lab@invalid commit -qam main || exit 9
         git apply $ROOT/.lab/change.patch || exit 9
         git diff --stat | tail -1 | tee -a $L
         TAIL=70 step gbfinal $left python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain $TC --subset full --shape 'dense_*_dqk128_dv128_c?_bwd' --shape 'varlen_b1_hq64_hk8_*_dqk128_dv128_c?_bwd' --shape '*_dqk128_dv128_c1_drop_bwd' --shape 'dense_b8_hq48_hk8_*_dqk64_dv64_c1_bwd' --shape 'dense_b1_hq64_hk8_sq8192_*_dqk128_dv128_c1' --against HEAD --out /tmp/r/gbfinal ;;
  gbfix) TAIL=20 step gbfix $left bash -c "python3 -m pytest -q -p no:cacheprovider -rs tests/mha/test_backward_gluon.py -k strided 2>&1 | tail -3; python3 $ROOT/.lab/bits.py" ;;
  gbwd)  TAIL=60 step gbwd $left python3 $ROOT/.lab/gbwd/gpu_check.py ;;   # .lab/gbwd = docs/records/2026-12-04-gluon-backward-aot/lab
  gpe)   TAIL=60 step gpe $left python3 $ROOT/.lab/gpe/gpu_check.py ;;   # .lab/gpe = docs/records/2026-12-04-gluon-pe-aot/lab
  corrbg) TAIL=40 step corrbg $left bash -c "for i in 1 2 3 4; do python3 -m mha_ci run --executor host --pins record --job correctness-sm90-$TC-\${i}of4 --select 'tests/mha/test_backward_gluon.py*' --out /tmp/r/corrbg 2>&1 | grep -v '^\[' | tail -4; done" ;;
  pefinal) git apply -R $ROOT/.lab/change.patch && git -c user.name=lab -c user.email=lab@invalid commit -qam main || exit 9
         git apply $ROOT/.lab/change.patch || exit 9
         git diff --stat | tail -1 | tee -a $L
         TAIL=70 step pefinal $left python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain $TC --subset full --shape '*_dqk192_dv128_c?_bwd' --shape 'dense_b1_hq64_hk8_sq8192_*_dqk128_dv128_c?_bwd' --shape 'dense_b8_hq48_hk8_*_dqk64_dv64_c1_bwd' --shape 'dense_b1_hq128_hk128_sq8192_*_dqk192_dv128_c1' --against HEAD --out /tmp/r/pefinal ;;
  bench) TAIL=10 step bench $left python3 -m mha.bench --out /tmp/r/bench-$V.md; cp /tmp/r/bench-$V.md $OUT/ 2>/dev/null ;;
  repro) TAIL=3 step repro $left python3 $ROOT/.lab/wsrepro.py; cp /tmp/repro.log $OUT/wsrepro-$V.txt ;;
  layout) TAIL=14 step layout $left bash -c "python3 $ROOT/.lab/layout.py p1 $LKEYS; python3 $ROOT/.lab/layout.py p2 $LKEYS" ;;
  aa)    step aa$n $left $M --against HEAD --out /tmp/r/aa$n ;;
  pl3)   step pl3$n $left env MHA_PERF_PLANT_SLOWDOWN=3 $M --against HEAD --out /tmp/r/pl3$n ;;
  esac
done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a $L
