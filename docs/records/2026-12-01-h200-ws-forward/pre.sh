# sourced on the device: pydantic wheels and the carried Triton bundle, run in the copied tree
T0=$(date +%s)
[ -f .site/site.tar.xz ] && mkdir -p /tmp/site && tar -C /tmp/site -xJf .site/site.tar.xz
IMAGE_PTXAS=$(python3 -c "import triton, os; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/ptxas'))")
rm -rf /tmp/tri; mkdir -p /tmp/tri; for b in .b3*/triton-*.tar.xz; do [ -f "$b" ] && tar -C /tmp/tri -xJf "$b"; done
export PYTHONPATH=/tmp/tri:/tmp/site:$PWD/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)" | tee $OUT/log.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee -a $OUT/log.txt
git log --oneline -1 | tee -a $OUT/log.txt; git status --short | head -5 | tee -a $OUT/log.txt
L=$OUT/log.txt
step() {  # step NAME SECONDS command...: run, log its tail, keep the whole log under $OUT
  local name=$1 secs=$2; shift 2
  local t=$(date +%s)
  mkdir -p /tmp/logs; timeout "$secs" "$@" > /tmp/logs/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t )) s (at $(( $(date +%s) - T0 )) s)" | tee -a $L
  tail -3 /tmp/logs/$name.log >> $L; (cd /tmp && tar czf $OUT/logs.tgz logs)
}
