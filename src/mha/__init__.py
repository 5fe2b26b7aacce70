"""Triton multi-head attention (forward and backward), flash-attn shaped API.

`mha.arch` and `mha.config` (the config files and the bucket rule) use the standard library
only, so a program without torch or triton (the CI's orchestrating side) can import them; the
names that need torch are imported on first use.
"""
from __future__ import annotations

import importlib

from . import arch, config

_NEED_TORCH = {"flash_attn_func": "interface", "flash_attn_varlen_func": "interface",
               "dropout_mask": "dropout", "draw_seed": "dropout", "validation": None}

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "dropout_mask", "draw_seed", "arch", "config",
           "validation"]


def __getattr__(name: str):
    if name not in _NEED_TORCH:
        raise AttributeError(f"module 'mha' has no attribute {name!r}")
    module = importlib.import_module(f".{_NEED_TORCH[name] or name}", __name__)
    value = module if _NEED_TORCH[name] is None else getattr(module, name)
    globals()[name] = value
    return value
