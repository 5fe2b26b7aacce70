#!/bin/bash
# H200 x2, run 3b: right after run 3a on the same warm machine (3.4.0 still in .tri/t34). Sent as
#   MHA_CI_COMMIT=<sha> bash docs/perf-study/h200/run3b.sh   carry: [.bundles38, perf_inputs]   kind: nvidia-h200-x2
# GPU0: golden (3.4) vs top of tree (3.8) on the full set, two payload processes on one GPU
#       taking turns shape by shape in ABBA order (--lockstep, mha_ci/perf/lockstep.py).
# GPU1: the kernel tests under 3.8 (after the int64 fix), then the same interleaved comparison
#       on the PR subset: a second, independent reading of the PR shapes on another GPU.
set -u
export PYTHONUNBUFFERED=1 MHA_CI_COMMIT=${MHA_CI_COMMIT:-unknown}
R=/tmp/res3b; rm -rf $R; mkdir -p $R
mkdir -p .tri/t38 && tar -C .tri/t38 -xJf .bundles38/triton-3.8.0.tar.xz
test -d .tri/t34/triton && echo "t34 present" > $R/t34.txt || echo "t34 MISSING (machine was not warm)" > $R/t34.txt
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $R/smi-start.csv
side() { # name subset timeout version pythonpath lockdir role
  local t0=$SECONDS
  MHA_CI_PINS="{\"toolchain\":\"triton-$4\",\"mode\":\"enforce\",\"pins\":{\"triton\":\"$4.0\"}}" PYTHONPATH=$5 \
    timeout $3 python3 -m mha_ci.payloads.perf --shapes perf_inputs/$2/shapes.json --method perf_inputs/$2/method.json \
    --out $R/$1.json --dump-dispatches $R/$1.dispatches.json --toolchain triton-$4 --executor host \
    --lockstep $6:$7 > $R/$1.log 2>&1
  echo "rc=$? wall_s=$((SECONDS - t0))" >> $R/$1.log
}
pair() { # subset timeout tag
  local lock=$R/lock-$3
  PYTHONPATH=src python3 -c "from mha_ci.perf import lockstep; lockstep.prepare('$lock')"
  side perf-3.4-$3 $1 $2 3.4 .tri/t34:src $lock a &
  side perf-3.8-$3 $1 $2 3.8 .tri/t38:src $lock b &
  wait
}
(
  export CUDA_VISIBLE_DEVICES=0
  if test -d .tri/t34/triton; then pair full 520 full-lockstep; else
    side perf-3.8-full-alone full 300 3.8 .tri/t38:src $R/none a; fi
) &
(
  export CUDA_VISIBLE_DEVICES=1
  t0=$SECONDS
  PYTHONPATH=.tri/t38:src timeout 240 python3 -m pytest tests/mha -q -n 8 -p no:cacheprovider --junitxml=$R/junit-3.8.xml > $R/tests-3.8.log 2>&1
  echo "rc=$? wall_s=$((SECONDS - t0))" >> $R/tests-3.8.log
  test -d .tri/t34/triton && pair pr 200 pr-lockstep-gpu1
) &
wait
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $R/smi-end.csv
tar -C $R -czf $OUT/run3b.tgz . && ls -la $OUT
