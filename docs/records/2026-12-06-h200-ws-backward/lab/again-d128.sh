# The landed d128 variants, 6 fresh-process compiles each, under both toolchains (run from the repository root;
# prints: count, then the sha of cubin, PTX and TTGIR).
S=docs/records/2026-12-06-ws-backward-product-aot/lab/compile_again.py
for py in /tmp/mc/venvs/triton-3.4-*/bin/python /tmp/mc/venvs/triton-3.8-*/bin/python; do
  echo "== $($py -c 'import triton; print("triton", triton.__version__)')"
  for v in "bwd_dkdv_ws 128 1" "bwd_dkdv_ws 128 0" "bwd_dq_ws 128 1" "bwd_dq_ws 128 0"; do
    for i in 1 2 3 4 5 6; do PYTHONPATH=src $py $S --one $v /tmp/x/one.ttgir; done | sort | uniq -c | sed "s/^/$v: /"
  done
done
