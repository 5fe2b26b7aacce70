# The lab matrix of issue 39's dK/dV race: each line one probe process (.lab/nan/ws_race_probe.py).
# dK/dV start as -7776 (SENTINEL): entries the kernel never wrote are counted apart from wrong ones.
# R3: runs per 3-stage line (default 10); RS: runs per shipped-config line (default 20).
P="python3 $(dirname $0)/ws_race_probe.py"; export SENTINEL=-7776
echo "## shipped kernel, 3 stages (the race's control)"; WS='{"num_stages": 3}' REPS=${R3:-10} $P s64k_c
echo "## ptr, 3 stages"; WS='{"num_stages": 3}' VARIANT=ptr REPS=${R3:-10} $P s64k_c
echo "## early, 3 stages"; WS='{"num_stages": 3}' VARIANT=early REPS=${R3:-10} $P s64k_c
echo "## shipped kernel and config"; REPS=${RS:-20} $P s64k_c b5_s64k_c
echo "## ptr, shipped config"; VARIANT=ptr REPS=${RS:-20} $P s8k_c b4_s4k_n s64k_n s64k_c b5_s64k_c
