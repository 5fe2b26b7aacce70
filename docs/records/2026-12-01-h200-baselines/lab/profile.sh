# ncu over out/exp/profile_attn.py: sections for speed of light, pipes, warp stalls, launch.
set -x
ncu --version | tail -1
ncu --query-metrics 2>/dev/null | grep -i "gmma\|tensor_op" | head -20 > $OUT/ncu-tensor-metrics.txt
M=""
grep -q "^sm__pipe_tensor_op_gmma_cycles_active" $OUT/ncu-tensor-metrics.txt && M="--metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum"
for S in "2" "0"; do
  timeout 280 ncu --clock-control none --profile-from-start off --target-processes all \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats \
    --section Occupancy --section InstructionStats $M \
    --csv --page details python3 out/exp/profile_attn.py $S > $OUT/ncu-shape$S.csv 2> $OUT/ncu-shape$S.err
  echo "rc=$?"; tail -3 $OUT/ncu-shape$S.err
done
