"""Matrix multiply on tensor cores (level 1: mma.sync)."""

from __future__ import annotations

from .base import builtin


@builtin
def dot(a, b, acc=None):
    """a @ b (+ acc) on tensor cores (mma.sync): fp16/bf16 inputs, fp32 accumulation."""
