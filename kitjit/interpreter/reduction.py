"""Semantics of the reduction family: `reduce` along one axis (sum, max, min, argmax,
argmin); sums accumulate in the result dtype, bf16 results are rounded."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kitjit.ir.core import Op
from kitjit.ir.registry import semantics

from .compiler import pure
from .numeric import _fixer, _np
from .sync import _Ctx


@semantics("reduce")
@pure
def _reduce(op: Op, ctx: _Ctx) -> Callable:
    kind, axis = op.attrs["kind"], op.attrs["axis"]
    rdt = _np(op.result.dtype)
    fix = _fixer(op.result.dtype)
    if kind == "sum":
        def f(x):
            return np.sum(x, axis=axis, dtype=rdt)
    elif kind in ("max", "min"):
        # as the GPU's tree of maxnum/minnum: NaNs are skipped unless a row is all NaN
        g = np.fmax.reduce if kind == "max" else np.fmin.reduce

        def f(x):
            return np.asarray(g(x, axis=axis)).astype(rdt)
    elif kind in ("argmax", "argmin"):
        g = np.argmax if kind == "argmax" else np.argmin  # first extreme element

        def f(x):
            return g(x, axis=axis).astype(rdt)
    else:
        raise NotImplementedError(f"interpreter: reduce kind '{kind}'")
    if fix is not None:
        return lambda x: fix(f(x))
    return f
