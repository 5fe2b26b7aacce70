"""Kernel specifications and launches: the one place that turns a problem into kernel launches.

Contract with ahead-of-time compilation (the checksums job): `kernel_specs(problem, arch)` gives,
per kernel, the @triton.jit function, its signature (argument order as in the kernel, stable),
constexprs, num_warps and num_stages. The runtime launches below are built from the very same
specs, so an AOT compile of a spec and the JIT compile of a launch see the same kernel.

Runtime argument specializations (what Triton's JIT adds on top of the spec, to mirror in AOT):
- Pointer arguments: 16-byte aligned (torch allocations and views at offsets that are
  multiples of 16 bytes) -> `tt.divisibility = 16`. `aligned_specialization()` lists them.
- Integer arguments not named in the kernel's `do_not_specialize` (the strides only):
  divisible by 16 -> `tt.divisibility = 16`; equal to 1 -> specialized to the constant 1.
  For the canonical inputs (contiguous tensors, head dims that are multiples of 16) every
  stride is divisible by 16 except stride_lh (= seqlen_q, or total_q for varlen) and the
  varlen batch strides, which are 0 (divisible). `aligned_specialization()` says which.
- Sequence lengths, head counts, group size, window bounds and RNG arguments are in
  `do_not_specialize`: their values never change the generated code.
- Float arguments (qk_scale, sm_scale, dropout_p) are never specialized.

Index math: each program's (batch, head, sequence start) slice base is computed in int64 in the
kernels (mha.kernels.common.slice_offset), so tensors of any element count work; offsets inside
one slice (row * stride_s + col) are int32 and mha.validation raises IndexOverflowError before a
launch where they would not fit. The signatures below type strides as i32 (every canonical
input); a stride >= 2^31 at runtime makes Triton's JIT pass it as i64 (a separate compile).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping

import torch
import triton

from . import config as config_mod
from . import tile_schedule
from .kernels import backward as bwd_kernels
from .kernels.backward import attn_bwd_dkdv, attn_bwd_dkdv_dq, attn_bwd_dq, attn_bwd_preprocess
from .kernels.backward_ws import DO_NOT_SPECIALIZE as WS_DO_NOT_SPECIALIZE
from .kernels.backward_ws import attn_bwd_dkdv_ws, attn_bwd_dq_ws
from .kernels.forward import FWD_DO_NOT_SPECIALIZE, attn_fwd
from .kernels.forward_ws import LSE_COPIES, attn_fwd_ws

DO_NOT_SPECIALIZE = {"fwd": FWD_DO_NOT_SPECIALIZE, "bwd_preprocess": bwd_kernels.PREPROCESS_DO_NOT_SPECIALIZE,
                     "bwd_dkdv": bwd_kernels.DKDV_DO_NOT_SPECIALIZE, "bwd_dq": bwd_kernels.DQ_DO_NOT_SPECIALIZE,
                     "bwd_dkdv_dq": bwd_kernels.DKDV_DQ_DO_NOT_SPECIALIZE,
                     "bwd_dkdv_ws": WS_DO_NOT_SPECIALIZE, "bwd_dq_ws": WS_DO_NOT_SPECIALIZE}

LOG2E = 1.4426950408889634
TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}


@dataclass(frozen=True)
class Problem:
    """Everything that changes generated code (window *values* and lengths do not; whether each
    window side is bounded does)."""
    dtype: str  # "fp16" | "bf16" | "fp32"
    dqk: int
    dv: int
    causal: bool = False
    window: tuple[int, int] = (-1, -1)
    has_sink: bool = False
    dropout: bool = False
    varlen: bool = False

    @property
    def bound_left(self) -> bool:
        return self.window[0] >= 0

    @property
    def bound_right(self) -> bool:
        # flash-attn semantics: causal is a window whose right side is 0.
        return self.causal or self.window[1] >= 0


@dataclass(frozen=True)
class KernelSpec:
    name: str
    fn: triton.JITFunction
    signature: dict = field(hash=False)
    constexprs: dict = field(hash=False)
    num_warps: int
    num_stages: int
    bucket: str
    pass_: str
    # Further launch options (the Gluon forward's maxnreg); the checksums' compile passes them too.
    options: dict = field(default_factory=dict, hash=False)


def _block_dim(d: int) -> int:
    # tl.dot needs at least 16 along K; the padding is masked, inputs are never copied.
    return max(16, triton.next_power_of_2(d))


# Head dims up to this stay one padded block: split below it (d48 as 32 + 16), the forward needs
# more registers a thread for a saving never measured on a GPU; above it the padding wastes the most
# (192 -> 256). docs/configs.md, "Tile order and the split head dim", has the measurements.
HEAD_SPLIT_ABOVE = 128


def head_split(d: int) -> tuple[int, int]:
    """(BLOCK_DQK, BLOCK_DQK2): the q/k head dim as one power-of-two block, or, above
    HEAD_SPLIT_ABOVE, as two when that pads less: 192 = 128 + 64 instead of 256 (a quarter of the
    QK^T work on zeros), 160 = 128 + 32. The kernels then issue two dots into one accumulator;
    0 means one block."""
    whole = _block_dim(d)
    if whole == d or d <= HEAD_SPLIT_ABOVE:
        return whole, 0
    first = whole // 2
    second = _block_dim(d - first)
    return (first, second) if first + second < whole else (whole, 0)


def _strides(*names: str) -> list[tuple[str, str]]:
    return [(n, "i32") for n in names]


def _fwd_signature(ptr: str) -> dict:
    args = [("Q", ptr), ("K", ptr), ("V", ptr), ("Sink", "*fp32"), ("Out", ptr), ("Lse", "*fp32"),
            ("CuSeqlensQ", "*i32"), ("CuSeqlensK", "*i32")]
    args += _strides("stride_qb", "stride_qs", "stride_qh", "stride_kb", "stride_ks", "stride_kh",
                     "stride_vb", "stride_vs", "stride_vh", "stride_ob", "stride_os", "stride_oh",
                     "stride_lb", "stride_lh",
                     "seqlen_q", "seqlen_k", "num_heads_q", "group_size", "window_left", "window_right")
    args += [("qk_scale", "fp32"), ("dropout_p", "fp32"), ("rng_seed", "i32"), ("rng_offset", "i32"),
             ("rng_stride", "i32"), ("tile_chunk", "i32")]
    return dict(args)


def _preprocess_signature(ptr: str) -> dict:
    args = [("Out", ptr), ("DOut", ptr), ("Delta", "*fp32"), ("CuSeqlensQ", "*i32")]
    args += _strides("stride_ob", "stride_os", "stride_oh", "stride_dob", "stride_dos", "stride_doh",
                     "stride_lb", "stride_lh", "seqlen_q", "num_heads_q")
    return dict(args)


def _bwd_signature(ptr: str, kind: str) -> dict:
    if kind in ("dkdv", "dkdv_dq"):
        args = [("Q", ptr), ("K", ptr), ("V", ptr), ("DOut", ptr), ("Lse", "*fp32"), ("Delta", "*fp32"),
                ("DK", ptr), ("DV", ptr)]
        grads: tuple[str, ...] = ("stride_dkb", "stride_dks", "stride_dkh", "stride_dvb", "stride_dvs", "stride_dvh")
        if kind == "dkdv_dq":
            args.append(("DQAcc", "*fp32"))
            grads += ("stride_ab", "stride_as", "stride_ah")
        heads = "num_heads_k"
    else:
        args = [("Q", ptr), ("K", ptr), ("V", ptr), ("DOut", ptr), ("Lse", "*fp32"), ("Delta", "*fp32"),
                ("DQ", ptr)]
        grads = ("stride_dqb", "stride_dqs", "stride_dqh")
        heads = "num_heads_q"
    args += [("CuSeqlensQ", "*i32"), ("CuSeqlensK", "*i32")]
    args += _strides("stride_qb", "stride_qs", "stride_qh", "stride_kb", "stride_ks", "stride_kh",
                     "stride_vb", "stride_vs", "stride_vh", "stride_dob", "stride_dos", "stride_doh",
                     *grads, "stride_lb", "stride_lh",
                     "seqlen_q", "seqlen_k", heads, "group_size", "window_left", "window_right")
    args += [("qk_scale", "fp32"), ("sm_scale", "fp32"), ("dropout_p", "fp32"), ("rng_seed", "i32"),
             ("rng_offset", "i32"), ("rng_stride", "i32"), ("tile_chunk", "i32")]
    return dict(args)


def _ordered(fn, signature: dict, constexprs: dict) -> dict:
    """Signature in the kernel's own argument order, constexprs marked "constexpr"."""
    names = list(fn.arg_names)
    assert set(names) == set(signature) | set(constexprs), (fn.__name__, set(names) ^ (set(signature) | set(constexprs)))
    return {n: "constexpr" if n in constexprs else signature[n] for n in names}


def gluon_serves(problem: Problem, arch: str, pass_: str) -> bool:
    """Whether the Gluon kernels of `pass_` can compute `problem` (for inputs that pass
    gluon_inputs_ok, or gluon_backward_inputs_ok): mha.config.gluon_serves."""
    return config_mod.gluon_serves(pass_, arch, problem.dtype, problem.dqk, problem.dv, problem.window,
                                   problem.has_sink, problem.dropout, problem.varlen)


def gluon_inputs_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> bool:
    """What the Gluon forward needs of the tensors themselves (mha.kernels.forward_gluon): on the
    GPU, contiguous, TMA-readable, lengths it takes (mha.config.gluon_lengths_ok), and a grid
    within CUDA's limits."""
    return q.is_cuda and _tile_inputs_ok(q, k, v, causal)


def gluon_scale_ok(spec: KernelSpec, softmax_scale: float) -> bool:
    """Whether the Gluon forward `spec` takes this softmax_scale. With FOLD_SCALE it takes each
    row's max on the unscaled scores (mha.kernels.forward_gluon), the scaled row's max only for a
    positive scale; softmax_scale may be any finite number, and the Triton forward takes the rest."""
    return softmax_scale > 0 or not spec.constexprs["FOLD_SCALE"]


def _tile_inputs_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> bool:
    """Contiguous, TMA-readable, lengths the 128-row tile kernels take, and the query tiles' grid
    within CUDA's limits."""
    (batch, seqlen_q, heads_q, _), seqlen_k = q.shape, k.shape[1]
    return (all(t.is_contiguous() for t in (q, k, v)) and tma_ready(q, k, v)
            and config_mod.gluon_lengths_ok(seqlen_q, seqlen_k, causal)
            and tile_grid(batch, heads_q, seqlen_q, causal)[1] <= MAX_GRID_YZ)


def gluon_backward_inputs_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> bool:
    """What the Gluon backward needs of q, k and v (mha.kernels.backward_gluon, backward_gluon_pe):
    the forward's conditions (which hold the dQ kernel's grid, the forward's), and the dK/dV
    kernel's grid within CUDA's limits. dO must be contiguous and TMA-readable too (`backward` sees to it)."""
    return q.is_cuda and ws_backward_inputs_ok(q, k, v, causal)


def ws_backward_inputs_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> bool:
    """What the warp-specialized backward needs of q, k and v (mha.kernels.backward_ws), and the
    Gluon one on the GPU: contiguous, TMA-readable, lengths they take (mha.config.gluon_lengths_ok),
    and both kernels' grids within CUDA's limits. dO must be contiguous and TMA-readable too
    (`backward` sees to it). The interpreter runs the warp-specialized kernels on the CPU."""
    batch, seqlen_k, heads_k, _ = k.shape
    return _tile_inputs_ok(q, k, v, causal) and tile_grid(batch, heads_k, seqlen_k, causal)[1] <= MAX_GRID_YZ


def tile_grid(batch: int, heads: int, seqlen: int, causal: bool) -> tuple[int, int]:
    """The grid of the 128-row tiles of `seqlen` in each (batch, head) slice, for the backward
    kernels of fixed 128-row tiles (Gluon, warp-specialized): (slices, tiles) for causal, so that
    each slice's longest tiles start in the first waves, else (tiles, slices). Query tiles of the
    query heads (dQ), key tiles of the KV heads (dK/dV). The Gluon forward takes a 1-D grid
    (forward_gluon.programs); the input checks still bound its tiles by this grid's limits."""
    tiles = seqlen // config_mod.GLUON_TILE_ROWS
    return (batch * heads, tiles) if causal else (tiles, batch * heads)


# The Gluon forward's two forms (kernel_specs' names): programs walking tiles, and one program per
# tile (gluon_forward_form picks by the grid).
GLUON_FORWARDS = ("fwd_gluon", "fwd_gluon_tile")


# The Gluon specs are built from their values alone, so they are cached by those values: naming
# the descriptor types is the costly part of a spec, and every forward call asks for its specs.
@functools.lru_cache(maxsize=256)
def _gluon_forward_specs(dtype: str, dqk: int, dv: int, causal: bool, bucket: str, block_n: int, num_warps: int,
                         stages: int) -> tuple[tuple[str, KernelSpec], ...]:
    """The Gluon forward's two forms: "fwd_gluon", whose programs walk tiles, and "fwd_gluon_tile"
    for a grid of one program per tile (`forward_gluon` picks by the grid)."""
    from .kernels import forward_gluon  # Triton with Gluon only: a config selected it for this toolchain
    signature = forward_gluon.signature_types(dtype, dqk, dv, block_n) | {
        "Lse": "*fp32", "qk_scale": "fp32", "seqlen_q": "i32", "seqlen_k": "i32", "num_heads_q": "i32", "group": "i32",
        "batch": "i32"}
    fn = forward_gluon.attn_fwd_gluon
    specs = []
    for name, one_tile in zip(GLUON_FORWARDS, (False, True)):
        constexprs = forward_gluon.constexprs(dqk, dv, block_n, stages, causal, one_tile)
        specs.append((name, KernelSpec(name, fn, _ordered(fn, signature, constexprs), constexprs, num_warps, stages,
                                       bucket, "forward", {"maxnreg": forward_gluon.MAXNREG})))
    return tuple(specs)


@functools.lru_cache(maxsize=256)
def _gluon_backward_spec_pair(dtype: str, d: int, causal: bool, bucket: str, block_m1: int, block_n2: int,
                              num_warps: int, stages: int) -> tuple[tuple[str, KernelSpec], ...]:
    from .kernels import backward_gluon as kernels  # Triton with Gluon only, as _gluon_forward_specs
    from .kernels.forward_gluon import MAXNREG
    scalars = {"qk_scale": "fp32", "sm_scale": "fp32", "seqlen_q": "i32", "seqlen_k": "i32", "group": "i32"}
    parts = (("bwd_dkdv_gluon", kernels.attn_bwd_dkdv_gluon, kernels.dkdv_constexprs(d, block_m1, stages, causal),
              kernels.dkdv_signature_types(dtype, d, block_m1) | {"num_heads_k": "i32"}),
             ("bwd_dq_gluon", kernels.attn_bwd_dq_gluon, kernels.dq_constexprs(d, block_n2, stages, causal),
              kernels.dq_signature_types(dtype, d, block_n2) | {"Lse": "*fp32", "Delta": "*fp32", "num_heads_q": "i32"}))
    return tuple((name, KernelSpec(name, fn, _ordered(fn, signature | scalars, constexprs), constexprs, num_warps,
                                   stages, bucket, "backward", {"maxnreg": MAXNREG}))
                 for name, fn, constexprs, signature in parts)


@functools.lru_cache(maxsize=256)
def _gluon_pe_dkdv_spec(dtype: str, causal: bool, bucket: str, block_m1: int, num_warps: int,
                        stages: int) -> KernelSpec:
    """The `pe` bucket's Gluon backward: the dK/dV kernel alone (dQ is the Triton kernel's)."""
    from .kernels import backward_gluon_pe as kernels  # Triton with Gluon only, as _gluon_forward_specs
    from .kernels.forward_gluon import MAXNREG
    constexprs = kernels.dkdv_constexprs(block_m1, stages, causal)
    signature = kernels.dkdv_signature_types(dtype, block_m1) | {
        "qk_scale": "fp32", "sm_scale": "fp32", "seqlen_q": "i32", "seqlen_k": "i32", "num_heads_k": "i32",
        "group": "i32"}
    fn = kernels.attn_bwd_dkdv_gluon_pe
    return KernelSpec("bwd_dkdv_gluon", fn, _ordered(fn, signature, constexprs), constexprs, num_warps, stages,
                      bucket, "backward", {"maxnreg": MAXNREG})


@functools.lru_cache(maxsize=256)
def _ws_backward_specs(dtype: str, d: int, causal: bool, bucket: str, block_m1: int, block_n2: int,
                       num_warps: int, stages: int) -> tuple[tuple[str, KernelSpec], ...]:
    """The warp-specialized backward's specs: dK/dV and dQ."""
    ptr = "*" + dtype
    scalars = {"batch": "i32", "seqlen_q": "i32", "seqlen_k": "i32", "num_heads": "i32", "group": "i32",
               "qk_scale": "fp32", "sm_scale": "fp32"}
    inputs = {"Q": ptr, "K": ptr, "V": ptr, "DOut": ptr, "Lse": "*fp32", "Delta": "*fp32"}
    parts = (("bwd_dkdv_ws", attn_bwd_dkdv_ws, inputs | {"DK": ptr, "DV": ptr},
              dict(HEAD=d, BLOCK_M=block_m1, CAUSAL=causal)),
             ("bwd_dq_ws", attn_bwd_dq_ws, inputs | {"DQ": ptr}, dict(HEAD=d, BLOCK_N=block_n2, CAUSAL=causal)))
    return tuple((name, KernelSpec(name, fn, _ordered(fn, signature | scalars, constexprs), constexprs, num_warps,
                                   stages, bucket, "backward"))
                 for name, fn, signature, constexprs in parts)


def kernel_specs(problem: Problem, arch: str, config: dict | None = None) -> dict[str, KernelSpec]:
    """Specs of the kernels of `problem` on `arch`: "fwd", "bwd_preprocess", "bwd_dkdv", "bwd_dq", and
    "bwd_dkdv_dq" where the backward config asks for a single pass (`single_pass`; used only when
    the caller allows nondeterminism, see `backward`); "fwd_gluon" and "fwd_gluon_tile" where the
    forward config selects the Gluon forward for this problem and toolchain ("fwd" then runs the
    inputs it cannot take, see `forward`), and "bwd_dkdv_gluon" and "bwd_dq_gluon" where the
    backward config selects the Gluon backward (likewise, see `backward`; for the `pe` bucket's
    Dqk 192 / Dv 128 that is "bwd_dkdv_gluon" alone, beside the Triton "bwd_dq"), or "bwd_dkdv_ws"
    and "bwd_dq_ws" where it selects the warp-specialized one."""
    ptr = "*" + problem.dtype
    drop_p = 0.5 if problem.dropout else 0.0  # only its being > 0 matters to the bucket rule
    common = dict(
        HEAD_DQK=problem.dqk, HEAD_DV=problem.dv, BLOCK_DV=_block_dim(problem.dv),
        IS_VARLEN=problem.varlen, BOUND_LEFT=problem.bound_left, BOUND_RIGHT=problem.bound_right,
    )
    fwd_split = head_split(problem.dqk)
    # The backward splits only beside a V tile of at most 128: beside a 256-wide V tile the dK/dV
    # kernel is already at the register limit, and a second dK accumulator spills (docs/configs.md).
    bwd_split = fwd_split if _block_dim(problem.dv) <= 128 else (_block_dim(problem.dqk), 0)
    # fp32 inputs use full-precision dots (Hopper would otherwise round operands to tf32). For
    # fp16/bf16 operands the setting means nothing, but it is still checked against the target:
    # gfx950 accepts only "ieee" (and bf16x3/x6 on 3.8), so "tf32" there failed to compile.
    precision = "ieee"
    specs = {}
    bucket, cfg = config_mod.resolve("forward", arch, problem.dqk, problem.dv, problem.dtype, drop_p, config,
                                     banded=problem.bound_left or problem.bound_right)
    constexprs = dict(common, BLOCK_DQK=fwd_split[0], BLOCK_DQK2=fwd_split[1],
                      BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], HAS_SINK=problem.has_sink,
                      HAS_DROPOUT=problem.dropout, DOT_PRECISION=precision)
    fwd = attn_fwd
    if cfg.get("warp_specialize"):
        fwd = attn_fwd_ws
        constexprs["WARP_SPECIALIZE"] = True
    specs["fwd"] = KernelSpec("fwd", fwd, _ordered(fwd, _fwd_signature(ptr), constexprs), constexprs,
                              cfg["num_warps"], cfg["num_stages"], bucket, "forward")
    if gluon_serves(problem, arch, "forward"):
        bucket, cfg = config_mod.resolve("forward", arch, problem.dqk, problem.dv, problem.dtype, drop_p, config,
                                         banded=problem.bound_left or problem.bound_right, serves_gluon=True)
        if cfg.get(config_mod.GLUON):
            specs.update(_gluon_forward_specs(problem.dtype, problem.dqk, problem.dv, problem.bound_right, bucket,
                                              cfg["BLOCK_N"], cfg["num_warps"], cfg["num_stages"]))

    if gluon_serves(problem, arch, "backward"):
        bucket, cfg = config_mod.resolve("backward", arch, problem.dqk, problem.dv, problem.dtype, drop_p, config,
                                         serves_gluon=True)
        if cfg.get(config_mod.GLUON) and (problem.dqk, problem.dv) == config_mod.GLUON_PE_DIMS:
            specs["bwd_dkdv_gluon"] = _gluon_pe_dkdv_spec(problem.dtype, problem.bound_right, bucket,
                                                          cfg["BLOCK_M1"], cfg["num_warps"], cfg["num_stages"])
        elif cfg.get(config_mod.GLUON):
            specs.update(_gluon_backward_spec_pair(problem.dtype, problem.dqk, problem.bound_right, bucket,
                                                   cfg["BLOCK_M1"], cfg["BLOCK_N2"], cfg["num_warps"],
                                                   cfg["num_stages"]))
        elif cfg.get(config_mod.WS):
            specs.update(_ws_backward_specs(problem.dtype, problem.dqk, problem.bound_right, bucket, cfg["BLOCK_M1"],
                                            cfg["BLOCK_N2"], cfg["num_warps"], cfg["num_stages"]))
    bucket, cfg = config_mod.resolve("backward", arch, problem.dqk, problem.dv, problem.dtype, drop_p, config)
    pre = dict(HEAD_DV=problem.dv, BLOCK_DV=_block_dim(problem.dv), BLOCK_M=cfg["BLOCK_M2"],
               IS_VARLEN=problem.varlen)
    # The preprocess kernel has no loop to pipeline: one stage.
    specs["bwd_preprocess"] = KernelSpec("bwd_preprocess", attn_bwd_preprocess,
                                         _ordered(attn_bwd_preprocess, _preprocess_signature(ptr), pre), pre,
                                         cfg["num_warps"], 1, bucket, "backward")
    kernels = [("bwd_dkdv", attn_bwd_dkdv, "BLOCK_M1", "BLOCK_N1", "dkdv"),
               ("bwd_dq", attn_bwd_dq, "BLOCK_M2", "BLOCK_N2", "dq")]
    if cfg.get("single_pass"):
        kernels.append(("bwd_dkdv_dq", attn_bwd_dkdv_dq, "BLOCK_M1", "BLOCK_N1", "dkdv_dq"))
    for name, fn, bm, bn, kind in kernels:
        constexprs = dict(common, BLOCK_DQK=bwd_split[0], BLOCK_DQK2=bwd_split[1],
                          BLOCK_M=cfg[bm], BLOCK_N=cfg[bn], HAS_DROPOUT=problem.dropout,
                          DOT_PRECISION=precision)
        specs[name] = KernelSpec(name, fn, _ordered(fn, _bwd_signature(ptr, kind), constexprs), constexprs,
                                 cfg["num_warps"], cfg["num_stages"], bucket, "backward")
    return specs


def call_specs(problem: Problem, arch: str, config: dict | None = None) -> Mapping[str, KernelSpec]:
    """kernel_specs for a call, read-only. Without an override they are built once per problem,
    arch and Triton version: the configs are read once per process (config.load_arch_configs), so
    they cannot change, and building them (config resolution, guards, signatures) costs every call
    as much host time as a small problem's kernel (docs/records/2026-12-07-host-overhead)."""
    if config is not None:
        return MappingProxyType(kernel_specs(problem, arch, config))
    return _default_call_specs(problem, arch, config_mod.triton_version())


@functools.lru_cache(maxsize=1024)
def _default_call_specs(problem: Problem, arch: str, _triton: str | None) -> Mapping[str, KernelSpec]:
    return MappingProxyType(kernel_specs(problem, arch))


def aligned_specialization(spec: KernelSpec) -> dict[str, str]:
    """Runtime specialization of each non-constexpr argument for canonical aligned inputs.

    "aligned16" for pointers and strides (tt.divisibility=16), "none" for arguments the JIT does
    not specialize (do_not_specialize, floats) and for stride_lh (seqlen-valued, any value).
    """
    dont = (set(DO_NOT_SPECIALIZE[spec.name]) if spec.name in DO_NOT_SPECIALIZE
            else {p.name for p in spec.fn.params if p.do_not_specialize})
    out = {}
    for name, ty in spec.signature.items():
        if ty == "constexpr":
            continue
        if ty.startswith("*"):
            out[name] = "aligned16"
        elif ty.startswith("tensordesc"):
            out[name] = "none"
        elif ty == "fp32" or name in dont or name == "stride_lh":
            out[name] = "none"
        else:
            out[name] = "aligned16"
    return out


# Called as observer(spec, compiled_kernel) after every launch while registered: a harness learns
# which code objects a call ran (a perf measurement records their hashes per shape) without
# reaching into the launch path. Empty in normal use: one falsy check a launch.
LAUNCH_OBSERVERS: list[Callable[[KernelSpec, object], None]] = []


def _launch(spec: KernelSpec, grid: tuple, args: list) -> None:
    if any(g == 0 for g in grid):
        return
    params = [n for n, t in spec.signature.items() if t != "constexpr"]
    assert len(params) == len(args), (spec.name, len(params), len(args))
    # By name: a constexpr may sit between arguments (forward_gluon's q2_desc/k2_desc are None).
    kernel = spec.fn[grid](**dict(zip(params, args)), **spec.constexprs, num_warps=spec.num_warps,
                           num_stages=spec.num_stages, **spec.options)
    if LAUNCH_OBSERVERS:
        for observe in LAUNCH_OBSERVERS:
            observe(spec, kernel)


@dataclass
class Geometry:
    """Batch/length/head numbers and the strides the kernels need (batch stride 0 for varlen)."""
    batch: int
    seqlen_q: int  # dense length, or the longest sequence for varlen (sizes the grid)
    seqlen_k: int
    heads_q: int
    heads_k: int
    varlen: bool
    rows_q: int  # rows of the q/k tensors (batch * length dense, the packed totals varlen)
    rows_k: int

    def kernel_seqlens(self) -> tuple[int, int]:
        """The kernels' seqlen_q/seqlen_k arguments: dense, the lengths; varlen, the packed row
        counts (common.sequence_bounds empties a sequence that does not lie within them)."""
        if self.varlen:
            return self.rows_q, self.rows_k
        return self.seqlen_q, self.seqlen_k

    def bsh(self, t: torch.Tensor) -> tuple[int, int, int]:
        if self.varlen:
            return 0, t.stride(0), t.stride(1)
        return t.stride(0), t.stride(1), t.stride(2)

    def lse_strides(self, lse: torch.Tensor) -> tuple[int, int]:
        if self.varlen:
            return 0, lse.stride(0)
        return lse.stride(0), lse.stride(1)


# Tiles per chunk of the tile order (mha.kernels.common.tile_order): enough for several waves
# of the GPU's SMs (132 on an H200), so causal tiles still start heaviest first within a chunk,
# and few enough heads that their K/V (Q/dO for key tiles) stay in L2 while the chunk runs. Both
# extremes, one head at a time and all heads at once, time slower (docs/configs.md).
TILE_CHUNK_TILES = 512


MAX_GRID_YZ = 65535   # CUDA's limit on a grid's y and z sizes


def tile_chunk(kv_slices: int, tiles_per_kv_slice: int, tiles: int | None = None) -> int:
    """KV slices (batch x KV head) per chunk of the tile order: the smallest divisor of kv_slices
    whose chunk holds at least `tiles` (default TILE_CHUNK_TILES) tiles, all of them if none does,
    and that leaves at most MAX_GRID_YZ chunks. A chunk of whole KV slices never splits a GQA
    group; query-tile kernels take chunk * group query slices."""
    tiles = TILE_CHUNK_TILES if tiles is None else tiles
    if kv_slices <= 0:
        return 1
    if tiles_per_kv_slice <= 0:     # nothing to launch: one chunk
        return kv_slices
    at_least = max(1, -(-tiles // tiles_per_kv_slice), -(-kv_slices // MAX_GRID_YZ))
    return _smallest_divisor_at_least(kv_slices, min(at_least, kv_slices))


@functools.lru_cache(maxsize=4096)
def _smallest_divisor_at_least(n: int, at_least: int) -> int:
    """Every launch asks this (decode calls many times a second): O(sqrt n) once, then cached."""
    best = n
    d = 1
    while d * d <= n:
        if n % d == 0:
            for divisor in (d, n // d):
                if at_least <= divisor < best:
                    best = divisor
        d += 1
    return best


def _launch_tiles(spec: KernelSpec, kv_slices: int, group: int, seqlen: int, block: int, args: list) -> None:
    """Launch a kernel with one tile per (slice, `block` rows of `seqlen`) in the grid that
    mha.kernels.common.tile_order reads: (chunk, blocks, slices / chunk); the kernel's last
    argument, tile_chunk, is appended. `group` is the slices per KV slice (1 for key tiles)."""
    blocks = triton.cdiv(seqlen, block)
    kv_chunk = tile_chunk(kv_slices, group * blocks)
    chunk = kv_chunk * group
    grid = (chunk, blocks, kv_slices // kv_chunk)
    # tile_chunk keeps the chunk count (z) within the limit; only the block count (y) can pass it.
    if blocks > MAX_GRID_YZ:
        raise ValueError(f"{spec.name}: grid {grid} passes the {MAX_GRID_YZ} limit of its second and third axes "
                         f"({seqlen} rows in blocks of {block})")
    _launch(spec, grid, [*args, chunk])


def tma_ready(*tensors: torch.Tensor) -> bool:
    """Whether a device-side tensor descriptor (forward_ws) can read each (rows, head dim) slice:
    a 16-byte aligned start, unit stride along the head dim, 16-byte multiples for the others."""
    return all(t.stride(-1) == 1 and t.data_ptr() % 16 == 0
               and all(st * t.element_size() % 16 == 0 for st in t.stride()[:-1]) for t in tensors)


def without_warp_specialization(spec: KernelSpec) -> KernelSpec:
    """The plain forward with the same tiles, warps and stages: what runs for inputs the
    warp-specialized one cannot read through TMA (a config is chosen per problem, before the
    tensors' layout is known)."""
    constexprs = {k: v for k, v in spec.constexprs.items() if k != "WARP_SPECIALIZE"}
    signature = {n: t for n, t in spec.signature.items() if n != "WARP_SPECIALIZE"}
    return KernelSpec(spec.name, attn_fwd, _ordered(attn_fwd, signature, constexprs), constexprs,
                      spec.num_warps, spec.num_stages, spec.bucket, spec.pass_)


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    # Device-side descriptors are written to global memory at launch; Triton asks for the room.
    # Zeroed: on torch.empty memory the memcheck job's initcheck reported reads at descriptor
    # creation (docs/records/2026-12-02-h200-memcheck); a defined start costs one small memset.
    return torch.zeros(size, dtype=torch.int8, device="cuda")


def forward(spec: KernelSpec, geo: Geometry, q, k, v, sink, cu_q, cu_k, softmax_scale: float,
            window: tuple[int, int], dropout_p: float, rng: tuple[int, int],
            gluon: tuple[KernelSpec, KernelSpec] | None = None):
    """(out, lse). `gluon`: kernel_specs' ("fwd_gluon", "fwd_gluon_tile"), run instead of `spec`
    where the inputs allow it (gluon_inputs_ok, gluon_scale_ok); `spec` runs the others."""
    if (gluon is not None and gluon_inputs_ok(q, k, v, gluon[0].constexprs["CAUSAL"])
            and gluon_scale_ok(gluon[0], softmax_scale)):
        return forward_gluon(gluon, geo, q, k, v, softmax_scale)
    if geo.varlen:
        out = torch.empty((q.shape[0], geo.heads_q, v.shape[-1]), dtype=q.dtype, device=q.device)
        lse = torch.empty((geo.heads_q, q.shape[0]), dtype=torch.float32, device=q.device)
    else:
        out = torch.empty((geo.batch, geo.seqlen_q, geo.heads_q, v.shape[-1]), dtype=q.dtype, device=q.device)
        lse = torch.empty((geo.batch, geo.heads_q, geo.seqlen_q), dtype=torch.float32, device=q.device)
    # out and lse_out are made here, contiguous, with V's head dim: TMA can write them when it
    # can read V.
    if spec.fn is attn_fwd_ws and not tma_ready(q, k, v):
        spec = without_warp_specialization(spec)
    if spec.fn is attn_fwd_ws:
        if q.is_cuda:
            # Per call, not once: Triton 3.8 keeps the allocator in a context variable (per thread).
            triton.set_allocator(_scratch)
    dummy_i32 = cu_q if cu_q is not None else torch.empty(1, dtype=torch.int32, device=q.device)
    # attn_fwd_ws writes lse through a descriptor, LSE_COPIES floats a row (forward_ws says why).
    lse_out = torch.empty((*lse.shape, LSE_COPIES.value), dtype=lse.dtype, device=lse.device) \
        if spec.fn is attn_fwd_ws else lse
    args = [q, k, v, sink if sink is not None else lse, out, lse_out,
            dummy_i32, cu_k if cu_k is not None else dummy_i32,
            *geo.bsh(q), *geo.bsh(k), *geo.bsh(v), *geo.bsh(out), *geo.lse_strides(lse_out),
            *geo.kernel_seqlens(), geo.heads_q, geo.heads_q // geo.heads_k, window[0], window[1],
            softmax_scale * LOG2E, dropout_p, rng[0], rng[1], geo.seqlen_k]
    _launch_tiles(spec, geo.batch * geo.heads_k, geo.heads_q // geo.heads_k, geo.seqlen_q,
                  spec.constexprs["BLOCK_M"], args)
    if lse_out is not lse:
        lse.copy_(lse_out[..., 0])
    return out, lse


def forward_gluon(specs: tuple[KernelSpec, KernelSpec], geo: Geometry, q, k, v, softmax_scale: float):
    """(out, lse) by the Gluon forward: `specs` is ("fwd_gluon", "fwd_gluon_tile"), the second
    launched where the grid has one program per tile (gluon_forward_form)."""
    from .kernels import forward_gluon as kernel  # Triton with Gluon only (see _gluon_forward_specs)
    out = torch.empty((geo.batch, geo.seqlen_q, geo.heads_q, v.shape[-1]), dtype=q.dtype, device=q.device)
    lse = torch.empty((geo.batch, geo.heads_q, geo.seqlen_q), dtype=torch.float32, device=q.device)
    descs = kernel.descriptors(q, k, v, out, DTYPE_NAMES[q.dtype], specs[0].constexprs["BLOCK_N"])
    problem = _gluon_forward_problem(specs[0], geo)
    programs = kernel.programs(q.device, problem)
    _launch(gluon_forward_form(specs, programs, problem.tiles), (programs, ),
            [*descs, lse, softmax_scale * LOG2E, geo.seqlen_q, geo.seqlen_k, geo.heads_q, geo.heads_q // geo.heads_k,
             geo.batch])
    return out, lse


def gluon_forwards(specs: Mapping[str, KernelSpec]) -> tuple[KernelSpec, KernelSpec] | None:
    """kernel_specs' two Gluon forward forms (GLUON_FORWARDS), or None where it made none."""
    walking, one_tile = GLUON_FORWARDS
    return (specs[walking], specs[one_tile]) if walking in specs else None


def gluon_forward_form(specs: tuple[KernelSpec, KernelSpec], programs: int, tiles: int) -> KernelSpec:
    """The Gluon forward's form for a grid of `programs` over `tiles`: the one without the tile
    loop where each program has a single tile, the walking one otherwise."""
    walking, one_tile = specs
    return one_tile if programs == tiles else walking


def _gluon_forward_problem(spec: KernelSpec, geo: Geometry) -> tile_schedule.Problem:
    c = spec.constexprs
    return tile_schedule.Problem(slices=geo.batch * geo.heads_q, tiles_per_slice=geo.seqlen_q // c["BLOCK_M"],
                                 seqlen_q=geo.seqlen_q, seqlen_k=geo.seqlen_k, causal=c["CAUSAL"],
                                 head_group=c["HEAD_GROUP"], block_m=c["BLOCK_M"], block_n=c["BLOCK_N"])


# The outputs a kernel adds up in an order that changes from run to run (atomics): their bits are
# not reproducible on the same inputs, their accuracy is (mha_ci.perf.numerics judges them by
# their error, not their bits).
UNORDERED_OUTPUTS = {"bwd_dkdv_dq": ("dq",)}


def unordered_outputs(kernels) -> list[str]:
    """The outputs that the kernels named (spec names, e.g. launched_kernels') add up in no fixed
    order."""
    return sorted({name for kernel in kernels for name in UNORDERED_OUTPUTS.get(kernel, ())})


def launched_kernels(specs: Mapping[str, KernelSpec], pass_: str, deterministic: bool = False) -> tuple[str, ...]:
    """The specs a call launches for `pass_` ("forward" or "backward"): the forward runs fwd_gluon
    or fwd_gluon_tile (GLUON_FORWARDS, one of them by the grid) where kernel_specs made them (fwd
    for inputs they cannot take, see `forward`); the backward runs
    bwd_dkdv_gluon where kernel_specs made one (likewise, see `backward`), with bwd_dq_gluon where
    there is one and bwd_dq otherwise, else bwd_dkdv_dq where its config asks for a single pass
    and the caller allows nondeterminism, else bwd_dkdv and bwd_dq. The warp-specialized
    backward's bwd_dkdv_ws and bwd_dq_ws are launched as the Gluon ones are."""
    if pass_ == "forward":
        return GLUON_FORWARDS if gluon_forwards(specs) else ("fwd",)
    for kind, *_ in TILE_BACKWARDS:
        if f"bwd_dkdv_{kind}" in specs:
            return ("bwd_preprocess", f"bwd_dkdv_{kind}", f"bwd_dq_{kind}" if f"bwd_dq_{kind}" in specs else "bwd_dq")
    if not deterministic and "bwd_dkdv_dq" in specs:
        return ("bwd_preprocess", "bwd_dkdv_dq")
    return ("bwd_preprocess", "bwd_dkdv", "bwd_dq")


def backward(specs: Mapping[str, KernelSpec], geo: Geometry, q, k, v, out, dout, lse, cu_q, cu_k, softmax_scale: float,
             window: tuple[int, int], dropout_p: float, rng: tuple[int, int], deterministic: bool = True):
    """Returns (dq, dk, dv, delta); delta = rowsum(dO * O) in the lse layout. Two kernels (dK/dV,
    then dQ), bitwise reproducible: the Gluon or warp-specialized ones where kernel_specs made them
    and the inputs allow it (TILE_BACKWARDS; the Triton dQ beside a Gluon dK/dV without a Gluon
    dQ); or, with deterministic False and a "bwd_dkdv_dq" spec, one that adds dQ in atomics."""
    delta = torch.empty_like(lse)
    dummy_i32 = cu_q if cu_q is not None else torch.empty(1, dtype=torch.int32, device=q.device)
    cu_k = cu_k if cu_k is not None else dummy_i32
    lse_strides = geo.lse_strides(lse)
    pre = specs["bwd_preprocess"]
    _launch(pre, (geo.batch * geo.heads_q, triton.cdiv(geo.seqlen_q, pre.constexprs["BLOCK_M"])),
            [out, dout, delta, dummy_i32, *geo.bsh(out), *geo.bsh(dout), *lse_strides,
             geo.kernel_seqlens()[0], geo.heads_q])
    group = geo.heads_q // geo.heads_k
    tail = [window[0], window[1], softmax_scale * LOG2E, softmax_scale, dropout_p, rng[0], rng[1], geo.seqlen_k]

    def triton_dq(dout):
        dq = torch.empty_like(q)
        spec = specs["bwd_dq"]
        _launch_tiles(spec, geo.batch * geo.heads_k, group, geo.seqlen_q, spec.constexprs["BLOCK_M"],
                      [q, k, v, dout, lse, delta, dq, dummy_i32, cu_k,
                       *geo.bsh(q), *geo.bsh(k), *geo.bsh(v), *geo.bsh(dout), *geo.bsh(dq),
                       *lse_strides, *geo.kernel_seqlens(), geo.heads_q, group, *tail])
        return dq

    for kind, inputs_ok, run_dkdv, run_dq in TILE_BACKWARDS:
        tiled = specs.get(f"bwd_dkdv_{kind}")
        if tiled is None or not (inputs_ok(q, k, v, tiled.constexprs["CAUSAL"]) and lse.is_contiguous()):
            continue
        dout = dout.contiguous()   # read by TMA, as a (B*S, H*D) matrix
        if tma_ready(dout):
            dk, dv = run_dkdv(tiled, geo, q, k, v, dout, lse, delta, softmax_scale)
            dq_spec = specs.get(f"bwd_dq_{kind}")
            dq = (run_dq(dq_spec, geo, q, k, v, dout, lse, delta, softmax_scale) if dq_spec is not None
                  else triton_dq(dout))
            return dq, dk, dv, delta
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    single_pass = "bwd_dkdv_dq" in launched_kernels(specs, "backward", deterministic)
    # The single pass adds dQ into a zeroed float32 buffer (the layout of a contiguous q) as it goes.
    dq_acc = [torch.zeros(q.shape, dtype=torch.float32, device=q.device)] if single_pass else []
    spec = specs["bwd_dkdv_dq" if single_pass else "bwd_dkdv"]
    _launch_tiles(spec, geo.batch * geo.heads_k, 1, geo.seqlen_k, spec.constexprs["BLOCK_N"],
                  [q, k, v, dout, lse, delta, dk, dv, *dq_acc, dummy_i32, cu_k,
                   *geo.bsh(q), *geo.bsh(k), *geo.bsh(v), *geo.bsh(dout), *geo.bsh(dk), *geo.bsh(dv),
                   *(geo.bsh(dq_acc[0]) if single_pass else ()),
                   *lse_strides, *geo.kernel_seqlens(), geo.heads_k, group, *tail])
    if single_pass:
        return dq_acc[0].to(q.dtype), dk, dv, delta
    return triton_dq(dout), dk, dv, delta


def _ws_launch(spec: KernelSpec, geo: Geometry, heads: int, seqlen: int, tensors: list, softmax_scale: float) -> None:
    """A warp-specialized backward kernel over the 128-row tiles of `seqlen` in each (batch,
    `heads`) slice (tile_grid)."""
    if tensors[0].is_cuda:
        triton.set_allocator(_scratch)   # device-side descriptors, as forward_ws (see `forward`)
    _launch(spec, tile_grid(geo.batch, heads, seqlen, spec.constexprs["CAUSAL"]),
            [*tensors, geo.batch, geo.seqlen_q, geo.seqlen_k, heads, geo.heads_q // geo.heads_k,
             softmax_scale * LOG2E, softmax_scale])


def backward_ws_dkdv(spec: KernelSpec, geo: Geometry, q, k, v, dout, lse, delta, softmax_scale: float):
    """(dk, dv) by attn_bwd_dkdv_ws (dense, contiguous; lse and delta contiguous)."""
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    _ws_launch(spec, geo, geo.heads_k, geo.seqlen_k, [q, k, v, dout, lse, delta, dk, dv], softmax_scale)
    return dk, dv


def backward_ws_dq(spec: KernelSpec, geo: Geometry, q, k, v, dout, lse, delta, softmax_scale: float):
    """dq by attn_bwd_dq_ws (dense, contiguous; lse and delta contiguous)."""
    dq = torch.empty_like(q)
    _ws_launch(spec, geo, geo.heads_q, geo.seqlen_q, [q, k, v, dout, lse, delta, dq], softmax_scale)
    return dq


def backward_gluon_dkdv(spec: KernelSpec, geo: Geometry, q, k, v, dout, lse, delta, softmax_scale: float):
    """(dk, dv) by a Gluon dK/dV kernel, attn_bwd_dkdv_gluon or the `pe` bucket's
    attn_bwd_dkdv_gluon_pe (dense; lse and delta contiguous)."""
    from .kernels import backward_gluon, backward_gluon_pe  # Triton with Gluon only (see _gluon_backward_spec_pair)
    kernels = backward_gluon_pe if spec.fn is backward_gluon_pe.attn_bwd_dkdv_gluon_pe else backward_gluon
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    causal = spec.constexprs["CAUSAL"]
    descs = kernels.dkdv_descriptors(q, k, v, dout, dk, dv, lse, delta, DTYPE_NAMES[q.dtype], spec.constexprs["BLOCK_M"])
    _launch(spec, tile_grid(geo.batch, geo.heads_k, geo.seqlen_k, causal),
            [*descs, softmax_scale * LOG2E, softmax_scale, geo.seqlen_q, geo.seqlen_k, geo.heads_k,
             geo.heads_q // geo.heads_k])
    return dk, dv


def backward_gluon_dq(spec: KernelSpec, geo: Geometry, q, k, v, dout, lse, delta, softmax_scale: float):
    """dq by the Gluon dQ kernel (dense; lse and delta contiguous)."""
    from .kernels import backward_gluon as kernels  # Triton with Gluon only (see _gluon_backward_spec_pair)
    dq = torch.empty_like(q)
    descs = kernels.dq_descriptors(q, k, v, dout, dq, DTYPE_NAMES[q.dtype], spec.constexprs["BLOCK_N"])
    _launch(spec, tile_grid(geo.batch, geo.heads_q, geo.seqlen_q, spec.constexprs["CAUSAL"]),
            [*descs, lse, delta, softmax_scale * LOG2E, softmax_scale, geo.seqlen_q, geo.seqlen_k, geo.heads_q,
             geo.heads_q // geo.heads_k])
    return dq


# The backwards of whole 128-row tiles, read by TMA, in the order `backward` tries them: (kind, what
# they need of q/k/v, the dK/dV run, the dQ run); their specs are "bwd_dkdv_<kind>" and "bwd_dq_<kind>".
TILE_BACKWARDS = (("gluon", gluon_backward_inputs_ok, backward_gluon_dkdv, backward_gluon_dq),
                  ("ws", ws_backward_inputs_ok, backward_ws_dkdv, backward_ws_dq))


def default_scale(dqk: int) -> float:
    return 1.0 / math.sqrt(dqk)
