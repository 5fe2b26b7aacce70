# H200, image Triton 3.6.0: the fused backward (attn_bwd_dkdvdq): its tests on the GPU, then the backward sweep
source .gitb/pre.sh
step fusedtest 200 python3 -m pytest tests/mha/test_backward_fused.py tests/mha/test_determinism.py -q -p no:cacheprovider -x
step sweepbwd 330 python3 -m mha.bench --sweep --pass backward --out $OUT/sweep-bwd.md
(cd /tmp && tar czf $OUT/logs.tgz logs)
