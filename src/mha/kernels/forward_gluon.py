"""Forward attention in Triton's Gluon dialect for Hopper (sm90), in the FA3 design.

Selected as data: an sm90 forward bucket's `gluon` config names the Triton versions that run it
(mha.config); mha.launch falls back to mha.kernels.forward for inputs this kernel cannot take.
Gluon is `triton.experimental.gluon`, absent from Triton 3.4: import this module only where a
config selects it. docs/configs.md, "Gluon forward", has the design and the measurements.

One program = one 128-row query tile of one (batch, query head), three partitions
(gl.warp_specialize):
- two consumer warpgroups (4 warps each), rows [0, 64) and [64, 128) of the tile: the explicit
  two-group split of the tile that Triton's automatic warp specialization could not do for
  causal masks;
- a loader warp: Q once, then K and V blocks through TMA into STAGES-deep rings, each slot
  guarded by a "ready" mbarrier (TMA byte count) and an "empty" one (one arrive per consumer).
  K and V have their own rings, so QK^T of a block starts before its V has landed.
Consumers issue async wgmma: S_j = Q K_j^T and O += P_{j-1} V_{j-1} back to back, then the
softmax of block j runs while the PV of block j-1 is still in flight, and the two consumers take
turns to issue (PINGPONG), so one group's GEMMs fill the tensor cores while the other's softmax
runs. P stays in registers (the
A operand of the PV wgmma). Causal blocks wholly left of the diagonal run without a mask; only
the blocks that cross it are masked; blocks right of it are never loaded. The epilogue writes O
through the consumer's Q slot and a TMA store, lse (natural log) with a plain store.

The grid is 1-D (see MAXNREG's comment below and `_tile`): a program walks tiles in the launch
order, a slice's query tiles together, or for causal the longest tiles first, for the split head
dim HEAD_GROUP slices at a time. ONE_TILE is the form for a grid of one program per tile: the
same tile code without the loop around it.

Dqk 192 / Dv 128 (the `pe` bucket, MLA's shape) runs the same kernel with the q/k head dim in two
power-of-two parts, HEAD_DIM = Dv = 128 and HEAD_DQK1 = 64, as mha.kernels.backward_gluon_pe
does: Q and K come as two TMA boxes into two buffers each, and S is two async wgmma into one
accumulator. Elsewhere HEAD_DQK1 is 0 and q2_desc/k2_desc are None.

What the host side must guarantee (mha.launch.gluon_inputs_ok checks it before every launch):
q/k (B, S, H, Dqk), v (B, Sk, Hk, Dv) contiguous fp16/bf16, Dqk == Dv in {64, 128} or Dqk 192 /
Dv 128, Hq % Hk == 0, Sq and
Sk positive multiples of 128 (descriptors see the tensors as (B*S, H*D) matrices, so a tile must
not straddle two batches), and for causal Sk >= Sq (every row sees a key). With FOLD_SCALE, a
positive softmax scale (mha.launch.gluon_scale_ok).
"""
import functools
import os

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

from .. import tile_schedule
from ..config import GLUON_TILE_ROWS as BLOCK_M   # the config file's check and the launch know it too

# Lengths and head counts never change the code (as in mha.kernels.forward); the lengths are
# multiples of 128 here, which the JIT would otherwise specialize on.
DO_NOT_SPECIALIZE = ("seqlen_q", "seqlen_k", "num_heads_q", "group", "batch")
NUM_CONSUMERS = 2
# Ping-pong: the two consumer warpgroups take turns to issue their wgmma pair (QK^T of block j, PV
# of block j-1), so one group's GEMMs run while the other works through its softmax (FA3's
# inter-warpgroup schedule). Turns pass through two count-1 mbarriers, one per group.
PINGPONG = True
# The softmax scale folded into the exponent: the row max is taken on the raw scores and scaled
# once per row, and exp2(s * scale - m) is one FFMA per score instead of an FMUL and an FADD.
# That max is the scaled row's only for a positive scale, and 0 times a masked -inf is NaN: the
# launch sends other scales to the Triton forward.
FOLD_SCALE = True
# Causal grids of the split head dim (Dqk 192 / Dv 128) run HEAD_GROUP (batch, head) slices at
# a time, longest query tiles first in each group (see the kernel): in the one-pass order, with a
# slice per program in flight and no KV heads shared, the programs in flight stream more K/V than
# L2 holds. The other causal grids (HEAD_GROUP 0) keep the one-pass order: their GQA K/V fits in
# L2 in any order, and grouping only lengthens the tail (docs/configs.md has the measurements).
PE_HEAD_GROUP = 4
# The grid: one program per SM walks tiles t = pid, pid + programs, ... in the launch order above,
# so a program's next Q (a second buffer where shared memory allows) and K/V blocks load while it
# finishes the current tile; with a program per tile those waits are exposed. mha.tile_schedule
# chooses one program per tile where a static stride would spread causal tiles unevenly, and
# mha.launch then launches the ONE_TILE form, which carries no slots, turns or Q buffers across
# tiles.
# Registers: 2 consumer warpgroups + the loader's warpgroup share the 64K register file, so the
# launch bound is 65536 / (3 * 128) rounded down to 8; setmaxnreg then moves registers from the
# loader (24) to the consumers (240): 2 * 128 * 240 + 128 * 24 = 64512.
MAXNREG = 168
LOADER_REGS = 24
CONSUMER_REGS = 240


LN2: gl.constexpr = gl.constexpr(0.6931471805599453)


# ----------------------------------------------------------------------------- tiles
@gluon.jit
def _tile(t, n_slices, n_tiles, seqlen_q, seqlen_k, num_heads_q, group, BLOCK_M: gl.constexpr,
          BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, HEAD_DQK1: gl.constexpr, CAUSAL: gl.constexpr,
          HEAD_GROUP: gl.constexpr):
    """Tile t of the launch order: its rows and columns in the (B*S, H*D) views, its lse offset,
    first query row, and its key blocks (wholly visible ones, all)."""
    if CAUSAL and HEAD_GROUP > 0:
        # HEAD_GROUP slices at a time, and in each group the last query tile first: the tiles in
        # flight share a few slices' K/V in L2, and each group's longest tiles still start first.
        first = t // (HEAD_GROUP * n_tiles) * HEAD_GROUP
        size = gl.minimum(n_slices - first, HEAD_GROUP)
        r = t - first * n_tiles
        pid_bh = first + r % size
        pid_m = n_tiles - 1 - r // size
    elif CAUSAL:
        # The last query tile of every slice first: the longest causal tiles start in the first
        # waves and the short ones fill the tail.
        pid_bh = t % n_slices
        pid_m = n_tiles - 1 - t // n_slices
    else:
        # A slice's query tiles together: they share its K/V in L2.
        pid_m = t % n_tiles
        pid_bh = t // n_tiles
    HEAD_DQK: gl.constexpr = HEAD_DIM + HEAD_DQK1
    b = pid_bh // num_heads_q
    h = pid_bh % num_heads_q
    hk = h // group                       # GQA: q-heads [hk*group, (hk+1)*group) share K/V head hk
    m0 = pid_m * BLOCK_M
    n_full, n_total = query_tile_key_blocks(m0, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, CAUSAL)
    return (b * seqlen_q + m0, h * HEAD_DQK, h * HEAD_DIM, b * seqlen_k, hk * HEAD_DQK, hk * HEAD_DIM,
            pid_bh * seqlen_q, m0, n_full, n_total)


@gluon.jit
def query_tile_key_blocks(m0, seqlen_q, seqlen_k, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """The query tile at row m0's key blocks of BLOCK_N: (wholly visible ones, all it reads). Causal
    with the diagonal at the bottom right (seqlen_k - seqlen_q): the blocks visible to row m0, hence
    to every row of the tile, then up to the last key row m0 + BLOCK_M - 1 can see."""
    if CAUSAL:
        diag_off = seqlen_k - seqlen_q
        n_full = (m0 + diag_off) // BLOCK_N
        n_total = (m0 + diag_off + BLOCK_M) // BLOCK_N
    else:
        n_full = seqlen_k // BLOCK_N
        n_total = n_full
    return n_full, n_total


# ----------------------------------------------------------------------------- loader partition
@gluon.jit
def _loader(q_desc, q2_desc, k_desc, k2_desc, v_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar, q_empty,
            k_ready, k_empty, v_ready, v_empty, start, step, n_slices, n_tiles, seqlen_q, seqlen_k, num_heads_q,
            group, NUM_CONSUMERS: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
            HEAD_DIM: gl.constexpr, HEAD_DQK1: gl.constexpr, CAUSAL: gl.constexpr, HEAD_GROUP: gl.constexpr,
            Q_BUFS: gl.constexpr, ONE_TILE: gl.constexpr):
    if ONE_TILE:
        # The program's only tile: rings and Q buffer from their first slot, no loop to carry them.
        _load_tile(start, 0, 0, q_desc, q2_desc, k_desc, k2_desc, v_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem,
                   q_bar, q_empty, k_ready, k_empty, v_ready, v_empty, n_slices, n_tiles, seqlen_q, seqlen_k,
                   num_heads_q, group, NUM_CONSUMERS, ROWS, BLOCK_N, STAGES, HEAD_DIM, HEAD_DQK1, CAUSAL, HEAD_GROUP,
                   Q_BUFS, ONE_TILE)
    else:
        base = 0   # K/V blocks of this program's earlier tiles: the rings' slots and phases run on
        i = 0      # this program's tiles so far
        for t in range(start, n_slices * n_tiles, step):
            n_total = _load_tile(t, base, i, q_desc, q2_desc, k_desc, k2_desc, v_desc, q_smem, q2_smem, k_smem,
                                 k2_smem, v_smem, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty, n_slices,
                                 n_tiles, seqlen_q, seqlen_k, num_heads_q, group, NUM_CONSUMERS, ROWS, BLOCK_N,
                                 STAGES, HEAD_DIM, HEAD_DQK1, CAUSAL, HEAD_GROUP, Q_BUFS, ONE_TILE)
            base += n_total
            i += 1


@gluon.jit
def _load_tile(t, base, i, q_desc, q2_desc, k_desc, k2_desc, v_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar,
               q_empty, k_ready, k_empty, v_ready, v_empty, n_slices, n_tiles, seqlen_q, seqlen_k, num_heads_q, group,
               NUM_CONSUMERS: gl.constexpr, ROWS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
               HEAD_DIM: gl.constexpr, HEAD_DQK1: gl.constexpr, CAUSAL: gl.constexpr, HEAD_GROUP: gl.constexpr,
               Q_BUFS: gl.constexpr, ONE_TILE: gl.constexpr):
    """Tile t's Q and K/V blocks, the program's i-th tile, its ring slots counted on from `base`;
    returns its number of key blocks."""
    q_row, q_col, o_col, kv_row, kv_col, v_col, lse_off, m0, n_full, n_total = _tile(
        t, n_slices, n_tiles, seqlen_q, seqlen_k, num_heads_q, group, 2 * ROWS, BLOCK_N, HEAD_DIM, HEAD_DQK1,
        CAUSAL, HEAD_GROUP)
    qb = i % Q_BUFS
    # Q: one box per consumer (two with a second head-dim part), one barrier for all (both
    # consumers start together anyway), into a buffer both consumers have released (they
    # stage O in it): a fresh "empty" barrier passes at once, so a single tile needs no wait.
    if not ONE_TILE:
        mbarrier.wait(q_empty.index(qb), ((i // Q_BUFS) & 1) ^ 1)
    if HEAD_DQK1 > 0:
        mbarrier.expect(q_bar.index(qb), NUM_CONSUMERS * (q_desc.block_type.nbytes + q2_desc.block_type.nbytes))
    else:
        mbarrier.expect(q_bar.index(qb), NUM_CONSUMERS * q_desc.block_type.nbytes)
    for c in gl.static_range(NUM_CONSUMERS):
        tma.async_copy_global_to_shared(q_desc, [q_row + c * ROWS, q_col], q_bar.index(qb),
                                        q_smem.index(qb * NUM_CONSUMERS + c))
        if HEAD_DQK1 > 0:
            tma.async_copy_global_to_shared(q2_desc, [q_row + c * ROWS, q_col + HEAD_DIM], q_bar.index(qb),
                                            q2_smem.index(qb * NUM_CONSUMERS + c))
    _load_kv(k_desc, k2_desc, v_desc, k_smem, k2_smem, v_smem, k_ready, k_empty, v_ready, v_empty, base, kv_row,
             kv_col, v_col, n_total, BLOCK_N, STAGES, HEAD_DIM, HEAD_DQK1)
    return n_total


@gluon.jit
def _load_kv(k_desc, k2_desc, v_desc, k_smem, k2_smem, v_smem, k_ready, k_empty, v_ready, v_empty, base, kv_row,
             kv_col, v_col, n_total, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, HEAD_DIM: gl.constexpr,
             HEAD_DQK1: gl.constexpr):
    """One tile's K and V blocks into the rings, slots counted on from `base`."""
    for j in range(n_total):
        st = (base + j) % STAGES
        ph = ((base + j) // STAGES) & 1
        # A fresh mbarrier counts as having completed the phase before phase 0, so the first
        # round (ph = 0) waits for parity 1 and passes at once: all slots start empty.
        mbarrier.wait(k_empty.index(st), ph ^ 1)
        if HEAD_DQK1 > 0:
            mbarrier.expect(k_ready.index(st), k_desc.block_type.nbytes + k2_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k2_desc, [kv_row + j * BLOCK_N, kv_col + HEAD_DIM], k_ready.index(st),
                                            k2_smem.index(st))
        else:
            mbarrier.expect(k_ready.index(st), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, kv_col], k_ready.index(st), k_smem.index(st))
        mbarrier.wait(v_empty.index(st), ph ^ 1)
        mbarrier.expect(v_ready.index(st), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [kv_row + j * BLOCK_N, v_col], v_ready.index(st), v_smem.index(st))


# ----------------------------------------------------------------------------- consumer partition
@gluon.jit
def _step(j, base, turn_base, q, q2, k_smem, k2_smem, v_smem, k_ready, k_empty, v_ready, v_empty, acc, p_op, m_i,
          l_i, qk_scale, rows, cols0, diag_off, turn_mine, turn_other,
          MASK: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
          s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr,
          PINGPONG: gl.constexpr, FIRST: gl.constexpr, FOLD: gl.constexpr, HEAD_DQK1: gl.constexpr):
    """Key block j of the tile: S_j = Q K_j^T, O += P_{j-1} V_{j-1}, softmax of S_j overlapping that
    PV. Ring slots count on from `base` (the program's earlier tiles' blocks), turns from `turn_base`."""
    ROWS: gl.constexpr = q.shape[0]
    st = (base + j) % STAGES
    ph = ((base + j) // STAGES) & 1
    pj = base + j - 1
    pst = pj % STAGES
    pph = (pj // STAGES) & 1

    mbarrier.wait(k_ready.index(st), ph)
    if PINGPONG:
        # Turn k = turn_base + j - 1 of this group: the first group's turn 0 passes at once (a fresh
        # barrier's phase "-1" is complete), every later turn waits for the other group's previous
        # issue. Both groups take the same number of turns per tile, so the count runs on.
        mbarrier.wait(turn_mine, ((turn_base + j - 1) & 1) ^ FIRST)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(q, k_smem.index(st).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    if HEAD_DQK1 > 0:
        s_tok = warpgroup_mma(q2, k2_smem.index(st).permute((1, 0)), s_tok, is_async=True)
    mbarrier.wait(v_ready.index(pst), pph)
    acc_tok = warpgroup_mma(p_op, v_smem.index(pst), acc, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn_other, count=1)
    # wgmma groups retire in order: with one left outstanding, S_j is done, PV_{j-1} may run on.
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
    mbarrier.arrive(k_empty.index(st), count=1)

    if not FOLD:
        s = s * qk_scale
    if MASK:
        keep = (j * BLOCK_N + cols0)[None, :] <= (rows + diag_off)[:, None]
        s = gl.where(keep, s, float("-inf"))
    if FOLD:
        # qk_scale > 0 (FOLD_SCALE above), so max(s) * qk_scale is the max of the scaled row.
        m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
        p = gl.exp2(s * qk_scale - m_new[:, None])
    else:
        m_new = gl.maximum(m_i, gl.max(s, axis=1))
        p = gl.exp2(s - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    p_new = gl.convert_layout(p.to(q.dtype), p_layout)

    # p_op is a dependency of the wait so its registers stay untouched until the wgmma reading
    # them has retired.
    acc, p_old = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, p_op))
    mbarrier.arrive(v_empty.index(pst), count=1)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    return acc, p_new, m_new, l_i


@gluon.jit
def _consumer(CID: gl.constexpr, o_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar, q_empty, k_ready, k_empty,
              v_ready, v_empty, Lse, qk_scale, start, step, n_slices, n_tiles, seqlen_q, seqlen_k, num_heads_q, group,
              turn, ROWS: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              CAUSAL: gl.constexpr, PINGPONG: gl.constexpr, FOLD: gl.constexpr, HEAD_DQK1: gl.constexpr,
              HEAD_GROUP: gl.constexpr, Q_BUFS: gl.constexpr, NUM_CONSUMERS: gl.constexpr,
              ONE_TILE: gl.constexpr):
    NW: gl.constexpr = gl.num_warps()
    # wgmma accumulator layouts: m16 x n x k16 (16-bit inputs), warps stacked along rows.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    # P as the register A operand of the PV wgmma (k_width: 2 16-bit elements per 32 bits).
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    turn_mine = turn.index(CID)
    turn_other = turn.index(1 - CID)
    cols0 = gl.arange(0, BLOCK_N, layout=col_layout)
    if ONE_TILE:
        # The program's only tile: ring slots, turns and Q buffer from the first, no loop to carry them.
        _consume_tile(start, 0, 0, 0, o_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar, q_empty, k_ready,
                      k_empty, v_ready, v_empty, Lse, qk_scale, n_slices, n_tiles, seqlen_q, seqlen_k, num_heads_q,
                      group, turn_mine, turn_other, cols0, s_layout, o_layout, p_layout, row_layout, CID, ROWS,
                      HEAD_DIM, BLOCK_N, STAGES, CAUSAL, PINGPONG, FOLD, HEAD_DQK1, HEAD_GROUP, Q_BUFS,
                      NUM_CONSUMERS, ONE_TILE)
    else:
        base = 0        # K/V blocks of this program's earlier tiles (ring slots and phases run on)
        turn_base = 0   # turns taken in this program's earlier tiles
        i = 0           # this program's tiles so far
        for t in range(start, n_slices * n_tiles, step):
            n_total = _consume_tile(t, base, turn_base, i, o_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar,
                                    q_empty, k_ready, k_empty, v_ready, v_empty, Lse, qk_scale, n_slices, n_tiles,
                                    seqlen_q, seqlen_k, num_heads_q, group, turn_mine, turn_other, cols0, s_layout,
                                    o_layout, p_layout, row_layout, CID, ROWS, HEAD_DIM, BLOCK_N, STAGES, CAUSAL,
                                    PINGPONG, FOLD, HEAD_DQK1, HEAD_GROUP, Q_BUFS, NUM_CONSUMERS, ONE_TILE)
            base += n_total
            turn_base += n_total - 1
            i += 1


@gluon.jit
def _consume_tile(t, base, turn_base, i, o_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar, q_empty, k_ready,
                  k_empty, v_ready, v_empty, Lse, qk_scale, n_slices, n_tiles, seqlen_q, seqlen_k, num_heads_q, group,
                  turn_mine, turn_other, cols0, s_layout: gl.constexpr, o_layout: gl.constexpr,
                  p_layout: gl.constexpr, row_layout: gl.constexpr, CID: gl.constexpr, ROWS: gl.constexpr,
                  HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  PINGPONG: gl.constexpr, FOLD: gl.constexpr, HEAD_DQK1: gl.constexpr, HEAD_GROUP: gl.constexpr,
                  Q_BUFS: gl.constexpr, NUM_CONSUMERS: gl.constexpr, ONE_TILE: gl.constexpr):
    """This consumer's rows of tile t, the program's i-th tile: its ring slots counted on from
    `base`, its ping-pong turns from `turn_base`; returns the tile's number of key blocks."""
    q_row, q_col, o_col, kv_row, kv_col, v_col, lse_off, m0, n_full, n_total = _tile(
        t, n_slices, n_tiles, seqlen_q, seqlen_k, num_heads_q, group, NUM_CONSUMERS * ROWS, BLOCK_N, HEAD_DIM,
        HEAD_DQK1, CAUSAL, HEAD_GROUP)
    diag_off = seqlen_k - seqlen_q   # bottom-right aligned causal diagonal
    qb = i % Q_BUFS
    q = q_smem.index(qb * NUM_CONSUMERS + CID)
    q2 = q2_smem.index(qb * NUM_CONSUMERS + CID)
    rows = m0 + CID * ROWS + gl.arange(0, ROWS, layout=row_layout)   # query positions

    # Block 0 alone: nothing to overlap with yet. Masked when causal (a no-op unless block 0
    # is on the diagonal; cheaper than a run-time branch between two prologues).
    st0 = base % STAGES
    mbarrier.wait(q_bar.index(qb), (i // Q_BUFS) & 1)
    mbarrier.wait(k_ready.index(st0), (base // STAGES) & 1)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(q, k_smem.index(st0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    if HEAD_DQK1 > 0:
        s_tok = warpgroup_mma(q2, k2_smem.index(st0).permute((1, 0)), s_tok, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
    mbarrier.arrive(k_empty.index(st0), count=1)
    if not FOLD:
        s = s * qk_scale
    if CAUSAL:
        s = gl.where(cols0[None, :] <= (rows + diag_off)[:, None], s, float("-inf"))
    if FOLD:
        m_i = gl.max(s, axis=1) * qk_scale
        p = gl.exp2(s * qk_scale - m_i[:, None])
    else:
        m_i = gl.max(s, axis=1)
        p = gl.exp2(s - m_i[:, None])
    l_i = gl.sum(p, axis=1)
    p_op = gl.convert_layout(p.to(q.dtype), p_layout)
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=o_layout)

    # Off-band blocks: no mask.
    for j in range(1, n_full):
        acc, p_op, m_i, l_i = _step(j, base, turn_base, q, q2, k_smem, k2_smem, v_smem, k_ready, k_empty, v_ready,
                                    v_empty, acc, p_op, m_i, l_i, qk_scale, rows, cols0, diag_off, turn_mine,
                                    turn_other, False, STAGES, BLOCK_N, s_layout, o_layout, p_layout, PINGPONG,
                                    1 - CID, FOLD, HEAD_DQK1)
    if CAUSAL:
        # Diagonal blocks: masked.
        for j in range(gl.maximum(n_full, 1), n_total):
            acc, p_op, m_i, l_i = _step(j, base, turn_base, q, q2, k_smem, k2_smem, v_smem, k_ready, k_empty,
                                        v_ready, v_empty, acc, p_op, m_i, l_i, qk_scale, rows, cols0, diag_off,
                                        turn_mine, turn_other, True, STAGES, BLOCK_N, s_layout, o_layout,
                                        p_layout, PINGPONG, 1 - CID, FOLD, HEAD_DQK1)

    # Last PV.
    last = base + n_total - 1
    lst = last % STAGES
    mbarrier.wait(v_ready.index(lst), (last // STAGES) & 1)
    acc_tok = warpgroup_mma(p_op, v_smem.index(lst), acc, is_async=True)
    acc, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, p_op))
    mbarrier.arrive(v_empty.index(lst), count=1)

    # lse (natural log) per row; every causal row sees key 0.. so l_i > 0 here.
    lse = (m_i + gl.log2(l_i)) * LN2
    gl.store(Lse + lse_off + rows, lse)

    out = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    # Reuse this consumer's Q slot (the first part's: HEAD_DIM = Dv wide) as the O staging
    # buffer: its last reader (the final QK^T wgmma) has retired. Generic-proxy stores, then a
    # fence before the async-proxy TMA store; once that store has read the slot, the buffer
    # goes back to the loader for a later tile's Q (a single tile has none).
    q.store(out.to(q.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [q_row + CID * ROWS, o_col], q)
    tma.store_wait(pendings=0)
    if not ONE_TILE:
        mbarrier.arrive(q_empty.index(qb), count=1)
    return n_total


# ----------------------------------------------------------------------------- kernel
@gluon.jit(do_not_specialize=DO_NOT_SPECIALIZE)
def attn_fwd_gluon(q_desc, q2_desc, k_desc, k2_desc, v_desc, o_desc, Lse, qk_scale, seqlen_q, seqlen_k, num_heads_q,
                    group, batch, HEAD_DIM: gl.constexpr, HEAD_DQK1: gl.constexpr, BLOCK_M: gl.constexpr,
                    BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, NUM_CONSUMERS: gl.constexpr,
                    LOADER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr, PINGPONG: gl.constexpr,
                    FOLD_SCALE: gl.constexpr, HEAD_GROUP: gl.constexpr, Q_BUFS: gl.constexpr,
                    ONE_TILE: gl.constexpr):
    ROWS: gl.constexpr = BLOCK_M // NUM_CONSUMERS
    dtype: gl.constexpr = q_desc.dtype
    # A 1-D grid of any size up to the tiles: program p takes tiles p, p + programs, ... (_tile
    # gives the order); with ONE_TILE the grid has one program per tile and p takes tile p.
    n_tiles = seqlen_q // BLOCK_M
    n_slices = batch * num_heads_q
    start = gl.program_id(0)
    step = gl.num_programs(0)

    q_smem = gl.allocate_shared_memory(dtype, [Q_BUFS * NUM_CONSUMERS, ROWS, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    if HEAD_DQK1 > 0:
        q2_smem = gl.allocate_shared_memory(dtype, [Q_BUFS * NUM_CONSUMERS, ROWS, HEAD_DQK1], q2_desc.layout)
        k2_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DQK1], k2_desc.layout)
    else:
        q2_smem = q_smem   # not read: every use is under HEAD_DQK1 > 0
        k2_smem = k_smem
    q_bar = gl.allocate_shared_memory(gl.int64, [Q_BUFS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [Q_BUFS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [NUM_CONSUMERS, 1], mbarrier.MBarrierLayout())
    for qb in gl.static_range(Q_BUFS):
        mbarrier.init(q_bar.index(qb), count=1)
        # one arrive per consumer once its O has left the buffer
        mbarrier.init(q_empty.index(qb), count=NUM_CONSUMERS)
    for c in gl.static_range(NUM_CONSUMERS):
        mbarrier.init(turn.index(c), count=1)
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
        (_consumer, (0, o_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar, q_empty, k_ready, k_empty, v_ready,
                     v_empty, Lse, qk_scale, start, step, n_slices, n_tiles, seqlen_q, seqlen_k, num_heads_q, group,
                     turn, ROWS, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, PINGPONG, FOLD_SCALE, HEAD_DQK1, HEAD_GROUP,
                     Q_BUFS, NUM_CONSUMERS, ONE_TILE)),
        (_consumer, (1, o_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar, q_empty, k_ready, k_empty, v_ready,
                     v_empty, Lse, qk_scale, start, step, n_slices, n_tiles, seqlen_q, seqlen_k, num_heads_q, group,
                     turn, ROWS, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, PINGPONG, FOLD_SCALE, HEAD_DQK1, HEAD_GROUP,
                     Q_BUFS, NUM_CONSUMERS, ONE_TILE)),
        (_loader, (q_desc, q2_desc, k_desc, k2_desc, v_desc, q_smem, q2_smem, k_smem, k2_smem, v_smem, q_bar, q_empty,
                   k_ready, k_empty, v_ready, v_empty, start, step, n_slices, n_tiles, seqlen_q, seqlen_k,
                   num_heads_q, group, NUM_CONSUMERS, ROWS, BLOCK_N, STAGES, HEAD_DIM, HEAD_DQK1, CAUSAL, HEAD_GROUP,
                   Q_BUFS, ONE_TILE)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


# ----------------------------------------------------------------------------- host side
# (shared with mha.kernels.backward_gluon)
GL_DTYPES = {"fp16": gl.float16, "bf16": gl.bfloat16, "fp32": gl.float32}


@functools.lru_cache(maxsize=None)
def shared_layout(dtype: str, box: tuple[int, ...]):
    """The NVMMA shared-memory layout of a TMA box of `box` elements (what wgmma reads). Made once
    per box: every launch's descriptors ask for it, and Gluon builds and checks it in Python."""
    return gl.NVMMASharedLayout.get_default_for(list(box), GL_DTYPES[dtype])


def desc_type(dtype: str, box: tuple[int, ...]) -> str:
    """A descriptor argument's type as the runtime names it (TensorDescriptor's mangling): what an
    ahead-of-time compile of the launch needs."""
    return f"tensordesc<{dtype}[{','.join(map(str, box))}],{shared_layout(dtype, box)!r}>"


def matrix_desc(t: torch.Tensor, dtype: str, rows: int, cols: int | None = None) -> TensorDescriptor:
    """A descriptor over contiguous (B, S, H, D) `t` seen as the (B*S, H*D) matrix, boxes of
    `rows` x `cols` (default D: one head's rows of one batch; fewer for a part of the head dim)."""
    batch, length, heads, dim = t.shape
    cols = cols or dim
    flat = t.view(batch * length, heads * dim)
    return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [rows, cols], shared_layout(dtype, (rows, cols)))


def signature_types(dtype: str, dqk: int, dv: int, block_n: int) -> dict:
    """The descriptor arguments' types: q/o boxes of 64 rows, k/v boxes of BLOCK_N rows, all Dv
    wide, and for Dqk > Dv the q2/k2 boxes of the rest (elsewhere q2_desc and k2_desc are
    constexpr None: constexprs)."""
    rows = BLOCK_M // NUM_CONSUMERS
    q_type, kv_type = desc_type(dtype, (rows, dv)), desc_type(dtype, (block_n, dv))
    types = {"q_desc": q_type, "k_desc": kv_type, "v_desc": kv_type, "o_desc": q_type}
    if dqk > dv:
        types |= {"q2_desc": desc_type(dtype, (rows, dqk - dv)), "k2_desc": desc_type(dtype, (block_n, dqk - dv))}
    return types


def constexprs(dqk: int, dv: int, block_n: int, stages: int, causal: bool, one_tile: bool = False) -> dict:
    """The kernel's constexprs; `one_tile`: the form for a grid of one program per tile (no tile
    loop, ring slots and turns from the first, one Q buffer)."""
    no_second_part = {} if dqk > dv else {"q2_desc": None, "k2_desc": None}
    return {"HEAD_DIM": dv, "HEAD_DQK1": dqk - dv, "BLOCK_M": BLOCK_M, "BLOCK_N": block_n, "STAGES": stages,
            "CAUSAL": causal, "NUM_CONSUMERS": NUM_CONSUMERS, "LOADER_REGS": LOADER_REGS,
            "CONSUMER_REGS": CONSUMER_REGS, "PINGPONG": PINGPONG, "FOLD_SCALE": FOLD_SCALE,
            "HEAD_GROUP": PE_HEAD_GROUP if dqk > dv else 0,
            # a second Q buffer where shared memory has room for it (not beside the split head
            # dim's second parts) and a program has a next tile to load it for
            "Q_BUFS": 1 if dqk > dv or one_tile else 2, "ONE_TILE": one_tile,
            **no_second_part}


@functools.lru_cache(maxsize=None)
def _multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def programs(device: torch.device, problem: tile_schedule.Problem) -> int:
    """The grid's size: tile_schedule.grid_size on this GPU's SMs (a program takes a whole SM's
    registers). MHA_GLUON_PROGRAMS overrides it for tests and diagnosis: "tiles" launches one
    program per tile, a number that many programs (so that a small problem walks many tiles per
    program)."""
    forced = os.environ.get(tile_schedule.PROGRAMS_ENV)
    if forced:
        return tile_schedule.forced_programs(forced, problem.tiles)
    sms = _multiprocessors(device.index if device.index is not None else torch.cuda.current_device())
    return tile_schedule.grid_size(problem, sms)


def descriptors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, dtype: str, block_n: int):
    """TMA descriptors over the (B*S, H*D) views of contiguous q, k, v and out, as the kernel's
    non-constexpr arguments in order: (q, k, v, o), or (q, q2, k, k2, v, o) where Dqk > Dv, q/k
    boxes Dv wide and q2/k2 boxes the rest."""
    rows = BLOCK_M // NUM_CONSUMERS
    dqk, dv = q.shape[-1], v.shape[-1]
    q_parts = [matrix_desc(q, dtype, rows, dv)]
    k_parts = [matrix_desc(k, dtype, block_n, dv)]
    if dqk > dv:
        q_parts.append(matrix_desc(q, dtype, rows, dqk - dv))
        k_parts.append(matrix_desc(k, dtype, block_n, dqk - dv))
    return (*q_parts, *k_parts, matrix_desc(v, dtype, block_n), matrix_desc(out, dtype, rows))
