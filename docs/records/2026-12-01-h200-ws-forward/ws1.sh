# H200, Triton 3.4 bundle: the warp-specialized forward's bf16 tests, its sweep, and the bench table
source .gitb/pre.sh
step wstest 90 python3 -m pytest tests/mha/test_warp_specialized.py -q -x -p no:cacheprovider
step sweep 280 python3 -m mha.bench --sweep --pass forward-ws --out $OUT/sweep.md
step bench 200 python3 -m mha.bench --out $OUT/bench.md
