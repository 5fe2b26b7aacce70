# On the H200: both memcheck shards of one carried Triton at once (separate processes, one GPU).
# usage: bash .lab/mc-par.sh 3.8
V=$1; TC=triton-$V; B=.b${V/./}; T0=$(date +%s)
mkdir -p /tmp/tri /tmp/site && tar -C /tmp/tri -xJf $B/triton-$V.0.tar.xz || exit 9
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 9
export PYTHONPATH=/tmp/tri:/tmp/site:$PWD/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)"
R="python3 -m mha_ci run --executor host --pins record"
for i in 1 2; do
  ( t=$(date +%s); timeout ${MC:-400} $R --out /tmp/r/mc-$V-$i --job memcheck-sm90-$TC-${i}of2 > /tmp/mc-$V-$i.log 2>&1
    echo "mc-$V-$i rc=$? $(( $(date +%s) - t )) s" >> /tmp/rc.txt ) &
done
wait
cat /tmp/rc.txt | tee $OUT/log.txt; grep -h "memcheck:\|mha-ci:" /tmp/mc-$V-*.log | grep -v "pins " | tee -a $OUT/log.txt
(cd /tmp && tar czf $OUT/mc-$V.tgz mc-$V-*.log r)
