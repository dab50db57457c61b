"""Reductions along an axis."""

from __future__ import annotations

from .base import builtin


@builtin
def sum(x, axis=None, keep_dims=False):
    """Sum along `axis` (all axes if None). Integers narrower than 32 bits and fp16/bf16
    accumulate in int32/fp32."""


@builtin
def max(x, axis=None, keep_dims=False):
    """Maximum along `axis`."""


@builtin
def min(x, axis=None, keep_dims=False):
    """Minimum along `axis`."""


@builtin
def argmax(x, axis, keep_dims=False):
    """Index of the maximum along `axis` (the first one on ties)."""


@builtin
def argmin(x, axis, keep_dims=False):
    """Index of the minimum along `axis` (the first one on ties)."""
