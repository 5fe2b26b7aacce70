# device call 4 (Triton 3.4): the varlen clamp judged by --against its parent (pr subset)
T0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .site/site.tar.xz
rm -rf /tmp/tri; mkdir -p /tmp/tri; tar -C /tmp/tri -xJf .b34/triton-3.4.0.tar.xz
export PYTHONPATH=/tmp/tri:/tmp/site:$PWD/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc
timeout 400 python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain triton-3.4 \
  --subset pr --against e3c63d3 --out /tmp/r/clamp > $OUT/clamp.log 2>&1; echo "clamp-against rc=$? at $(( $(date +%s) - T0 )) s"
grep -v "^\[perf" $OUT/clamp.log | tail -12
(cd /tmp/r && tar czf $OUT/clamp.tgz --exclude='*.dispatches.json' --exclude='base-checkout' clamp)
