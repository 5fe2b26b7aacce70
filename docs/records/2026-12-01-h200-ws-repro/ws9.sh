# H200, Triton 3.4.0 (carried bundle): attn_fwd_ws with O and lse stored through descriptors and the
# guard ws-two-consumer-groups-band-or-dropout: its GPU tests, rows per variant (wsdiag.py, guards
# bypassed), the forward sweep (plain and WS candidates)
source .gitb/pre.sh
python3 -c "import triton; print('triton', triton.__version__)" | tee -a $L
step wstest 240 python3 -m pytest tests/mha/test_warp_specialized.py -q -p no:cacheprovider
step diag 150 python3 docs/records/2026-12-01-h200-ws-forward/wsdiag.py
step sweepfwd 200 python3 -m mha.bench --sweep --pass forward --out $OUT/sweep-forward-3.4.md
(cd /tmp && tar czf $OUT/logs.tgz logs)
