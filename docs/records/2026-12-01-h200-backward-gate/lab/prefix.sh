# sourced on the device: pydantic wheels, the carried Triton bundle, branch bwd from the bundle
T0=$(date +%s)
if [ -f .site/site.tar.xz ]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .site/site.tar.xz
else python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1; fi
rm -rf /tmp/tri; mkdir -p /tmp/tri; for b in .b3*/triton-*.tar.xz; do [ -f "$b" ] && tar -C /tmp/tri -xJf "$b"; done
H=$(git bundle list-heads .gitb/bwd.bundle | head -1 | cut -d' ' -f2)
git fetch -q -f .gitb/bwd.bundle $H:refs/heads/bwd-run || { echo "no git history here for the bundle"; exit 9; }
rm -rf /tmp/w; git clone -q -b bwd-run . /tmp/w && cd /tmp/w || exit 9
git config user.name "mha-ci nightly"; git config user.email "nightly@mha-ci.invalid"
export PYTHONPATH=/tmp/tri:/tmp/site:/tmp/w/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc
python3 -c "import importlib.metadata as m, triton, torch; print('triton', triton.__version__, m.version('triton'), 'torch', torch.__version__)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
git log --oneline -1
L=$OUT/log.txt
step() {  # step NAME SECONDS command...: run, log, pack its results into $OUT at once
  local name=$1 secs=$2; shift 2
  local t=$(date +%s)
  timeout "$secs" "$@" > /tmp/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t )) s (at $(( $(date +%s) - T0 )) s)" | tee -a $L
  tail -4 /tmp/$name.log >> $L
  (cd /tmp && tar czf $OUT/$name.tgz --exclude='*.dispatches.json' --exclude='base-checkout' $name.log r/$name 2>/dev/null)
}
M="python3 -m mha_ci perf measure --executor host --pins record --arch sm90"
