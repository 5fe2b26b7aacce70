# Controls: the ws forward at 3 stages with BLOCK_N 64 (fits shared memory), then the dK/dV race at 3 stages:
# shipped kernel and the two epilogue variants, R3 runs each.
D=$(dirname $0); export SENTINEL=-7776
echo "## ws forward, 3 stages, BLOCK_N 64"; STAGES=3 BLOCK_N=64 REPS=${FR:-10} python3 $D/ws_fwd_probe.py s64k b8_s8k
for v in shipped ptr early; do echo "## dK/dV $v, 3 stages"
  if [ $v = shipped ]; then WS='{"num_stages": 3}' REPS=${R3:-4} python3 $D/ws_race_probe.py s64k_c
  else WS='{"num_stages": 3}' VARIANT=$v REPS=${R3:-4} python3 $D/ws_race_probe.py s64k_c; fi; done
