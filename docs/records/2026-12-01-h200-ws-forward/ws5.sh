# H200, Triton 3.4 bundle: diagnose the warp-specialized forward's wrong rows (lab script), then its tests
source .gitb/pre.sh
step diag 200 python3 .gitb/wsdiag.py
cat /tmp/logs/diag.log | tail -60
step wstest 200 python3 -m pytest tests/mha/test_warp_specialized.py -q -p no:cacheprovider -x
tail -30 /tmp/logs/wstest.log
