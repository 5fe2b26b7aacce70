"""Lab: the product's Gluon forward (mha.kernels.forward_gluon) with the q/k head dim apart from
the v head dim, for the `pe` bucket's Dqk 192 / Dv 128 (MLA-style) problems, which the product
kernel (Dqk == Dv of 64 or 128) does not take. Everything else is the product kernel's:
two 64-row consumer warpgroups, a loader warp with K and V rings, async wgmma, masks on diagonal
blocks only, a TMA-store epilogue. Changes:
- the q/k head dim is two power-of-two parts, DQK0 + DQK1 (192 = 128 + 64; Gluon's shared
  buffers take power-of-two shapes): Q and K each come as two TMA boxes into two buffers, and
  S = Q0 K0^T + Q1 K1^T is two async wgmma into one accumulator, the way the Triton kernels
  split d192 (mha.launch.head_split);
- HEAD_DV (V boxes, the O accumulator and O) is its own constexpr, K and V have their own
  column offsets;
- the epilogue stages O in the consumer's Q0 slot, of O's shape (DQK0 == HEAD_DV).
Shared memory at BLOCK_N 128, 2 stages, d192/128: Q 48 KB + K 96 KB + V 64 KB = 208 KB.
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

BLOCK_M = 128

# Lengths and head counts never change the code (as in mha.kernels.forward); the lengths are
# multiples of 128 here, which the JIT would otherwise specialize on.
DO_NOT_SPECIALIZE = ("seqlen_q", "seqlen_k", "num_heads_q", "group")
NUM_CONSUMERS = 2
# Registers: 2 consumer warpgroups + the loader's warpgroup share the 64K register file, so the
# launch bound is 65536 / (3 * 128) rounded down to 8; setmaxnreg then moves registers from the
# loader (24) to the consumers (240): 2 * 128 * 240 + 128 * 24 = 64512.
MAXNREG = 168
LOADER_REGS = 24
CONSUMER_REGS = 240


LN2: gl.constexpr = gl.constexpr(0.6931471805599453)


# ----------------------------------------------------------------------------- loader partition
@gluon.jit
def _loader(q_desc, q2_desc, k_desc, k2_desc, v_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar, k_ready,
            k_empty, v_ready, v_empty, q_row, q_col, kv_row, k_col, v_col, n_total,
            NUM_CONSUMERS: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
            DQK0: gl.constexpr):
    # Q: two boxes (the head dim's two parts) per consumer, one barrier for all.
    mbarrier.expect(q_bar, NUM_CONSUMERS * (q_desc.block_type.nbytes + q2_desc.block_type.nbytes))
    for c in gl.static_range(NUM_CONSUMERS):
        tma.async_copy_global_to_shared(q_desc, [q_row + c * ROWS, q_col], q_bar, q_smem.index(c))
        tma.async_copy_global_to_shared(q2_desc, [q_row + c * ROWS, q_col + DQK0], q_bar, q2_smem.index(c))
    for j in range(n_total):
        st = j % STAGES
        ph = (j // STAGES) & 1
        # A fresh mbarrier counts as having completed the phase before phase 0, so the first
        # round (ph = 0) waits for parity 1 and passes at once: all slots start empty.
        mbarrier.wait(k_empty.index(st), ph ^ 1)
        mbarrier.expect(k_ready.index(st), k_desc.block_type.nbytes + k2_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, k_col], k_ready.index(st), k_smem.index(st))
        tma.async_copy_global_to_shared(k2_desc, [kv_row + j * BLOCK_N, k_col + DQK0], k_ready.index(st),
                                        k2_smem.index(st))
        mbarrier.wait(v_empty.index(st), ph ^ 1)
        mbarrier.expect(v_ready.index(st), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [kv_row + j * BLOCK_N, v_col], v_ready.index(st), v_smem.index(st))


# ----------------------------------------------------------------------------- consumer partition
@gluon.jit
def _step(j, q, q2, k_smem, k2_smem, v_smem, k_ready, k_empty, v_ready, v_empty, acc, p_op, m_i, l_i, qk_scale,
          rows, cols0, diag_off,
          MASK: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
          s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr):
    """Key block j: S_j = Q K_j^T, O += P_{j-1} V_{j-1}, softmax of S_j overlapping that PV."""
    ROWS: gl.constexpr = q.shape[0]
    st = j % STAGES
    ph = (j // STAGES) & 1
    pj = j - 1
    pst = pj % STAGES
    pph = (pj // STAGES) & 1

    mbarrier.wait(k_ready.index(st), ph)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(q, k_smem.index(st).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s_tok = warpgroup_mma(q2, k2_smem.index(st).permute((1, 0)), s_tok, is_async=True)
    mbarrier.wait(v_ready.index(pst), pph)
    acc_tok = warpgroup_mma(p_op, v_smem.index(pst), acc, is_async=True)
    # wgmma groups retire in order: with one left outstanding, S_j is done, PV_{j-1} may run on.
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    mbarrier.arrive(k_empty.index(st), count=1)

    s = s * qk_scale
    if MASK:
        keep = (j * BLOCK_N + cols0)[None, :] <= (rows + diag_off)[:, None]
        s = gl.where(keep, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1))
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    p_new = gl.convert_layout(p.to(q.dtype), p_layout)

    # p_op is a dependency of the wait so its registers stay untouched until the wgmma reading
    # them has retired.
    acc, p_old = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, p_op))
    mbarrier.arrive(v_empty.index(pst), count=1)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    return acc, p_new, m_new, l_i


@gluon.jit
def _consumer(CID: gl.constexpr, o_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Lse,
              qk_scale, q_row, o_col, lse_off, m0, diag_off, n_full, n_total,
              ROWS: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              CAUSAL: gl.constexpr):
    NW: gl.constexpr = gl.num_warps()
    # wgmma accumulator layouts: m16 x n x k16 (16-bit inputs), warps stacked along rows.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                       instr_shape=[16, HEAD_DV, 16])
    # P as the register A operand of the PV wgmma (k_width: 2 16-bit elements per 32 bits).
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)

    q = q_smem.index(CID)
    q2 = q2_smem.index(CID)
    rows = m0 + CID * ROWS + gl.arange(0, ROWS, layout=row_layout)   # query positions
    cols0 = gl.arange(0, BLOCK_N, layout=col_layout)

    # Block 0 alone: nothing to overlap with yet. Masked when causal (a no-op unless block 0 is
    # on the diagonal; cheaper than a run-time branch between two prologues).
    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_ready.index(0), 0)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s_tok = warpgroup_mma(q2, k2_smem.index(0).permute((1, 0)), s_tok, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
    mbarrier.arrive(k_empty.index(0), count=1)
    s = s * qk_scale
    if CAUSAL:
        s = gl.where(cols0[None, :] <= (rows + diag_off)[:, None], s, float("-inf"))
    m_i = gl.max(s, axis=1)
    p = gl.exp2(s - m_i[:, None])
    l_i = gl.sum(p, axis=1)
    p_op = gl.convert_layout(p.to(q.dtype), p_layout)
    acc = gl.zeros([ROWS, HEAD_DV], gl.float32, layout=o_layout)

    # Off-band blocks: no mask.
    for j in range(1, n_full):
        acc, p_op, m_i, l_i = _step(j, q, q2, k_smem, k2_smem, v_smem, k_ready, k_empty, v_ready, v_empty, acc, p_op, m_i, l_i,
                                    qk_scale, rows, cols0, diag_off, False, STAGES, BLOCK_N, s_layout, o_layout,
                                    p_layout)
    if CAUSAL:
        # Diagonal blocks: masked.
        for j in range(gl.maximum(n_full, 1), n_total):
            acc, p_op, m_i, l_i = _step(j, q, q2, k_smem, k2_smem, v_smem, k_ready, k_empty, v_ready, v_empty, acc, p_op, m_i,
                                        l_i, qk_scale, rows, cols0, diag_off, True, STAGES, BLOCK_N, s_layout,
                                        o_layout, p_layout)

    # Last PV.
    last = n_total - 1
    lst = last % STAGES
    mbarrier.wait(v_ready.index(lst), (last // STAGES) & 1)
    acc_tok = warpgroup_mma(p_op, v_smem.index(lst), acc, is_async=True)
    acc, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, p_op))
    mbarrier.arrive(v_empty.index(lst), count=1)

    # lse (natural log) per row; every causal row sees key 0.. so l_i > 0 here.
    lse = (m_i + gl.log2(l_i)) * LN2
    gl.store(Lse + lse_off + rows, lse)

    out = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    # Reuse this consumer's Q slot as the O staging buffer: its last reader (the final QK^T
    # wgmma) has retired. Generic-proxy stores, then a fence before the async-proxy TMA store.
    q.store(out.to(q.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [q_row + CID * ROWS, o_col], q)
    tma.store_wait(pendings=0)


# ----------------------------------------------------------------------------- kernel
@gluon.jit(do_not_specialize=DO_NOT_SPECIALIZE)
def attn_fwd_gluon(q_desc, q2_desc, k_desc, k2_desc, v_desc, o_desc, Lse, qk_scale, seqlen_q, seqlen_k, num_heads_q, group,
                    HEAD_DQK: gl.constexpr, DQK0: gl.constexpr, HEAD_DV: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                    CAUSAL: gl.constexpr, NUM_CONSUMERS: gl.constexpr, LOADER_REGS: gl.constexpr,
                    CONSUMER_REGS: gl.constexpr):
    ROWS: gl.constexpr = BLOCK_M // NUM_CONSUMERS
    dtype: gl.constexpr = q_desc.dtype
    if CAUSAL:
        # Grid (slices, tiles), the last query tile first: the GPU starts programs in grid order,
        # so the longest causal tiles of every head start in the first waves and the short ones
        # fill the tail (in query order, the longest ran last and a few heads left SMs idle).
        pid_bh = gl.program_id(0)
        pid_m = gl.num_programs(1) - 1 - gl.program_id(1)
    else:
        # Grid (tiles, slices): a head's query tiles run together and share its K/V in L2.
        pid_m = gl.program_id(0)
        pid_bh = gl.program_id(1)
    b = pid_bh // num_heads_q
    h = pid_bh % num_heads_q
    hk = h // group                       # GQA: q-heads [hk*group, (hk+1)*group) share K/V head hk
    m0 = pid_m * BLOCK_M
    q_row = b * seqlen_q + m0
    q_col = h * HEAD_DQK
    o_col = h * HEAD_DV
    kv_row = b * seqlen_k
    k_col = hk * HEAD_DQK
    v_col = hk * HEAD_DV
    lse_off = pid_bh * seqlen_q            # lse is (B, Hq, Sq)
    diag_off = seqlen_k - seqlen_q          # bottom-right aligned causal diagonal
    if CAUSAL:
        # Blocks wholly visible to row m0 (hence to all rows of the tile), then up to the last
        # key row m0 + BLOCK_M - 1 can see.
        n_full = (m0 + diag_off) // BLOCK_N
        n_total = (m0 + diag_off + BLOCK_M) // BLOCK_N
    else:
        n_full = seqlen_k // BLOCK_N
        n_total = n_full

    gl.static_assert(DQK0 == HEAD_DV, "O is staged in the Q0 slot")
    q_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, DQK0], q_desc.layout)
    q2_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, ROWS, HEAD_DQK - DQK0], q2_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, DQK0], k_desc.layout)
    k2_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DQK - DQK0], k2_desc.layout)
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
        # one arrive per consumer partition frees a slot
        mbarrier.init(k_empty.index(i), count=NUM_CONSUMERS)
        mbarrier.init(v_empty.index(i), count=NUM_CONSUMERS)

    # Two consumer partitions and the loader (NUM_CONSUMERS is 2: the host launches nothing else).
    # Argument tuples are written out at each call: a tuple assigned to a name first has its
    # constexprs turned into int32 scalars (Triton 3.8 assignment semantics).
    gl.warp_specialize([
        (_consumer, (0, o_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Lse, qk_scale,
                     q_row, o_col, lse_off, m0, diag_off, n_full, n_total, ROWS, HEAD_DV, BLOCK_N, STAGES,
                     CAUSAL)),
        (_consumer, (1, o_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty, Lse, qk_scale,
                     q_row, o_col, lse_off, m0, diag_off, n_full, n_total, ROWS, HEAD_DV, BLOCK_N, STAGES,
                     CAUSAL)),
        (_loader, (q_desc, q2_desc, k_desc, k2_desc, v_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar,
                   k_ready, k_empty, v_ready, v_empty, q_row, q_col, kv_row, k_col, v_col, n_total, NUM_CONSUMERS,
                   ROWS, BLOCK_N, STAGES, DQK0)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


# ----------------------------------------------------------------------------- host side
GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}
DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
ROWS = BLOCK_M // NUM_CONSUMERS


def layout(rows: int, dim: int, el):
    return gl.NVMMASharedLayout.get_default_for([rows, dim], el)


def constexprs(dqk: int, dv: int, block_n: int, stages: int, causal: bool) -> dict:
    return {"HEAD_DQK": dqk, "DQK0": dv, "HEAD_DV": dv, "BLOCK_M": BLOCK_M, "BLOCK_N": block_n, "STAGES": stages,
            "CAUSAL": causal, "NUM_CONSUMERS": NUM_CONSUMERS, "LOADER_REGS": LOADER_REGS,
            "CONSUMER_REGS": CONSUMER_REGS}


def run(q, k, v, causal: bool, sm_scale: float, block_n: int = 128, stages: int = 2):
    """(out, lse) for contiguous q (B, Sq, Hq, Dqk), k (B, Sk, Hk, Dqk), v (B, Sk, Hk, Dv); lengths
    multiples of 128, causal Sk >= Sq."""
    batch, seqlen_q, heads_q, dqk = q.shape
    seqlen_k, heads_k, dv = k.shape[1], k.shape[2], v.shape[3]
    el = GL_DTYPES[q.dtype]
    out = torch.empty((batch, seqlen_q, heads_q, dv), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)

    def desc(t, box, cols=None):
        cols = cols or t.shape[3]
        flat = t.view(t.shape[0] * t.shape[1], t.shape[2] * t.shape[3])
        return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [box, cols], layout(box, cols, el))

    tiles = seqlen_q // BLOCK_M
    grid = (batch * heads_q, tiles) if causal else (tiles, batch * heads_q)
    d0, d1 = dv, dqk - dv         # the q/k head dim's parts: the first as wide as V's
    attn_fwd_gluon[grid](desc(q, ROWS, d0), desc(q, ROWS, d1), desc(k, block_n, d0), desc(k, block_n, d1),
                         desc(v, block_n), desc(out, ROWS), lse,
                         sm_scale * 1.4426950408889634, seqlen_q, seqlen_k, heads_q, heads_q // heads_k,
                         **constexprs(dqk, dv, block_n, stages, causal), num_warps=4, maxnreg=MAXNREG)
    return out, lse
