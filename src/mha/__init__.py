"""Triton multi-head attention (forward and backward), flash-attn shaped API."""
from . import arch, config, validation
from .dropout import draw_seed, dropout_mask
from .interface import flash_attn_func, flash_attn_varlen_func

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "dropout_mask", "draw_seed", "arch", "config",
           "validation"]
