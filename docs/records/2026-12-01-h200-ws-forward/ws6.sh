# H200: the warp-specialized forward under Triton 3.8.0 (carried bundle, ptxas of the image's Triton 3.6.0)
# and 3.6.0 (the image's): which rows are wrong per variant (lab script), its tests, its sweep, the bench table
source .gitb/pre.sh
export TRITON_PTXAS_PATH=$IMAGE_PTXAS; echo "ptxas: $IMAGE_PTXAS" | tee -a $L; $IMAGE_PTXAS --version | tail -1 | tee -a $L
step diag38 150 python3 .gitb/wsdiag.py
step wstest38 150 python3 -m pytest tests/mha/test_warp_specialized.py -q -p no:cacheprovider
step sweep38 120 python3 -m mha.bench --sweep --pass forward-ws --out $OUT/sweep38.md
step bench38 100 python3 -m mha.bench --out $OUT/bench38.md
N="env -u TRITON_PTXAS_PATH PYTHONPATH=/tmp/site:$PWD/src TRITON_CACHE_DIR=/tmp/tc36"
step diag36 120 $N python3 .gitb/wsdiag.py
step wstest36 120 $N python3 -m pytest tests/mha/test_warp_specialized.py -q -p no:cacheprovider
(cd /tmp && tar czf $OUT/logs.tgz logs)
grep -h "full\|causal" /tmp/logs/diag38.log /tmp/logs/diag36.log | head -0
