"""Lab: the dQ kernel of the backward in Triton's Gluon dialect for Hopper (sm90), on the
structure of the product's Gluon forward (mha.kernels.forward_gluon), which runs right on the H200.

One program = one 128-row query tile of one (batch, query head), three partitions:
- two consumer warpgroups, rows [0, 64) and [64, 128) of the tile, each with its rows' dQ
  (64 x D float32) in registers;
- a loader warp: Q and dO of the tile once, then K and V blocks through TMA into STAGES-deep
  rings ("ready" mbarriers with TMA byte counts, "empty" ones with an arrive per consumer).
A consumer step, for key block j: S = Q K_j^T and dP = dO V_j^T as two async wgmma, then
P = exp2(S * scale - lse) (masked on the diagonal blocks only), dS = P (dP - delta), and
dQ += dS K_j with dS as the register A operand. V_j's slot is freed once dP is done, K_j's once
the dQ product is. The epilogue stores dQ * sm_scale through the consumer's Q slot by TMA.

Host-side guarantees as for attn_bwd_dkdv_gluon.py (lengths multiples of 128, contiguous
(B, S, H, D) tensors, lse and delta float32 (B, Hq, Sq), causal Sk >= Sq).
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# The register budget and the host-side helpers of the dK/dV kernel (the same split in partitions).
from attn_bwd_dkdv_gluon import (CONSUMER_REGS, GL_DTYPES, LOADER_REGS, LOG2E, MAXNREG,  # noqa: E402
                                 NUM_CONSUMERS, layout)

BLOCK_M = 128          # query rows per program
ROWS = BLOCK_M // NUM_CONSUMERS
DO_NOT_SPECIALIZE = ("seqlen_q", "seqlen_k", "num_heads_q", "group")


@gluon.jit
def _loader(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready,
            v_empty, q_row, q_col, do_col, kv_row, k_col, v_col, n_total,
            NUM_CONSUMERS: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    mbarrier.expect(q_bar, NUM_CONSUMERS * (q_desc.block_type.nbytes + do_desc.block_type.nbytes))
    for c in gl.static_range(NUM_CONSUMERS):
        tma.async_copy_global_to_shared(q_desc, [q_row + c * ROWS, q_col], q_bar, q_smem.index(c))
        tma.async_copy_global_to_shared(do_desc, [q_row + c * ROWS, do_col], q_bar, do_smem.index(c))
    for j in range(n_total):
        st = j % STAGES
        ph = (j // STAGES) & 1
        # V first: dP = dO V^T is the first product a consumer can finish.
        mbarrier.wait(v_empty.index(st), ph ^ 1)
        mbarrier.expect(v_ready.index(st), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [kv_row + j * BLOCK_N, v_col], v_ready.index(st), v_smem.index(st))
        mbarrier.wait(k_empty.index(st), ph ^ 1)
        mbarrier.expect(k_ready.index(st), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, k_col], k_ready.index(st), k_smem.index(st))


@gluon.jit
def _step(j, q, do, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, dq, lse2, delta, qk_scale, rows, cols0,
          diag_off, MASK: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
          s_layout: gl.constexpr, dq_layout: gl.constexpr):
    R: gl.constexpr = q.shape[0]
    st = j % STAGES
    ph = (j // STAGES) & 1
    k = k_smem.index(st)
    mbarrier.wait(k_ready.index(st), ph)
    zero = gl.zeros([R, BLOCK_N], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(q, k.permute((1, 0)), zero, use_acc=False, is_async=True)
    mbarrier.wait(v_ready.index(st), ph)
    dp_tok = warpgroup_mma(do, v_smem.index(st).permute((1, 0)), zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    p = gl.exp2(s * qk_scale - lse2[:, None])
    if MASK:
        keep = (j * BLOCK_N + cols0)[None, :] <= (rows + diag_off)[:, None]
        p = gl.where(keep, p, 0.0)
    dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp_tok, ))
    mbarrier.arrive(v_empty.index(st), count=1)
    ds = p * (dp - delta[:, None])
    ds_op = gl.convert_layout(ds.to(q.dtype), gl.DotOperandLayout(operand_index=0, parent=dq_layout, k_width=2))
    dq_tok = warpgroup_mma(ds_op, k, dq, is_async=True)
    dq, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ds_op))
    mbarrier.arrive(k_empty.index(st), count=1)
    return dq


@gluon.jit
def _consumer(CID: gl.constexpr, dq_desc, q_smem, do_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
              Lse, Delta, qk_scale, sm_scale, q_row, q_col, lse_off, m0, diag_off, n_full, n_total,
              ROWS: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              CAUSAL: gl.constexpr):
    NW: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    rows = m0 + CID * ROWS + gl.arange(0, ROWS, layout=row_layout)
    cols0 = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    # A thread holds few rows of the accumulator: lse and delta cost it a couple of registers.
    lse2 = gl.load(Lse + lse_off + rows) * LOG2E
    delta = gl.load(Delta + lse_off + rows)
    q = q_smem.index(CID)
    do = do_smem.index(CID)
    dq = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=dq_layout)
    mbarrier.wait(q_bar, 0)
    for j in range(0, n_full):
        dq = _step(j, q, do, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, dq, lse2, delta, qk_scale, rows,
                   cols0, diag_off, False, STAGES, BLOCK_N, s_layout, dq_layout)
    if CAUSAL:
        for j in range(n_full, n_total):
            dq = _step(j, q, do, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, dq, lse2, delta, qk_scale,
                       rows, cols0, diag_off, True, STAGES, BLOCK_N, s_layout, dq_layout)
    # This consumer's Q slot is its staging buffer now (its last reader, the final S wgmma, has
    # retired): generic-proxy stores, a fence, then the TMA store.
    q.store((dq * sm_scale).to(q.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dq_desc, [q_row + CID * ROWS, q_col], q)
    tma.store_wait(pendings=0)


@gluon.jit(do_not_specialize=DO_NOT_SPECIALIZE)
def attn_bwd_dq_gluon(q_desc, do_desc, k_desc, v_desc, dq_desc, Lse, Delta, qk_scale, sm_scale, seqlen_q, seqlen_k,
                      num_heads_q, group,
                      HEAD_DIM: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                      STAGES: gl.constexpr, CAUSAL: gl.constexpr, NUM_CONSUMERS: gl.constexpr,
                      LOADER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    ROWS: gl.constexpr = BLOCK_M // NUM_CONSUMERS
    dtype: gl.constexpr = q_desc.dtype
    if CAUSAL:
        # as the forward: the longest query tiles (the last ones) first
        pid_bh = gl.program_id(0)
        pid_m = gl.num_programs(1) - 1 - gl.program_id(1)
    else:
        pid_m = gl.program_id(0)
        pid_bh = gl.program_id(1)
    b = pid_bh // num_heads_q
    h = pid_bh % num_heads_q
    hk = h // group
    m0 = pid_m * BLOCK_M
    q_row = b * seqlen_q + m0
    kv_row = b * seqlen_k
    lse_off = pid_bh * seqlen_q
    diag_off = seqlen_k - seqlen_q
    if CAUSAL:
        n_full = (m0 + diag_off) // BLOCK_N
        n_total = (m0 + diag_off + BLOCK_M) // BLOCK_N
    else:
        n_full = seqlen_k // BLOCK_N
        n_total = n_full

    q_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, HEAD_DV], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DV], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=NUM_CONSUMERS)
        mbarrier.init(v_empty.index(i), count=NUM_CONSUMERS)

    gl.warp_specialize([
        (_consumer, (0, dq_desc, q_smem, do_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Lse,
                     Delta, qk_scale, sm_scale, q_row, h * HEAD_DIM, lse_off, m0, diag_off, n_full, n_total, ROWS,
                     HEAD_DIM, BLOCK_N, STAGES, CAUSAL)),
        (_consumer, (1, dq_desc, q_smem, do_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Lse,
                     Delta, qk_scale, sm_scale, q_row, h * HEAD_DIM, lse_off, m0, diag_off, n_full, n_total, ROWS,
                     HEAD_DIM, BLOCK_N, STAGES, CAUSAL)),
        (_loader, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, q_bar, k_ready, k_empty,
                   v_ready, v_empty, q_row, h * HEAD_DIM, h * HEAD_DV, kv_row, hk * HEAD_DIM, hk * HEAD_DV, n_total,
                   NUM_CONSUMERS, ROWS, BLOCK_N, STAGES)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


# ----------------------------------------------------------------------------- host side
def run(q, k, v, do, lse, delta, causal: bool, sm_scale: float, block_n: int = 64, stages: int = 2):
    """dQ for contiguous (B, S, H, D) q/k/v/do and (B, Hq, Sq) float32 lse/delta."""
    batch, seqlen_q, heads_q, d = q.shape
    seqlen_k, heads_k, dv_ = k.shape[1], k.shape[2], v.shape[3]
    el = GL_DTYPES[q.dtype]
    dq = torch.empty_like(q)

    def desc(t, length, heads, dim, box):
        flat = t.view(batch * length, heads * dim)
        return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [box, dim], layout(box, dim, el))

    descs = (desc(q, seqlen_q, heads_q, d, ROWS), desc(do, seqlen_q, heads_q, dv_, ROWS),
             desc(k, seqlen_k, heads_k, d, block_n), desc(v, seqlen_k, heads_k, dv_, block_n),
             desc(dq, seqlen_q, heads_q, d, ROWS))
    tiles = seqlen_q // BLOCK_M
    grid = (batch * heads_q, tiles) if causal else (tiles, batch * heads_q)
    attn_bwd_dq_gluon[grid](*descs, lse, delta, sm_scale * 1.4426950408889634, sm_scale, seqlen_q, seqlen_k,
                            heads_q, heads_q // heads_k, HEAD_DIM=d, HEAD_DV=dv_, BLOCK_M=BLOCK_M, BLOCK_N=block_n,
                            STAGES=stages, CAUSAL=causal, NUM_CONSUMERS=NUM_CONSUMERS, LOADER_REGS=LOADER_REGS,
                            CONSUMER_REGS=CONSUMER_REGS, num_warps=4, maxnreg=MAXNREG)
    return dq
