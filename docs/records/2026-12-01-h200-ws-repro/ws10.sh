# H200, Triton 3.4.0 bundle: the sm90 default bucket's unmasked config (attn_fwd_ws 128x128, 4 warps,
# 2 stages; O and lse through descriptors) judged by --against HEAD over the default-bucket forward
# shapes of the full set; then the four sm90 correctness shards through mha-ci run
source .gitb/pre.sh
M="python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain triton-3.4 --subset full"
step against 215 $M --against HEAD --out /tmp/r/against --shape '*_dqk128_dv128_c?' --shape '*_dqk128_dv128_c?_w*' --shape '*_dqk8_dv8_c?'
grep -v "^\[perf" /tmp/logs/against.log | grep -v "^improvement" | head -20 >> $L
(cd /tmp/r && tar czf $OUT/against.tgz --exclude='*.dispatches.json' --exclude='base-checkout' against)
for i in 1 2 3 4; do
  timeout $(( 455 - ($(date +%s) - T0) )) python3 -m mha_ci run --job correctness-sm90-triton-3.4-${i}of4 --executor host --pins record \
    --out /tmp/c34-$i > /tmp/logs/c34-$i.log 2>&1 &
done; wait; echo "correctness done at $(( $(date +%s) - T0 )) s" | tee -a $L
for i in 1 2 3 4; do tail -2 /tmp/logs/c34-$i.log | tee -a $L; done
tar czf $OUT/correctness-3.4.tgz /tmp/c34-*/summary.md /tmp/c34-*/results.json /tmp/logs/c34-*.log 2>/dev/null
(cd /tmp && tar czf $OUT/logs.tgz logs)
