# device call 1: tune the sm90 backward pe bucket on Triton 3.4 (carried bundle), in the copied tree
T0=$(date +%s)
git log --oneline -1 2>&1 | head -1; git rev-parse --verify -q c2358c6 >/dev/null && echo "has c2358c6"; git rev-parse --verify -q e3c63d3 >/dev/null && echo "has e3c63d3"
mkdir -p /tmp/site && tar -C /tmp/site -xJf .site/site.tar.xz
rm -rf /tmp/tri; mkdir -p /tmp/tri; tar -C /tmp/tri -xJf .b34/triton-3.4.0.tar.xz
export PYTHONPATH=/tmp/tri:/tmp/site:$PWD/src PYTHONUNBUFFERED=1 MHA_CI_CACHE=/tmp/mc TRITON_CACHE_DIR=/tmp/tc
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "setup $(( $(date +%s) - T0 )) s"
timeout 520 python3 -m mha_ci tune --arch sm90 --toolchain triton-3.4 --pass backward --bucket pe \
  --out out/tune-sm90-bwd-pe --executor host --pins record --max-candidates 3 --seconds-per-shape 0.2 \
  --budget-s 400 --no-check > $OUT/tune.log 2>&1; echo "tune rc=$? at $(( $(date +%s) - T0 )) s"
tail -30 $OUT/tune.log
tar czf $OUT/tune-out.tgz out/tune-sm90-bwd-pe
