"""The problems the memcheck job launches: one per point of the checksums variant matrix, sized
so that every tile loop ends in a partial tile (toolchain side: imports torch and mha).

Each point of mha_ci.checksums.variants.problem_matrix (dtype, head dims, features) runs forward
and backward at every geometry below. The lengths of the first two are multiples of no block
size (the kernels' tiles are 16 to 256 rows), Sq < Sk and Sq > Sk both occur (bottom-right
aligned masks leave whole query rows with no visible key when Sq > Sk under causal), and the
varlen batch holds an empty sequence, a one-row sequence and ragged lengths whose packed rows end
mid-tile. The third is of whole 128-row tiles with Sk > Sq: the only lengths the sm90 Gluon
forward takes (mha.config.gluon_lengths_ok), which would otherwise never launch here; it runs
with the Gluon forward's grid forced to 3 programs (mha.tile_schedule.PROGRAMS_ENV), so each walks
several of its 8 tiles, as a persistent grid does on large problems, and its rings and Q buffers
wrap under the checker. GQA (4 query heads on 2 KV heads) puts a group boundary inside every
launch.

Every tensor is its own allocation, and the child runs with the caching allocator off
(PYTORCH_NO_CUDA_MEMORY_CACHING=1), so the byte after a tensor is outside any allocation the
sanitizer knows and a read of it is reported, never absorbed by a neighbour.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from mha.tile_schedule import PROGRAMS_ENV   # pure Python: the orchestrating side imports it too

HEADS_Q, HEADS_K = 4, 2
DROPOUT_P = 0.17


@dataclass(frozen=True)
class Geometry:
    name: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    gluon_programs: int | None = None   # the Gluon forward's grid, where forced


DENSE = (Geometry("sq211-sk333", 2, 211, 333), Geometry("sq333-sk77", 1, 333, 77),
         Geometry("sq256-sk384", 1, 256, 384, gluon_programs=3))
# varlen: (q lengths, k lengths) per sequence: ragged, empty, one row, longer queries than keys
VARLEN_Q = (77, 0, 211, 1, 130)
VARLEN_K = (133, 0, 97, 5, 129)


def _own(torch, shape, dtype, device, requires_grad=False):
    t = torch.randn(shape, dtype=torch.float32, device=device).to(dtype)
    return t.requires_grad_(requires_grad)


def run_point(point: dict, device: str = "cuda") -> None:
    """Forward and backward of one matrix point at every geometry (raises on any error)."""
    import torch  # toolchain only: this module is imported by the orchestrating side's tests too

    import mha  # the code under test, inside the toolchain
    from mha.launch import TORCH_DTYPES  # the code under test, inside the toolchain

    dtype = TORCH_DTYPES[point["dtype"]]
    dqk, dv = point["dqk"], point["dv"]
    causal = bool(point.get("causal", False))
    window = tuple(point.get("window", (-1, -1)))
    dropout_p = DROPOUT_P if point.get("dropout") else 0.0
    sink = _own(torch, (HEADS_Q,), torch.float32, device, requires_grad=True) if point.get("has_sink") else None
    if point.get("varlen"):
        total_q, total_k = sum(VARLEN_Q), sum(VARLEN_K)
        q = _own(torch, (total_q, HEADS_Q, dqk), dtype, device, True)
        k = _own(torch, (total_k, HEADS_K, dqk), dtype, device, True)
        v = _own(torch, (total_k, HEADS_K, dv), dtype, device, True)
        cu_q = torch.tensor([0, *_cumsum(VARLEN_Q)], dtype=torch.int32, device=device)
        cu_k = torch.tensor([0, *_cumsum(VARLEN_K)], dtype=torch.int32, device=device)
        out = mha.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(VARLEN_Q), max(VARLEN_K), dropout_p=dropout_p,
                                         causal=causal, window_size=window, sink=sink)
        _backward(torch, out, q, k, v, sink)
        return
    for geo in DENSE:
        q = _own(torch, (geo.batch, geo.seqlen_q, HEADS_Q, dqk), dtype, device, True)
        k = _own(torch, (geo.batch, geo.seqlen_k, HEADS_K, dqk), dtype, device, True)
        v = _own(torch, (geo.batch, geo.seqlen_k, HEADS_K, dv), dtype, device, True)
        with _gluon_programs(geo.gluon_programs):
            out = mha.flash_attn_func(q, k, v, dropout_p=dropout_p, causal=causal, window_size=window, sink=sink)
        _backward(torch, out, q, k, v, sink)


@contextlib.contextmanager
def _gluon_programs(programs: int | None):
    """The Gluon forward's grid forced to `programs` inside (None: its own choice)."""
    before = os.environ.get(PROGRAMS_ENV)
    if programs is not None:
        os.environ[PROGRAMS_ENV] = str(programs)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PROGRAMS_ENV, None)
        else:
            os.environ[PROGRAMS_ENV] = before


def _backward(torch, out, q, k, v, sink) -> None:
    inputs = [t for t in (q, k, v, sink) if t is not None]
    dout = torch.randn(out.shape, dtype=torch.float32, device=out.device).to(out.dtype)
    torch.autograd.grad(out, inputs, dout)
    if out.is_cuda:
        torch.cuda.synchronize()


def _cumsum(lengths) -> list[int]:
    total, out = 0, []
    for n in lengths:
        total += n
        out.append(total)
    return out
