"""Toy attention-shaped kernels: a tiled QK^T sweep with a pipelined loop (num_stages matters)."""
import triton
import triton.language as tl


@triton.jit
def _scale(s, scale):
    return s * scale


@triton.jit(do_not_specialize=["seqlen"])
def toy_fwd(Q, K, Out, stride_qs, stride_ks, stride_os, seqlen, scale,
            HEAD: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
            CAUSAL: tl.constexpr, HAS_SINK: tl.constexpr):
    pid = tl.program_id(0)
    offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q = tl.load(Q + offs_m[:, None] * stride_qs + offs_d[None, :], mask=offs_d[None, :] < HEAD, other=0.0)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, seqlen, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + offs_n[None, :] * stride_ks + offs_d[:, None], mask=offs_d[:, None] < HEAD, other=0.0)
        s = _scale(tl.dot(q, k), scale)
        if CAUSAL:
            s = tl.where(offs_m[:, None] >= offs_n[None, :], s, 0.0)
        acc += s
    if HAS_SINK:
        acc += 1.0
    tl.store(Out + offs_m[:, None] * stride_os + tl.arange(0, BLOCK_N)[None, :], acc.to(Out.dtype.element_ty))


@triton.jit(do_not_specialize=["seqlen"])
def toy_bwd(DOut, Delta, stride_ds, seqlen, HEAD: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    pid = tl.program_id(0)
    offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    do = tl.load(DOut + offs_m[:, None] * stride_ds + offs_d[None, :],
                 mask=(offs_m[:, None] < seqlen) & (offs_d[None, :] < HEAD), other=0.0)
    tl.store(Delta + offs_m, tl.sum(do.to(tl.float32), 1), mask=offs_m < seqlen)
