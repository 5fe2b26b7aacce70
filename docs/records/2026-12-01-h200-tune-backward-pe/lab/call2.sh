# device call 2: the pe backward tune on every surviving candidate (resumes call 1's out folder),
# then GPU correctness of the working tree (varlen clamp) on Triton 3.4, four shards in parallel
T0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .site/site.tar.xz
rm -rf /tmp/tri; mkdir -p /tmp/tri; tar -C /tmp/tri -xJf .b34/triton-3.4.0.tar.xz
export PYTHONPATH=/tmp/tri:/tmp/site:$PWD/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc
git log --oneline -1; ls out/tune-sm90-bwd-pe 2>&1 | head -3
timeout 300 python3 -m mha_ci tune --arch sm90 --toolchain triton-3.4 --pass backward --bucket pe \
  --out out/tune-sm90-bwd-pe --executor host --pins record --max-candidates 8 --seconds-per-shape 0.2 \
  --budget-s 240 --no-check > $OUT/tune2.log 2>&1; echo "tune rc=$? at $(( $(date +%s) - T0 )) s"
grep -v "pins\|^\s*$" $OUT/tune2.log | tail -22
tar czf $OUT/tune-out.tgz out/tune-sm90-bwd-pe
for i in 1 2 3 4; do
  timeout 280 python3 -m mha_ci run --job correctness-sm90-triton-3.4-${i}of4 --executor host --pins record --out /tmp/c34-$i > /tmp/c34-$i.log 2>&1 &
done; wait; echo "correctness done at $(( $(date +%s) - T0 )) s"
for i in 1 2 3 4; do tail -3 /tmp/c34-$i.log; done
tar czf $OUT/correctness-3.4.tgz /tmp/c34-*/summary.md /tmp/c34-*/results.json /tmp/c34-*/jobs/*/correctness-summary.md /tmp/c34-*.log 2>/dev/null
