source .gitb/prefix.sh
$M --toolchain triton-3.4 --subset full --shape 'dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1_bwd' --out /tmp/r/smoke > /tmp/smoke.log 2>&1; echo "smoke rc=$?" | tee -a $L; tail -3 /tmp/smoke.log | tee -a $L
python3 -c "import json; d=json.load(open('/tmp/r/smoke/perf-sm90-triton-3.4/perf.json')); r=d['results'][0]; print(r['key'], r['stats'] and r['stats']['trimmed_mean_us'], r.get('code_objects'), r['error'])" | tee -a $L
step ag0 180 $M --toolchain triton-3.4 --subset pr --against HEAD --out /tmp/r/ag0
MHA_PERF_PLANT_SLOWDOWN=3 step ag3 140 $M --toolchain triton-3.4 --subset pr --against HEAD --out /tmp/r/ag3
step aa1 120 $M --toolchain triton-3.4 --subset full --shape '*_bwd' --out /tmp/r/aa1
MHA_PERF_PLANT_SLOWDOWN=5 step pl5 100 $M --toolchain triton-3.4 --subset full --shape '*_bwd' --out /tmp/r/pl5
