# On the H200: the memcheck job and the > 4 GiB tests through mha-ci, for one carried Triton.
# usage: bash .lab/mc.sh 3.4 [memcheck-shards]   (the bundle in .b34/ or .b38/)
V=$1; TC=triton-$V; B=.b${V/./}; T0=$(date +%s)
mkdir -p /tmp/tri /tmp/site && tar -C /tmp/tri -xJf $B/triton-$V.0.tar.xz || exit 9
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 9
export PYTHONPATH=/tmp/tri:/tmp/site:$PWD/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
/usr/local/cuda/bin/compute-sanitizer --version | tail -1
L=$OUT/log.txt
step() {  # step NAME SECONDS command...
  local name=$1 secs=$2; shift 2; local t=$(date +%s)
  timeout "$secs" "$@" > /tmp/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t )) s (at $(( $(date +%s) - T0 )) s)" | tee -a $L
  tail -6 /tmp/$name.log | tee -a $L
  (cd /tmp && tar czf $OUT/$name.tgz $name.log r/$name 2>/dev/null)
}
R="python3 -m mha_ci run --executor host --pins record"
step mc-$V-1 ${MC1:-300} $R --out /tmp/r/mc-$V-1 --job memcheck-sm90-$TC-1of2
step mc-$V-2 ${MC2:-300} $R --out /tmp/r/mc-$V-2 --job memcheck-sm90-$TC-2of2
step big-$V ${BIG:-200} $R --out /tmp/r/big-$V --job correctness-sm90-$TC-1of4 --job correctness-sm90-$TC-2of4 --job correctness-sm90-$TC-3of4 --job correctness-sm90-$TC-4of4 --select 'tests/mha/test_large_gpu.py*'
