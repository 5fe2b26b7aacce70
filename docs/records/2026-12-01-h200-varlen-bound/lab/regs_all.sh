PY=/work/main/.cache/mha-ci/venvs/triton-3.4-af16666384f8/bin/python; export TRITON_DISABLE_LINE_INFO=1 TRITON_CACHE_DIR=/tmp/lab/tc
for tree in "$@"; do echo "== $tree"; for k in fwd bwd_dkdv bwd_dq; do for d in 64 128; do
  (PYTHONPATH=$tree/src $PY /tmp/lab/regs.py bf16 $d 1 $k | sed "s|^|$(basename $tree) |") & done; done; wait; done
