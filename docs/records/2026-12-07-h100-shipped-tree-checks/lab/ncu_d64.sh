# Lab (issue 39): ncu pipe use of the d64 bench shape's forward: the Triton forward (shipped), the Gluon
# forward (a small_head gluon config added to this checkout's JSON for the step, then restored), cuDNN.
# Run from the /tmp/w checkout of .lab/ab.sh; usage: ncu_d64.sh main|pair (pair: the checkout holds
# .lab/d64.patch, so mha's d64 forward is the Gluon pair variant; only it is profiled).
# Writes $OUT/ncu-d64-<mode>.txt.
set -u
MODE=${1:-main}; R=$OUT/ncu-d64-$MODE.txt; Q=/tmp/ncu-metrics.txt
ncu --query-metrics --chip gh100 > $Q 2>&1 || ncu --query-metrics > $Q 2>&1
want="gpu__time_duration.sum sm__throughput.avg.pct_of_peak_sustained_elapsed
sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active
sm__inst_issued.avg.pct_of_peak_sustained_active sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active
sm__inst_executed_pipe_xu.sum sm__inst_executed.sum smsp__warps_active.avg.pct_of_peak_sustained_active
launch__registers_per_thread launch__grid_size launch__block_size launch__occupancy_limit_registers launch__occupancy_limit_shared_mem sm__warps_active.avg.per_cycle_active"
m=""; for w in $want; do grep -q "^${w%%.*} " $Q && m="$m,$w" || echo "not on this ncu: $w" >> $R; done
m=${m#,}; echo "metrics: $m" >> $R
if [ -n "$m" ]; then SEL="--metrics $m"; else SEL="--section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy"; fi
run() {  # run LABEL ARGS...: one profiled launch (the 4th of the kernel, after compile and warm-up)
  echo "=== $1" >> $R; shift
  timeout 120 ncu $SEL --kernel-name regex:'attn_fwd|fprop|sdpa|fmha' --launch-skip 3 --launch-count 1 \
    --csv --print-units base "$@" >> $R 2>&1; echo "(rc $?)" >> $R
}
if [ "$MODE" = pair ]; then run gluon-pair-forward python3 $ROOT/.lab/fwd_once.py mha; grep -v "^==PROF==" $R | tail -30; exit 0; fi
run triton-forward python3 $ROOT/.lab/fwd_once.py mha
cp src/mha/configs/sm90-MHA-DEFAULT.json /tmp/cfg.json
python3 - <<'PY'
import json; p = "src/mha/configs/sm90-MHA-DEFAULT.json"; d = json.load(open(p))
d["forward"]["small_head"]["gluon"] = dict(d["forward"]["default"]["gluon"]); json.dump(d, open(p, "w"), indent=2)
PY
run gluon-forward python3 $ROOT/.lab/fwd_once.py mha
cp /tmp/cfg.json src/mha/configs/sm90-MHA-DEFAULT.json
run cudnn python3 $ROOT/.lab/fwd_once.py cudnn
grep -v "^==PROF==" $R | tail -60
