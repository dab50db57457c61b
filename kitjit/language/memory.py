"""Loads and stores through tiles of pointers."""

from __future__ import annotations

from .base import builtin


@builtin
def load(pointer, mask=None, other=None):
    """Load a tile through a tile of pointers; masked-off lanes read `other` (0 if None)."""


@builtin
def store(pointer, value, mask=None):
    """Store a tile through a tile of pointers; masked-off lanes are not written."""
