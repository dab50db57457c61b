"""Triton's `tl.condition(cond, disable_licm=False)`: the wrapper of a `while` loop's
condition that carries a compiler hint. kitjit has no loop-invariant code motion to disable,
so the hint is ignored and the wrapper is its condition: `while kit.condition(i < n):` loops
exactly as `while i < n:`."""

from __future__ import annotations

from ..jit import jit


@jit
def condition(arg1, disable_licm=False):
    """`arg1` itself (a scalar condition); `disable_licm` (Triton: keep loop-invariant code
    inside the loop) is accepted and ignored, as kitjit does not hoist it."""
    return arg1
