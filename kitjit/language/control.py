"""Compile-time checks and control helpers."""

from __future__ import annotations

from .base import builtin


@builtin
def static_assert(cond, msg=""):
    """A compile-time assertion on constexpr values."""
