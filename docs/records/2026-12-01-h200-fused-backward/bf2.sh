# H200, image Triton 3.6.0: the fused backward's cost of ordering. A: as built (turns); B: the same
# kernel with the turns removed (wait_turn returns at once, pass_turn adds nothing): unordered
# atomic dQ additions, not deterministic (lab only: sed on the device copy, never committed).
source .gitb/pre.sh
step sweepA 200 python3 -m mha.bench --sweep --pass backward-fused --out $OUT/sweep-fused-A-turns.md
sed -i 's/        seen = tl.inline_asm_elementwise(_SPIN_PTX, "=r,l,r", \[Counter, turn\], dtype=tl.int32,/        seen = turn/; s/^                                         is_pure=False, pack=1)$//; s/    tl.atomic_add(Counter, took.to(tl.int32), sem="release", scope="gpu")/    pass/' src/mha/kernels/ordered.py
git diff --stat src/mha/kernels/ordered.py | tee -a $L; grep -n "seen = turn\|    pass$" src/mha/kernels/ordered.py | tee -a $L
step sweepB 200 python3 -m mha.bench --sweep --pass backward-fused --out $OUT/sweep-fused-B-no-turns.md
(cd /tmp && tar czf $OUT/logs.tgz logs)
