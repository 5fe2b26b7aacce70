# Both pinned toolchains (their mha-ci venvs); run from the repository root, no GPU needed.
#   bash docs/records/2026-12-03-fused-bwd-pipelining/lab/run.sh <triton-3.4 python> <triton-3.8 python>
# 1. lab/pipe.py: a minimal single-pass key-block loop, eight forms of the dQ add (out/minimal-*.txt)
# 2. the fused kernel of 2026-12-01-h200-fused-backward (its patch on 1be33e1, in a scratch
#    worktree), compiled by that record's compile_fused.py as built, without the turns, and
#    without the turns and the barrier (out/fused.txt)
# 3. lab/product.py: the product's single-pass kernel (mha.kernels.backward.attn_bwd_dkdv_dq, e7b852f)
#    beside the two shipped kernels, sm90 and gfx942, the shipped tiles (out/product.txt); then the
#    same with lab/tma-reduce.patch (dQ added by a descriptor's atomic_add) in a scratch worktree
#    (out/product-tma-reduce.txt)
set -e
R=docs/records/2026-12-03-fused-bwd-pipelining; OLD=docs/records/2026-12-01-h200-fused-backward; ROOT=$PWD
for py in "$1" "$2"; do
  v=$("$py" -c 'import triton; print(triton.__version__)')
  for tiles in "32 128 128 8 3" "64 128 128 8 2"; do PYTHONPATH=src "$py" $R/lab/pipe.py $tiles 2>/dev/null; done > $R/out/minimal-$v.txt
done
for py in "$1" "$2"; do PYTHONPATH=src "$py" $R/lab/product.py 2>/dev/null; done > $R/out/product.txt
T=$(mktemp -d); git worktree add -q "$T/wt" e7b852f && git -C "$T/wt" apply "$ROOT/$R/lab/tma-reduce.patch"
for py in "$1" "$2"; do (cd "$T/wt" && PYTHONPATH=src "$py" "$ROOT/$R/lab/product.py" 2>/dev/null | grep bwd_dkdv_dq); done \
  > $R/out/product-tma-reduce.txt || true
git worktree remove --force "$T/wt"; rm -rf "$T"
W=$(mktemp -d); trap 'git -C "$ROOT" worktree remove --force "$W/wt" >/dev/null 2>&1; rm -rf "$W"' EXIT
git worktree add -q "$W/wt" 1be33e1 && git -C "$W/wt" apply "$ROOT/$OLD/fused-backward.patch"
ITEM='d128c:128:128:c:{"BLOCK_M1":32,"BLOCK_N1":128,"BLOCK_M2":128,"BLOCK_N2":64,"num_warps":8,"num_stages":3,"fused_dq":true}'
compile() {  # compile LABEL: the fused kernel under both toolchains
  for py in "$A" "$B"; do
    echo "$1 | triton $("$py" -c 'import triton; print(triton.__version__)') | $(cd "$W/wt" && PYTHONPATH=src "$py" "$ROOT/$OLD/compile_fused.py" "$W/asm" "$ITEM" 2>/dev/null | grep bwd_dkdvdq)"
  done
}
A=$1 B=$2; O=$W/wt/src/mha/kernels/ordered.py
{
  compile "as built (turns: spin wait, barrier, release add)"
  # what 2026-12-01's bf2.sh removed: the wait and the release add; its barrier stayed
  sed -i 's/        seen = tl.inline_asm_elementwise(_SPIN_PTX, "=r,l,r", \[Counter, turn\], dtype=tl.int32,/        seen = turn/; s/^                                         is_pure=False, pack=1)$//; s/    tl.atomic_add(Counter, took.to(tl.int32), sem="release", scope="gpu")/    pass/' "$O"
  compile "no turns, the barrier kept (2026-12-01 bf2.sh, 'B')"
  sed -i 's/^    tl.debug_barrier()$/    pass/' "$O"
  compile "no turns, no barrier (unordered relaxed atomics only)"
} > $R/out/fused.txt
