"""Shape ops on register tiles."""

from __future__ import annotations

from .base import builtin


@builtin
def expand_dims(x, axis):
    """Insert a dim of size 1 (same as `x[None, :]` / `x[:, None]`)."""


@builtin
def broadcast_to(x, shape):
    """Broadcast to `shape`."""
