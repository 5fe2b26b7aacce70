# H200, image Triton 3.6.0: attn_fwd_ws with O stored through a descriptor: rows per variant
# (wsdiag.py of the ws-forward record), its GPU tests, the forward sweep (plain and WS candidates)
source .gitb/pre.sh
step diag 150 python3 docs/records/2026-12-01-h200-ws-forward/wsdiag.py
step wstest 200 python3 -m pytest tests/mha/test_warp_specialized.py -q -p no:cacheprovider
step sweepfwd 200 python3 -m mha.bench --sweep --pass forward --out $OUT/sweep-forward.md
(cd /tmp && tar czf $OUT/logs.tgz logs)
