# H200, Triton 3.4 bundle: the warp-specialized forward (one loop, cheap masks): bf16 tests, sweep, bench table
source .gitb/pre.sh
step wstest 120 python3 -m pytest tests/mha/test_warp_specialized.py -q -p no:cacheprovider
step sweep 200 python3 -m mha.bench --sweep --pass forward-ws --out $OUT/sweep.md
step bench 150 python3 -m mha.bench --out $OUT/bench.md
