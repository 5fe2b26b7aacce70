# ncu, shape 2 (b1 hq64 hk8 s8192 d128 causal): tensor-pipe and warp-stall metrics of each kernel.
ncu --query-metrics 2>/dev/null > /tmp/qm.txt
grep -i "gmma\|tensor" /tmp/qm.txt > $OUT/ncu-query-tensor.txt
M=""
for m in sm__pipe_tensor_op_gmma_cycles_active sm__pipe_tensor_op_hmma_cycles_active sm__pipe_tensor_cycles_active sm__inst_executed_pipe_tensor_op_gmma; do
  grep -q "^$m " /tmp/qm.txt && { case $m in *inst_executed*) M="$M,$m.sum";; *) M="$M,$m.avg.pct_of_peak_sustained_active";; esac; }
done
for r in long_scoreboard barrier wait math_pipe_throttle mio_throttle short_scoreboard dispatch_stall not_selected selected sleeping lg_throttle no_instruction membar branch_resolving misc tex_throttle drain imc_miss; do
  b=smsp__average_warps_issue_stalled_${r}_per_issue_active
  grep -q "^$b" /tmp/qm.txt && M="$M,$b.ratio"
done
M=${M#,}
echo "metrics: $M"
timeout 240 ncu --clock-control none --profile-from-start off --metrics "$M" --csv --page raw \
  python3 out/exp/profile_attn.py 2 > $OUT/ncu-raw-shape2.csv 2> $OUT/ncu-raw-shape2.err
echo "ncu rc=$?"; tail -3 $OUT/ncu-raw-shape2.err
