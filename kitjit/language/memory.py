"""Loads and stores through tiles of pointers."""

from __future__ import annotations

from .base import builtin


@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="",
         cache_modifier="", eviction_policy="", volatile=False):
    """Load a tile through a tile of pointers; masked-off lanes read `other` (0 if None).
    Triton's signature; `boundary_check` / `padding_option` (block pointers) are not
    supported yet, the cache hints are accepted and do not change the code yet."""


@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    """Store a tile through a tile of pointers; masked-off lanes are not written. The value
    and the mask broadcast to the pointers' shape (never the other way, as in Triton)."""
