# On the H200: both memcheck shards and the four correctness shards' > 4 GiB tests of one carried
# Triton, all at once (three processes, one GPU), through mha-ci.
# usage: MC=420 BIG=420 bash .lab/mc-all.sh 3.4   (the bundle in .b34/ or .b38/)
V=$1; TC=triton-$V; B=.b${V/./}; T0=$(date +%s)
mkdir -p /tmp/tri /tmp/site && tar -C /tmp/tri -xJf $B/triton-$V.0.tar.xz || exit 9
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 9
export PYTHONPATH=/tmp/tri:/tmp/site:$PWD/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)" | tee $OUT/log.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $OUT/log.txt
R="python3 -m mha_ci run --executor host --pins record"
for i in 1 2; do
  ( t=$(date +%s); timeout ${MC:-420} $R --out /tmp/r/mc-$V-$i --job memcheck-sm90-$TC-${i}of2 > /tmp/mc-$V-$i.log 2>&1
    echo "mc-$V-$i rc=$? $(( $(date +%s) - t )) s" >> /tmp/rc.txt ) &
done
( t=$(date +%s); timeout ${BIG:-420} $R --out /tmp/r/big-$V --job correctness-sm90-$TC-1of4 --job correctness-sm90-$TC-2of4 \
    --job correctness-sm90-$TC-3of4 --job correctness-sm90-$TC-4of4 --select 'tests/mha/test_large_gpu.py*' > /tmp/big-$V.log 2>&1
  echo "big-$V rc=$? $(( $(date +%s) - t )) s" >> /tmp/rc.txt ) &
wait
cat /tmp/rc.txt | tee -a $OUT/log.txt; grep -h "memcheck:\|mha-ci:\|passed\|failed" /tmp/mc-$V-*.log /tmp/big-$V.log | grep -v "pins " | tail -40 | tee -a $OUT/log.txt
(cd /tmp && tar czf $OUT/mc-$V.tgz mc-$V-*.log big-$V.log r)
