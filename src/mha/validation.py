"""Input checks run before any kernel launch; every message says what was expected and what came.

All errors derive from `AttentionInputError` so callers can catch one family (mha.errors holds
it, so that mha.config's errors for `config=` overrides, raised without torch, belong to it too).

Index math (see mha.kernels.common.slice_offset): each program computes the base of its
(batch, head) slice -- batch * stride_b + head * stride_h + sequence start * stride_s -- in int64,
so tensors may have any number of elements (a decode KV cache of 12.9e9 elements is fine). Offsets
inside one slice (row * stride_s + column, row < the (longest) sequence length) stay int32 because
they are per-element work in the inner loops; `check_slice_offsets` raises `IndexOverflowError`
when they would not fit. The dropout counter (row * seqlen_k + col, `check_rng_range`) is int32 too.
The checks use only sizes and strides, so they work on device="meta" tensors; `check_has_data`,
the last check before a launch, then refuses those (they have no data to compute on).
"""
from __future__ import annotations

import functools
import math
import numbers
import operator
import threading
import weakref
from typing import Any, Callable

import torch

from .errors import AttentionInputError as AttentionInputError

SUPPORTED_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
MIN_HEAD_DIM, MAX_HEAD_DIM = 8, 256
INT32_MAX = 2**31 - 1


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


class MetaTensorError(AttentionInputError):
    """A device="meta" tensor: sizes without data. Launching on one would make the interpreter
    allocate a host copy of its full size, and hand a GPU kernel no memory to read."""


class AttentionDTypeError(TypeError):
    """Wrong or mixed dtypes (a TypeError, as torch raises for dtype problems)."""


class ArgumentTypeError(AttentionInputError, TypeError):
    """A scalar argument of the wrong Python type (a str, a float where an int is meant): a
    TypeError, and one of the family, so `except AttentionInputError` still catches it. Refused,
    not coerced: a coerced window 1.9 or causal='no' would run a problem the caller did not ask for."""


INTERPRETER_BF16 = ("bf16 inputs cannot run under the Triton interpreter (TRITON_INTERPRET=1 or a CPU "
                    "device): its tl.dot on bf16 returns garbage (errors near 1e9, an upstream Triton "
                    "bug), so the result would be wrong without any error; use fp16 or fp32 on the "
                    "CPU, or run bf16 on a GPU")


def check_runnable_dtype(dtype: str, arch: str) -> None:
    """Refuse what the target would compute wrongly rather than return a silent wrong answer."""
    if dtype == "bf16" and arch == "interpreter":
        raise AttentionDTypeError(INTERPRETER_BF16)


def _dtype_of(t: torch.Tensor, name: str) -> str:
    if t.dtype not in SUPPORTED_DTYPES:
        raise AttentionDTypeError(
            f"{name}: expected dtype float16, bfloat16 or float32, got {t.dtype}"
        )
    return SUPPORTED_DTYPES[t.dtype]


def max_offset(t: torch.Tensor) -> int:
    """Largest element offset reachable in `t` (sum of (size-1)*stride), from metadata only."""
    return sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)


def slice_max_offset(t: torch.Tensor, seqlen: int) -> int:
    """Largest int32 in-slice offset the kernels form for `t`: (seqlen - 1) * stride_s + (D - 1).

    `t` is (batch, seqlen, heads, D) or packed (total, heads, D); `seqlen` is the rows one program
    walks from its slice base (the dense length, or the longest varlen sequence). The batch, head
    and sequence-start parts are int64 in the kernels and not limited here.
    """
    if seqlen <= 0 or t.numel() == 0:
        return 0
    return (seqlen - 1) * t.stride(-3) + (t.shape[-1] - 1) * t.stride(-1)


def check_slice_offsets(seqlens: dict[str, int], **tensors: torch.Tensor) -> None:
    """Raise IndexOverflowError when a (batch, head) slice of a tensor is too long for int32 offsets."""
    for name, t in tensors.items():
        seqlen = seqlens[name]
        off = slice_max_offset(t, seqlen)
        if off > INT32_MAX:
            raise IndexOverflowError(
                f"{name}: offset {off} inside one (batch, head) slice ({seqlen} rows x row stride "
                f"{t.stride(-3)}, shape {tuple(t.shape)}) exceeds {INT32_MAX}; the kernels index "
                "within a sequence in 32 bits (batch and head offsets are 64-bit): use a shorter "
                "sequence or a smaller row stride (e.g. a contiguous tensor)"
            )


def check_attention_offsets(q, k, v, seqlen_q: int, seqlen_k: int, out_meta: torch.Tensor) -> None:
    """In-slice int32 offsets of the inputs, the output (`out_meta`: its shape/strides as allocated)
    and the gradients (empty_like of q, k, v, whose layout can differ from a non-dense input's).
    lse/delta slices are one row of seqlen_q floats: in range whenever q's are. seqlen_* are the
    dense lengths or the longest varlen sequences."""
    check_slice_offsets(
        dict(q=seqlen_q, k=seqlen_k, v=seqlen_k, out=seqlen_q, dq=seqlen_q, dk=seqlen_k, dv=seqlen_k),
        q=q, k=k, v=v, out=out_meta, dq=torch.empty_like(q, device="meta"),
        dk=torch.empty_like(k, device="meta"), dv=torch.empty_like(v, device="meta"))


def check_has_data(**tensors: torch.Tensor | None) -> None:
    """Refuse meta tensors by name; called after every size check, right before a launch."""
    for name, t in tensors.items():
        if t is not None and t.is_meta:
            raise MetaTensorError(
                f"{name}: a meta tensor (device='meta') has no data to compute attention on; the "
                f"checks of sizes passed (shape {tuple(t.shape)}), but a launch needs a CPU or GPU tensor")


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


def _exact_int(value, what: str) -> int:
    """An int without coercion: ints and integer scalars (numpy, 0-d integer tensors) pass;
    floats, strings and bools are refused instead of truncated or reinterpreted."""
    if isinstance(value, bool):
        raise ArgumentTypeError(f"{what}: expected an int, got the bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ArgumentTypeError(f"{what}: expected an int, got {type(value).__name__} {value!r} "
                                "(not rounded: pass an int)") from None


def _real(value, what: str) -> float:
    """A real number without coercion from strings, bools or tensors of several elements."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{what}: expected a number (int or float), got {type(value).__name__} {value!r}")
    return float(value)


def check_window(window_size) -> tuple[int, int]:
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise WindowError(f"window_size: expected a pair (left, right) of ints, got {window_size!r}")
    left, right = _exact_int(left, "window_size left"), _exact_int(right, "window_size right")
    for name, x in (("left", left), ("right", right)):
        if x < -1:
            raise WindowError(f"window_size {name}: expected -1 (unbounded) or >= 0, got {x}")
    return left, right


def clamp_window(window: tuple[int, int], seqlen_q: int, seqlen_k: int) -> tuple[int, int]:
    """Each bounded side cut to the length past which it can exclude no key, so any int the
    caller passes reaches the kernels within int32 (their window math is row + diff +- side).

    Query i sees key j iff i + diff - left <= j <= i + diff + right (diff = Sk - Sq): a left side
    >= Sk - 1 or a right side >= Sq - 1 admits every key, so cutting left to Sk and right to Sq
    changes no answer. Unclamped, 2**63 - 1 wrapped in the kernels' int64 math (wrong output, no
    error) and 2**70 was more than Triton can pass. Varlen: the longest sequences bound every one.
    """
    left, right = window
    return (min(left, seqlen_k) if left >= 0 else left, min(right, seqlen_q) if right >= 0 else right)


def check_flag(value, name: str) -> bool:
    """A bool (or 0 / 1): a string such as 'no' is truthy and would turn the flag on."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise ArgumentTypeError(f"{name}: expected a bool, got {type(value).__name__} {value!r}")


def check_causal(causal) -> bool:
    return check_flag(causal, "causal")


def check_softmax_scale(softmax_scale) -> float | None:
    """None (1/sqrt(Dqk)) or a finite number: NaN or inf would make every output NaN."""
    if softmax_scale is None:
        return None
    scale = _real(softmax_scale, "softmax_scale")
    if not math.isfinite(scale):
        raise AttentionInputError(f"softmax_scale: expected a finite number, got {scale}")
    return scale


def check_sink(sink, hq: int, device, dtype: torch.dtype) -> torch.Tensor | None:
    """The sink logits as float32, shape (Hq,). float32 or the inputs' own dtype are accepted
    (bf16 checkpoints store sinks in bf16); the latter is upcast, a differentiable cast, so the
    sink's gradient arrives in its own dtype. Any other dtype is refused, not guessed. The values
    must be finite (_check_sink_values); reading them is a sync on a GPU, so it is done once per
    tensor state (see _validated_once)."""
    if sink is None:
        return None
    if not isinstance(sink, torch.Tensor):
        raise AttentionDTypeError(f"sink: expected a float32 tensor of shape ({hq},), got {type(sink).__name__}")
    if sink.dtype not in (torch.float32, dtype):
        raise AttentionDTypeError(
            f"sink: expected dtype float32 or the inputs' dtype {dtype}, got {sink.dtype}; pass "
            "sink.float() (the kernels read the sink logits in float32)")
    if tuple(sink.shape) != (hq,):
        raise ShapeError(f"sink: expected shape ({hq},) (one logit per query head), got {tuple(sink.shape)}")
    if sink.device != device:
        raise ShapeError(f"sink: expected device {device}, got {sink.device}")
    if not sink.is_meta:    # no values to check: check_has_data refuses it
        _validated_once("sink", sink, _check_sink_values)
    return sink if sink.dtype == torch.float32 else sink.float()


# The forward starts its float32 base-2 running max at sink * log2(e), which overflows past this.
MAX_SINK = 3.4028234663852886e38 / 1.4426950408889634


def _check_sink_values(host: list) -> None:
    """Finite logits within MAX_SINK. At +inf (or past MAX_SINK) the forward's first rescale is
    exp2(inf - inf): NaN output and lse, where the limit is output 0 and lse +inf (the reference's
    answer); matching it would cost a test in the kernels' inner loop for an input with no use.
    A NaN sink makes everything NaN, and -inf the sink's gradient on rows that see no key."""
    for head, x in enumerate(host):
        if not (math.isfinite(x) and abs(x) <= MAX_SINK):
            raise AttentionInputError(
                f"sink: expected finite logits of magnitude at most {MAX_SINK:.3g} (the kernels scale "
                f"them by log2(e) in float32; others make the output or the sink's gradient NaN), got {x:.6g} "
                f"at head {head}")


def check_dropout(dropout_p) -> float:
    p = _real(dropout_p, "dropout_p")
    if not 0.0 <= p < 1.0:
        raise DropoutError(f"dropout_p: expected 0 <= p < 1, got {dropout_p}")
    return p


# Value validation of cu_seqlens and of the sink needs the values on the host. On a GPU that is a
# device-to-host copy that synchronises the stream, which would stall every varlen or sink
# dispatch (docs/configs.md gives the measurement). Serving code builds one cu_seqlens per batch
# and passes it to every layer, and a sink is a parameter, so there the values are validated once
# per tensor *state* and the summary is cached:
# - keyed by id() plus a weakref that must still point at the very same object (ids are reused
#   after a tensor dies; the weakref's callback also drops the entry then);
# - and by tensor._version, data_ptr, numel and device: every in-place torch op on the tensor or a
#   view of it (cu.add_(0), cu[1] = 5, copy_, an optimizer step) bumps _version, so a modified
#   tensor is re-read.
# What the key cannot see: writes that bypass the version counter -- through `.data`, `.numpy()`,
# `torch.from_numpy` or DLPack aliases, raw pointers (custom kernels, CUDA-graph replays). The
# kernels keep a sequence of such a cu_seqlens inside the packed totals (docs/configs.md) but
# compute wrong numbers. Hence CPU tensors (the interpreter) are never cached: reading host
# memory costs no sync, and a fresh read sees every write. On a GPU such tensors are trusted as
# last validated. Inference-mode tensors have no version counter: validated on every call
# (correct, with the sync). Only what depends on the values alone is cached (for cu_seqlens: first
# entry, monotonicity, last entry, longest sequence); the checks against this call's totals and
# max_seqlen run every time, from the cache.
_VALUES_CACHE_LIMIT = 256
_CACHE_CPU_TENSORS = False  # the cache is for GPU tensors; its tests turn it on for the CPU
_values_cache: dict[int, tuple] = {}
_values_cache_lock = threading.Lock()
_host_values = torch.Tensor.tolist  # the device-to-host read; a module attribute so tests can count it


def _values_state(t: torch.Tensor):
    """The cache key of t's values, or None when they must be read on every call."""
    if t.is_cpu and not _CACHE_CPU_TENSORS:
        return None
    try:
        version = t._version
    except RuntimeError:  # inference tensors do not track versions: never cache them
        return None
    return (version, t.data_ptr(), t.numel(), str(t.device))


def _validated_once(kind: str, t: torch.Tensor, summarize: Callable[[list], Any]):
    """summarize(t's values on the host), which raises for bad values, once per tensor state on a
    GPU (above); `kind` names the check, so an entry serves only the check that made it."""
    state = _values_state(t)
    if state is not None:
        with _values_cache_lock:
            entry = _values_cache.get(id(t))
        if entry is not None and entry[0]() is t and entry[1] == state and entry[2] == kind:
            return entry[3]
    summary = summarize(_host_values(t))
    if state is not None:
        key = id(t)
        ref = weakref.ref(t, functools.partial(_forget, key))
        with _values_cache_lock:
            if len(_values_cache) >= _VALUES_CACHE_LIMIT and key not in _values_cache:
                _values_cache.pop(next(iter(_values_cache)))  # oldest first (dicts keep insertion order)
            _values_cache[key] = (ref, state, kind, summary)
    return summary


def _forget(key: int, ref) -> None:
    with _values_cache_lock:
        entry = _values_cache.get(key)
        if entry is not None and entry[0] is ref:
            del _values_cache[key]


def _cu_summary(name: str, cu: torch.Tensor) -> tuple[int, int]:
    """(last entry, longest sequence) of a well-formed cu_seqlens; validated once per tensor state."""
    def summarize(host: list) -> tuple[int, int]:
        if host[0] != 0:
            raise CuSeqlensError(f"{name}: expected first entry 0, got {host[0]}")
        steps = [b - a for a, b in zip(host, host[1:])]
        if any(s < 0 for s in steps):
            i = next(i for i, s in enumerate(steps) if s < 0)
            raise CuSeqlensError(
                f"{name}: expected non-decreasing values, got {host[i]} then {host[i + 1]} at index {i}")
        return host[-1], max(steps)
    return _validated_once("cu_seqlens", cu, summarize)


def check_cu_seqlens(cu_seqlens_q, cu_seqlens_k, total_q: int, total_k: int,
                     max_seqlen_q: int, max_seqlen_k: int, device) -> tuple[int, int]:
    """Dtype, rank, lengths, monotonicity and totals: together they bound every sequence's rows
    by the packed totals. Reads the (small) arrays to the host the first time a GPU tensor (state)
    is seen, then answers from a cache; CPU tensors are read every call (see _cu_summary).

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
        if cu.is_meta:
            raise MetaTensorError(f"{name}: a meta tensor (device='meta') has no values to validate or "
                                  "launch with; pass the int32 offsets on the inputs' CPU or GPU device")
        if cu.device != device:
            raise CuSeqlensError(f"{name}: expected device {device}, got {cu.device}")
        if cu.stride(0) != 1:
            raise CuSeqlensError(f"{name}: expected a contiguous tensor, got stride {cu.stride(0)}")
        max_len = _exact_int(max_len, name.replace("cu_seqlens", "max_seqlen"))
        last, longest = _cu_summary(name, cu)
        if last != total:
            raise CuSeqlensError(f"{name}: last entry {last} must equal the packed total {total}")
        if max_len < longest:
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
