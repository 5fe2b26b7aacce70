"""The base of mha's input errors, standard library only: mha.config, which a program without
torch imports, raises them too (mha.validation holds the rest of the family)."""
from __future__ import annotations


class AttentionInputError(ValueError):
    """Base of every input error raised by mha before launching a kernel."""
