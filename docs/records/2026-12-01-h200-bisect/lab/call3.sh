# device call 3 (Triton 3.4): the varlen clamp judged by --against its parent, then a real perf bisect
T0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .site/site.tar.xz
rm -rf /tmp/tri; mkdir -p /tmp/tri; tar -C /tmp/tri -xJf .b34/triton-3.4.0.tar.xz
export PYTHONPATH=/tmp/tri:/tmp/site:$PWD/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc
git config user.name >/dev/null || git config user.name "mha-ci lab"; git config user.email >/dev/null || git config user.email "lab@mha-ci.invalid"
timeout 230 python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain triton-3.4 \
  --subset pr --against e3c63d3 --out /tmp/r/clamp > $OUT/clamp.log 2>&1; echo "clamp-against rc=$? at $(( $(date +%s) - T0 )) s"
tail -6 $OUT/clamp.log
(cd /tmp/r && tar czf $OUT/clamp.tgz --exclude='*.dispatches.json' --exclude='base-checkout' clamp)
timeout 300 python3 -m mha_ci perf bisect --good 6455112 --bad 52443cf --arch sm90 --toolchain triton-3.4 \
  --shape 'varlen_b8_*_dqk64_dv64_c1' --out out/bisect-varlen-d64 --executor host --pins record > $OUT/bisect.log 2>&1
echo "bisect rc=$? at $(( $(date +%s) - T0 )) s"; tail -25 $OUT/bisect.log
tar czf $OUT/bisect.tgz --exclude='checkouts' out/bisect-varlen-d64
