"""Problem -> kernel specs for the toy package (same interface as mha.launch)."""
from dataclasses import dataclass, field

import triton

from . import config as config_mod
from .kernels.toy import toy_bwd, toy_fwd


@dataclass(frozen=True)
class Problem:
    dtype: str
    dqk: int
    dv: int
    causal: bool = False
    window: tuple = (-1, -1)
    has_sink: bool = False
    dropout: bool = False
    varlen: bool = False


@dataclass(frozen=True)
class KernelSpec:
    name: str
    fn: object
    signature: dict = field(hash=False)
    constexprs: dict = field(hash=False)
    num_warps: int
    num_stages: int
    bucket: str
    pass_: str


def kernel_specs(problem, arch, config=None):
    ptr = "*" + problem.dtype
    block_d = max(16, triton.next_power_of_2(problem.dqk))
    bucket, cfg = config_mod.resolve("forward", arch, problem.dqk, problem.dv, problem.dtype, problem.dropout)
    fwd_c = dict(HEAD=problem.dqk, BLOCK_D=block_d, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                 CAUSAL=problem.causal, HAS_SINK=problem.has_sink)
    fwd_sig = {"Q": ptr, "K": ptr, "Out": ptr, "stride_qs": "i32", "stride_ks": "i32", "stride_os": "i32",
               "seqlen": "i32", "scale": "fp32", **{k: "constexpr" for k in fwd_c}}
    specs = {"fwd": KernelSpec("fwd", toy_fwd, fwd_sig, fwd_c, cfg["num_warps"], cfg["num_stages"], bucket, "forward")}
    bucket, cfg = config_mod.resolve("backward", arch, problem.dqk, problem.dv, problem.dtype, problem.dropout)
    bwd_c = dict(HEAD=problem.dv, BLOCK_D=max(16, triton.next_power_of_2(problem.dv)), BLOCK_M=cfg["BLOCK_M"])
    bwd_sig = {"DOut": ptr, "Delta": "*fp32", "stride_ds": "i32", "seqlen": "i32", **{k: "constexpr" for k in bwd_c}}
    specs["bwd"] = KernelSpec("bwd", toy_bwd, bwd_sig, bwd_c, cfg["num_warps"], 1, bucket, "backward")
    return specs


def aligned_specialization(spec):
    dont = set(getattr(spec.fn, "do_not_specialize", ()) or ())
    return {n: ("none" if t == "fp32" or n in dont else "aligned16")
            for n, t in spec.signature.items() if t != "constexpr"}
