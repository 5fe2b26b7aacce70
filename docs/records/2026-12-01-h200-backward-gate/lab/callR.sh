# usage: bash .gitb/callR.sh triton-3.4 : the nightly refresh job for one toolchain, the branch back as a bundle
T=$1
source .gitb/prefix.sh
t=$(date +%s)
timeout ${RTIME:-420} python3 -m mha_ci run --job refresh-sm90-$T --executor host --pins record --out /tmp/r/refresh-$T > /tmp/refresh-$T.log 2>&1
echo "refresh-$T rc=$? $(( $(date +%s) - t )) s (at $(( $(date +%s) - T0 )) s)" | tee -a $L
tail -8 /tmp/refresh-$T.log | tee -a $L
for b in $(git for-each-ref --format='%(refname)' refs/heads/baseline-refresh); do echo "branch $b" | tee -a $L; git bundle create $OUT/refresh-$T.bundle $b ^bwd-run 2>&1 | tail -1; done
(cd /tmp && tar czf $OUT/refresh-$T.tgz --exclude='*.dispatches.json' refresh-$T.log r/refresh-$T 2>/dev/null)
