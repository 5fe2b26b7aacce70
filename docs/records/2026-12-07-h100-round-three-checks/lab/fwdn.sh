# The shipped ws forward (2 stages), many runs: the small shapes 1000 times, the long ones 100.
D=$(dirname $0)
REPS=1000 python3 $D/ws_fwd_probe.py b8_s8k b4_s4k
REPS=100 python3 $D/ws_fwd_probe.py s64k b2_s32k
