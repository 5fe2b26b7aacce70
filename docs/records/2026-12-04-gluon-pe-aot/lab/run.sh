# AOT-compile the lab's d192/128 Gluon forward for sm90 without a GPU, every variant of lab/aot.py, under
# the given interpreter's Triton (3.8); writes out/aot-<triton version>.txt. From the repository root:
#   bash docs/records/2026-12-04-gluon-pe-aot/lab/run.sh ~/.cache/mha-ci/venvs/triton-3.8-38a699683924/bin/python
set -euo pipefail
PY=${1:?usage: run.sh PYTHON}
R=docs/records/2026-12-04-gluon-pe-aot
v=$("$PY" -c 'import triton; print(triton.__version__)')
mkdir -p "$R/out"
PYTHONPATH=src "$PY" "$R/lab/aot.py" 2>&1 | tee "$R/out/aot-$v.txt"
