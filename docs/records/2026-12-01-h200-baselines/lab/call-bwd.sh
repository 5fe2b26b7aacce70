# After the sm90 backward config change: mha.bench (system Triton 3.6), then the four correctness
# shards with Triton 3.4 (bundle), in parallel on the one GPU.
source .gitb/prefix.sh
git status --short | head -5
mkdir -p /tmp/pack
PYTHONPATH=/tmp/site:$PWD/src timeout 200 python3 -m mha.bench --out /tmp/pack/bench-3.6-after-bwd-config.md > /tmp/pack/bench.log 2>&1
echo "bench rc=$?"; grep "^|" /tmp/pack/bench-3.6-after-bwd-config.md
T=triton-3.4; t1=$(date +%s)
for i in 1 2 3 4; do
  timeout 330 python3 -m mha_ci run --job correctness-sm90-$T-${i}of4 --executor host --pins record --out /tmp/c-$T-$i > /tmp/pack/correctness-$T-$i.log 2>&1 &
done
wait
echo "correctness 4 shards in parallel: $(( $(date +%s) - t1 )) s"
for i in 1 2 3 4; do tail -3 /tmp/pack/correctness-$T-$i.log; done
(cd /tmp && tar czf $OUT/gpu-bwd.tgz pack c-$T-*/results.json c-$T-*/summary.md c-$T-*/junit 2>/dev/null)
