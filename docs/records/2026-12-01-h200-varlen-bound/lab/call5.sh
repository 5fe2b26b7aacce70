# device call 5 (Triton 3.4): the final varlen bound (length emptied) judged by --against its
# parent e3c63d3 (pr subset), then GPU correctness of the working tree, four shards in parallel
T0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .site/site.tar.xz
rm -rf /tmp/tri; mkdir -p /tmp/tri; tar -C /tmp/tri -xJf .b34/triton-3.4.0.tar.xz
export PYTHONPATH=/tmp/tri:/tmp/site:$PWD/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc
timeout 250 python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain triton-3.4 \
  --subset pr --against e3c63d3 --out /tmp/r/bound > $OUT/bound.log 2>&1; echo "bound-against rc=$? at $(( $(date +%s) - T0 )) s"
grep -v "^\[perf" $OUT/bound.log | head -16
(cd /tmp/r && tar czf $OUT/bound.tgz --exclude='*.dispatches.json' --exclude='base-checkout' bound)
for i in 1 2 3 4; do
  timeout $(( 470 - ($(date +%s) - T0) )) python3 -m mha_ci run --job correctness-sm90-triton-3.4-${i}of4 --executor host --pins record \
    --select '*varlen*' --select 'tests/mha/test_validation_faults.py::*' --out /tmp/b34-$i > /tmp/b34-$i.log 2>&1 &
done; wait; echo "correctness done at $(( $(date +%s) - T0 )) s"
for i in 1 2 3 4; do tail -2 /tmp/b34-$i.log; done
tar czf $OUT/correctness-3.4.tgz /tmp/b34-*/summary.md /tmp/b34-*/results.json /tmp/b34-*.log 2>/dev/null
