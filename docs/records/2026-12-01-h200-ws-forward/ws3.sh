# H200, Triton 3.4 bundle: the sm90 default-bucket forward (warp-specialized) judged by --against HEAD, dense shapes
source .gitb/pre.sh
M="python3 -m mha_ci perf measure --executor host --pins record --arch sm90 --toolchain triton-3.4 --subset full"
step againstA 540 $M --against HEAD --out /tmp/r/againstA --shape 'dense_*_dqk128_dv128_c?' --shape 'dense_*_dqk128_dv128_c?_w*'
(cd /tmp/r && tar czf $OUT/againstA.tgz --exclude='*.dispatches.json' --exclude='base-checkout' againstA)
