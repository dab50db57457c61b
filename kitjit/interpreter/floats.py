"""The GPU's float max/min rule, shared by every interpreter op that takes one.

The lowering emits LLVM maxnum/minnum (PTX max.f32/min.f32; fp16 and bf16 go through
fp32): a NaN operand gives the other operand, two NaNs give NaN, and -0.0 < +0.0 (IEEE
754-2019 maximumNumber / minimumNumber; measured on an H200 for fp32, fp16 and bf16, in
both argument orders and in reductions). numpy's fmax/fmin agree except on signed zeros,
where they return either zero by argument order, dtype and SIMD code path, so the helpers
here take numpy's result and fix the sign of a zero result only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _is_float(x: Any) -> bool:
    return np.asarray(x).dtype.kind == "f"


def _bits(x: np.ndarray) -> np.ndarray:
    """The float array `x` as unsigned ints of its width (a view)."""
    return x.view(f"u{x.dtype.itemsize}")


def _fix_ties(r: Any, a: Any, b: Any, combine: Callable) -> Any:
    """numpy's fmax/fmin result `r` with the zeros of a (-0.0, +0.0) pair set to
    `combine(bits of a, bits of b)`: & for max (+0.0 unless both are -0.0), | for min. A
    zero paired with a NaN or a number is already right; only a zero result can be wrong,
    so a tile without one costs one compare."""
    arr = np.asarray(r)
    if not (arr == 0).any():
        return r
    arr = np.array(arr)  # fmax's result may be a scalar: a writable array
    a, b = np.asarray(a, arr.dtype), np.asarray(b, arr.dtype)
    both = (a == 0) & (b == 0)
    np.copyto(_bits(arr), combine(_bits(a), _bits(b)), where=both)
    return arr[()] if arr.ndim == 0 else arr


def maxnum(a: Any, b: Any) -> Any:
    """Elementwise GPU max: NaN gives the other operand, max(-0.0, +0.0) is +0.0."""
    if not (_is_float(a) or _is_float(b)):
        return np.maximum(a, b)
    return _fix_ties(np.fmax(a, b), a, b, np.bitwise_and)


def minnum(a: Any, b: Any) -> Any:
    """Elementwise GPU min: NaN gives the other operand, min(-0.0, +0.0) is -0.0."""
    if not (_is_float(a) or _is_float(b)):
        return np.minimum(a, b)
    return _fix_ties(np.fmin(a, b), a, b, np.bitwise_or)


def pick(a: Any, b: Any, largest: bool) -> Any:
    """maxnum(a, b) if `largest` else minnum(a, b)."""
    return maxnum(a, b) if largest else minnum(a, b)


def reduce_maxnum(x: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """The GPU's tree of maxnum (minnum) along `axis`: NaNs are skipped unless all are NaN,
    and a zero result is +0.0 (max) / -0.0 (min) when any element is that zero. maxnum is
    associative and commutative under this order, so any tree gives these bits."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        return (np.max if largest else np.min)(x, axis=axis)
    r = np.asarray((np.fmax if largest else np.fmin).reduce(x, axis=axis))
    z = r == 0
    if not z.any():
        return r
    bits = _bits(x)
    sign = bits.dtype.type(1 << (8 * x.dtype.itemsize - 1))
    # max: -0.0 unless the row has a +0.0 (all bits clear); min: -0.0 if it has a -0.0
    neg = ~np.any(bits == 0, axis=axis) if largest else np.any(bits == sign, axis=axis)
    r = np.array(r)
    np.copyto(_bits(r), neg.astype(bits.dtype) * sign, where=z)
    return r
