# Re-run every form under both pinned toolchains (their mha-ci venvs); run from the repository root.
#   bash docs/records/2026-12-03-ws-rows-ttgir/lab/run.sh <triton-3.4 python> <triton-3.8 python>
R=docs/records/2026-12-03-ws-rows-ttgir
for py in "$1" "$2"; do
  v=$("$py" -c 'import triton; print(triton.__version__)')
  for form in row-offsets tile-rows halves-one-loop halves-two-loops; do
    PYTHONPATH=src "$py" $R/lab/ttgir.py $form 2>/dev/null
  done > $R/out/forms-$v.txt
done
