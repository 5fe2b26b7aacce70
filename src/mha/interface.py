"""Public entry points (flash-attn shaped) and their autograd function."""
from __future__ import annotations

import torch

from . import launch, validation
from .arch import current_arch
from .dropout import draw_seed


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sink, cu_q, cu_k, geo, scale, causal, window, dropout_p, config, deterministic):
        problem = launch.Problem(dtype=launch.DTYPE_NAMES[q.dtype], dqk=q.shape[-1], dv=v.shape[-1],
                                 causal=causal, window=window, has_sink=sink is not None,
                                 dropout=dropout_p > 0, varlen=geo.varlen)
        specs = launch.call_specs(problem, current_arch(q.device), config)
        rng = draw_seed() if dropout_p > 0 else (0, 0)
        if dropout_p > 0:
            validation.check_rng_range(geo.seqlen_q, geo.seqlen_k, rng[1])
        # causal is a window whose right side is 0 (flash-attn semantics).
        kernel_window = (window[0], 0 if causal else window[1])
        out, lse = launch.forward(specs["fwd"], geo, q, k, v, sink, cu_q, cu_k, scale, kernel_window,
                                  dropout_p, rng, gluon=launch.gluon_forwards(specs))
        ctx.save_for_backward(q, k, v, out, lse, sink, cu_q, cu_k)
        ctx.specs, ctx.geo, ctx.scale, ctx.window, ctx.dropout_p, ctx.rng, ctx.deterministic = (
            specs, geo, scale, kernel_window, dropout_p, rng, deterministic)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, sink, cu_q, cu_k = ctx.saved_tensors
        if ctx.geo.varlen:
            # The saved cu_seqlens are launched with again. Autograd refuses a versioned in-place
            # write since the forward; this sees one that bypassed the version counter (on the
            # CPU, where the values are re-read) before the kernels could index past the totals.
            validation.check_cu_seqlens(cu_q, cu_k, q.shape[0], k.shape[0], ctx.geo.seqlen_q, ctx.geo.seqlen_k,
                                        q.device)
        # dO comes from autograd with any strides: a contiguous copy has the layout of out, whose
        # in-slice offsets were checked before the forward launch.
        if dout.stride(-1) != 1 or validation.slice_max_offset(dout, ctx.geo.seqlen_q) > validation.INT32_MAX:
            dout = dout.contiguous()
        dq, dk, dv, delta = launch.backward(ctx.specs, ctx.geo, q, k, v, out, dout, lse, cu_q, cu_k,
                                            ctx.scale, ctx.window, ctx.dropout_p, ctx.rng, ctx.deterministic)
        dsink = None
        if sink is not None and ctx.needs_input_grad[3]:
            # The sink has a zero value row, so dS_sink = -P_sink * delta, summed over rows.
            if ctx.geo.varlen:
                dsink = -(torch.exp(sink[:, None] - lse) * delta).sum(dim=1)
            else:
                dsink = -(torch.exp(sink[None, :, None] - lse) * delta).sum(dim=(0, 2))
        return dq, dk, dv, dsink, None, None, None, None, None, None, None, None, None


def _common_checks(q, k, v, dropout_p, softmax_scale, causal, window_size, sink, return_lse, deterministic, varlen):
    """Every argument check before a launch but the config's (mha.config.resolve makes that one);
    returns (window, dropout p, scale, causal, sink as float32, return_lse, deterministic)."""
    dtype, dqk, dv = validation.check_qkv(q, k, v, varlen=varlen)
    validation.check_runnable_dtype(dtype, current_arch(q.device))
    window = validation.check_window(window_size)
    p = validation.check_dropout(dropout_p)
    causal = validation.check_causal(causal)
    sink = validation.check_sink(sink, q.shape[-2], q.device, q.dtype)
    scale = validation.check_softmax_scale(softmax_scale)
    scale = launch.default_scale(dqk) if scale is None else scale
    return (window, p, scale, causal, sink, validation.check_flag(return_lse, "return_lse"),
            validation.check_flag(deterministic, "deterministic"))


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    sink=None, return_lse=False, config=None, deterministic=False):
    """Attention of q (B, Sq, Hq, Dqk), k (B, Sk, Hk, Dqk), v (B, Sk, Hk, Dv) -> (B, Sq, Hq, Dv).

    causal and windows are bottom-right aligned (query i sits at key i + Sk - Sq). A query row
    that sees no key gets output 0 and lse -inf (lse = sink when a sink is given: the sink is a
    logit of its own in the denominator). With return_lse, also lse (B, Hq, Sq) float32, the
    natural-log normalizer including the sink. Differentiable in q, k, v and sink.

    Arguments are checked, never coerced: window_size takes ints (a side at least as long as the
    keys (left) or the queries (right) excludes none, however large), causal and return_lse bools,
    dropout_p and softmax_scale numbers (softmax_scale finite); anything else raises a ValueError
    or TypeError (mha.validation) before a launch. deterministic (flash-attn's flag): True keeps
    the backward bitwise reproducible; False (the default) lets a config with `single_pass` add
    dQ in atomics, in no fixed order (docs/configs.md). sink (Hq,) holds finite logits, float32 or in
    the inputs' dtype (bf16 checkpoints store it so); the latter is upcast to float32, and its
    gradient comes back in its own dtype. bf16 is refused under the Triton interpreter, whose bf16
    dot is wrong. config overrides the kernel config of the call (docs/configs.md, "Overrides";
    mha.config.check_override).
    """
    window, p, scale, causal, sink, return_lse, deterministic = _common_checks(
        q, k, v, dropout_p, softmax_scale, causal, window_size, sink, return_lse, deterministic, varlen=False)
    b, sq, hq, _ = q.shape
    window = validation.clamp_window(window, sq, k.shape[1])
    out_meta = torch.empty((b, sq, hq, v.shape[-1]), device="meta")  # allocated contiguous
    validation.check_attention_offsets(q, k, v, sq, k.shape[1], out_meta)
    validation.check_has_data(q=q, k=k, v=v, sink=sink)
    geo = launch.Geometry(batch=b, seqlen_q=sq, seqlen_k=k.shape[1], heads_q=hq, heads_k=k.shape[2], varlen=False,
                          rows_q=b * sq, rows_k=b * k.shape[1])
    out, lse = _FlashAttention.apply(q, k, v, sink, None, None, geo, scale, causal, window, p, config,
                                     deterministic)
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), sink=None,
                           return_lse=False, config=None, deterministic=False):
    """Packed variant: q (total_q, Hq, Dqk), k/v (total_k, Hk, D), cu_seqlens int32 (batch + 1).

    Same semantics and argument checks per sequence as flash_attn_func (max_seqlen_* are ints);
    lse is (Hq, total_q).
    """
    window, p, scale, causal, sink, return_lse, deterministic = _common_checks(
        q, k, v, dropout_p, softmax_scale, causal, window_size, sink, return_lse, deterministic, varlen=True)
    longest_q, longest_k = validation.check_cu_seqlens(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0],
                                                       max_seqlen_q, max_seqlen_k, q.device)
    window = validation.clamp_window(window, longest_q, longest_k)
    out_meta = torch.empty((q.shape[0], q.shape[1], v.shape[-1]), device="meta")  # allocated contiguous
    validation.check_attention_offsets(q, k, v, longest_q, longest_k, out_meta)
    validation.check_has_data(q=q, k=k, v=v, sink=sink)
    geo = launch.Geometry(batch=cu_seqlens_q.shape[0] - 1, seqlen_q=longest_q, seqlen_k=longest_k,
                          heads_q=q.shape[1], heads_k=k.shape[1], varlen=True, rows_q=q.shape[0], rows_k=k.shape[0])
    out, lse = _FlashAttention.apply(q, k, v, sink, cu_seqlens_q, cu_seqlens_k, geo, scale, causal, window,
                                     p, config, deterministic)
    return (out, lse) if return_lse else out
