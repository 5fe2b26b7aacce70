# H200: the warp-specialized forward under Triton 3.8.0 (carried bundle without its AMD backend and ptxas;
# ptxas of the image's Triton 3.6.0): which rows are wrong per variant (lab script), its tests, sweep, bench
source .gitb/pre.sh
sed -i '/amd/d' /tmp/tri/triton-3.8.0.dist-info/entry_points.txt
export TRITON_PTXAS_PATH=$IMAGE_PTXAS; echo "ptxas: $IMAGE_PTXAS" | tee -a $L; $IMAGE_PTXAS --version | tail -1 | tee -a $L
python3 -c "import triton; print('triton', triton.__version__)" | tee -a $L
step diag38 150 python3 .gitb/wsdiag.py
step wstest38 120 python3 -m pytest tests/mha/test_warp_specialized.py -q -p no:cacheprovider
step sweep38 100 python3 -m mha.bench --sweep --pass forward-ws --out $OUT/sweep38.md
step bench38 90 python3 -m mha.bench --out $OUT/bench38.md
(cd /tmp && tar czf $OUT/logs.tgz logs)
