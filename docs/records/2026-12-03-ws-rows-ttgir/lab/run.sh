# Re-run every form under both pinned toolchains (their mha-ci venvs); run from the repository root.
#   bash docs/records/2026-12-03-ws-rows-ttgir/lab/run.sh <triton-3.4 python> <triton-3.8 python>
# The row-offsets and tile-rows forms are mha.kernels.forward_ws before and at the fix, from git.
R=docs/records/2026-12-03-ws-rows-ttgir
forms=$(mktemp -d)
for pair in ws_row_offsets:327212a ws_tile_rows:3e2300f; do
  git show "${pair#*:}:src/mha/kernels/forward_ws.py" \
    | sed 's/^from \.common import/from mha.kernels.common import/; s/^from \.forward import/from mha.kernels.forward import/' \
    > "$forms/${pair%%:*}.py"
done
for py in "$1" "$2"; do
  v=$("$py" -c 'import triton; print(triton.__version__)')
  for form in row-offsets tile-rows halves-one-loop halves-two-loops; do
    PYTHONPATH="src:$forms" "$py" $R/lab/ttgir.py $form 2>/dev/null
  done > $R/out/forms-$v.txt
done
rm -rf "$forms"
