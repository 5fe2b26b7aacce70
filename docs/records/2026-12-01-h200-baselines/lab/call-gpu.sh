# One device call: refresh job, then the four correctness shards (in parallel, one GPU), for $1.
# usage: bash .gitb/call-gpu.sh triton-3.4
T=$1
source .gitb/prefix.sh
date -u +%FT%TZ
git log --oneline -1
t0=$(date +%s)
python3 -m mha_ci run --job refresh-sm90-$T --executor host --pins record --out /tmp/o-$T > $OUT/refresh-$T.log 2>&1
echo "refresh rc=$? $(( $(date +%s) - t0 )) s"; tail -5 $OUT/refresh-$T.log
git for-each-ref --format='%(refname)' refs/heads/baseline-refresh
mkdir -p /tmp/pack
for b in $(git for-each-ref --format='%(refname)' refs/heads/baseline-refresh); do git bundle create /tmp/pack/refresh-$T.bundle $b ^HEAD; done
t1=$(date +%s)
for i in 1 2 3 4; do
  timeout ${CTIME:-330} python3 -m mha_ci run --job correctness-sm90-$T-${i}of4 --executor host --pins record --out /tmp/c-$T-$i > $OUT/correctness-$T-$i.log 2>&1 &
done
wait
echo "correctness 4 shards in parallel: $(( $(date +%s) - t1 )) s"
for i in 1 2 3 4; do tail -3 $OUT/correctness-$T-$i.log; done
mv $OUT/*.log /tmp/pack/
(cd /tmp && tar czf $OUT/gpu-$T.tgz --exclude='*.dispatches.json' pack o-$T c-$T-*/results.json c-$T-*/summary.md c-$T-*/junit 2>/dev/null)
