"""Input checks run before any kernel launch; every message says what was expected and what came.

All errors derive from `AttentionInputError` so callers can catch one family. Offsets are checked
against 32-bit index math (the kernels compute every in-tensor offset in int32): inputs whose
largest element offset does not fit raise `IndexOverflowError` instead of switching to int64.
The check uses only sizes and strides, so it works on device="meta" tensors.
"""
from __future__ import annotations

import torch

SUPPORTED_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
MIN_HEAD_DIM, MAX_HEAD_DIM = 8, 256
INT32_MAX = 2**31 - 1


class AttentionInputError(ValueError):
    """Base of every input error raised by mha before launching a kernel."""


class ShapeError(AttentionInputError):
    pass


class HeadDimError(AttentionInputError):
    pass


class LayoutError(AttentionInputError):
    pass


class CuSeqlensError(AttentionInputError):
    pass


class WindowError(AttentionInputError):
    pass


class IndexOverflowError(AttentionInputError):
    pass


class DropoutError(AttentionInputError):
    pass


class AttentionDTypeError(TypeError):
    """Wrong or mixed dtypes (a TypeError, as torch raises for dtype problems)."""


def _dtype_of(t: torch.Tensor, name: str) -> str:
    if t.dtype not in SUPPORTED_DTYPES:
        raise AttentionDTypeError(
            f"{name}: expected dtype float16, bfloat16 or float32, got {t.dtype}"
        )
    return SUPPORTED_DTYPES[t.dtype]


def max_offset(t: torch.Tensor) -> int:
    """Largest element offset reachable in `t` (sum of (size-1)*stride), from metadata only."""
    return sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)


def check_int32_offsets(**tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        if t.numel() and max_offset(t) > INT32_MAX:
            raise IndexOverflowError(
                f"{name}: largest element offset {max_offset(t)} (shape {tuple(t.shape)}, strides "
                f"{tuple(t.stride())}) exceeds {INT32_MAX}; the kernels use 32-bit offsets, "
                "split the batch"
            )


def check_qkv(q, k, v, *, varlen: bool) -> tuple[str, int, int]:
    """Ranks, matching sizes, head counts, dims, dtypes, last-dim stride. Returns (dtype, dqk, dv)."""
    rank = 3 if varlen else 4
    layout = "(total, heads, head_dim)" if varlen else "(batch, seqlen, heads, head_dim)"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise AttentionDTypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != rank:
            raise ShapeError(f"{name}: expected rank {rank} {layout}, got shape {tuple(t.shape)}")
    dtypes = {name: _dtype_of(t, name) for name, t in (("q", q), ("k", k), ("v", v))}
    if len(set(dtypes.values())) != 1:
        raise AttentionDTypeError(f"q, k, v must share one dtype, got {dtypes}")
    if not (q.device == k.device == v.device):
        raise ShapeError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if not varlen and not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ShapeError(
            f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]}"
        )
    if k.shape[:-1] != v.shape[:-1]:
        raise ShapeError(
            f"k and v must agree on all but the head dim, got k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    hq, hk = q.shape[-2], k.shape[-2]
    if hq == 0 or hk == 0 or hq % hk != 0:
        raise ShapeError(
            f"query heads must be a positive multiple of key/value heads, got Hq={hq}, Hk={hk}"
        )
    dqk, dv = q.shape[-1], v.shape[-1]
    if k.shape[-1] != dqk:
        raise ShapeError(f"q and k head dims differ: q {dqk}, k {k.shape[-1]}")
    for name, d in (("q/k", dqk), ("v", dv)):
        if not MIN_HEAD_DIM <= d <= MAX_HEAD_DIM:
            raise HeadDimError(
                f"{name} head dim must be in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}], got {d}"
            )
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1:
            raise LayoutError(
                f"{name}: last dim must be contiguous (stride 1), got strides {tuple(t.stride())}"
            )
    return dtypes["q"], dqk, dv


def check_window(window_size) -> tuple[int, int]:
    try:
        left, right = (int(x) for x in window_size)
    except (TypeError, ValueError):
        raise WindowError(f"window_size: expected a pair (left, right) of ints, got {window_size!r}")
    for name, x in (("left", left), ("right", right)):
        if x < -1:
            raise WindowError(f"window_size {name}: expected -1 (unbounded) or >= 0, got {x}")
    return left, right


def check_sink(sink, hq: int, device) -> None:
    if sink is None:
        return
    if not isinstance(sink, torch.Tensor):
        raise AttentionDTypeError(f"sink: expected a float32 tensor of shape ({hq},), got {type(sink).__name__}")
    if sink.dtype != torch.float32:
        raise AttentionDTypeError(f"sink: expected dtype float32, got {sink.dtype}")
    if tuple(sink.shape) != (hq,):
        raise ShapeError(f"sink: expected shape ({hq},) (one logit per query head), got {tuple(sink.shape)}")
    if sink.device != device:
        raise ShapeError(f"sink: expected device {device}, got {sink.device}")


def check_dropout(dropout_p) -> float:
    p = float(dropout_p)
    if not 0.0 <= p < 1.0:
        raise DropoutError(f"dropout_p: expected 0 <= p < 1, got {dropout_p}")
    return p


def check_cu_seqlens(cu_seqlens_q, cu_seqlens_k, total_q: int, total_k: int,
                     max_seqlen_q: int, max_seqlen_k: int, device) -> tuple[int, int]:
    """Dtype, rank, lengths, monotonicity and totals. Reads the (small) arrays to the host.

    Returns the true longest sequence lengths (the launch grid uses these, so a too-small
    max_seqlen cannot silently skip rows; a too-small one is reported).
    """
    lengths = []
    for name, cu, total, max_len in (("cu_seqlens_q", cu_seqlens_q, total_q, max_seqlen_q),
                                     ("cu_seqlens_k", cu_seqlens_k, total_k, max_seqlen_k)):
        if not isinstance(cu, torch.Tensor) or cu.dtype != torch.int32:
            got = cu.dtype if isinstance(cu, torch.Tensor) else type(cu).__name__
            raise CuSeqlensError(f"{name}: expected an int32 tensor, got {got}")
        if cu.dim() != 1 or cu.shape[0] < 2:
            raise CuSeqlensError(f"{name}: expected shape (batch + 1,) with batch >= 1, got {tuple(cu.shape)}")
        if cu.device != device:
            raise CuSeqlensError(f"{name}: expected device {device}, got {cu.device}")
        if cu.stride(0) != 1:
            raise CuSeqlensError(f"{name}: expected a contiguous tensor, got stride {cu.stride(0)}")
        host = cu.tolist()
        if host[0] != 0:
            raise CuSeqlensError(f"{name}: expected first entry 0, got {host[0]}")
        steps = [b - a for a, b in zip(host, host[1:])]
        if any(s < 0 for s in steps):
            i = next(i for i, s in enumerate(steps) if s < 0)
            raise CuSeqlensError(f"{name}: expected non-decreasing values, got {host[i]} then {host[i + 1]} at index {i}")
        if host[-1] != total:
            raise CuSeqlensError(f"{name}: last entry {host[-1]} must equal the packed total {total}")
        longest = max(steps)
        if int(max_len) < longest:
            raise CuSeqlensError(f"{name}: max_seqlen {max_len} is smaller than the longest sequence {longest}")
        lengths.append(longest)
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise CuSeqlensError(
            f"cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1), got "
            f"{cu_seqlens_q.shape[0]} and {cu_seqlens_k.shape[0]}"
        )
    return lengths[0], lengths[1]


def check_rng_range(seqlen_q: int, seqlen_k: int, offset: int) -> None:
    """Dropout counters are offset + row * seqlen_k + col in int32 per (batch, head)."""
    last = offset + seqlen_q * seqlen_k
    if last > INT32_MAX:
        raise IndexOverflowError(
            f"dropout: random counter range {last} (seqlen_q {seqlen_q} x seqlen_k {seqlen_k} + offset "
            f"{offset}) exceeds {INT32_MAX}"
        )
