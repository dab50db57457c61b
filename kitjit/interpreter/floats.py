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


def _signed_zeros(r: Any, negative: Callable[[], Any]) -> Any:
    """`r` with its zeros set to -0.0 where `negative()`, +0.0 elsewhere (`negative` is
    only evaluated when `r` holds a zero: the common case costs one compare)."""
    arr = np.asarray(r)
    z = arr == 0
    if not z.any():
        return r
    t = arr.dtype.type
    out = np.where(z, np.where(negative(), t(-0.0), t(0.0)), arr)
    return out[()] if out.ndim == 0 else out


def _pos_zero(x: Any) -> Any:
    return (x == 0) & ~np.signbit(x)


def _neg_zero(x: Any) -> Any:
    return (x == 0) & np.signbit(x)


def maxnum(a: Any, b: Any) -> Any:
    """Elementwise GPU max: NaN gives the other operand, max(-0.0, +0.0) is +0.0."""
    if not (_is_float(a) or _is_float(b)):
        return np.maximum(a, b)
    return _signed_zeros(np.fmax(a, b), lambda: ~(_pos_zero(a) | _pos_zero(b)))


def minnum(a: Any, b: Any) -> Any:
    """Elementwise GPU min: NaN gives the other operand, min(-0.0, +0.0) is -0.0."""
    if not (_is_float(a) or _is_float(b)):
        return np.minimum(a, b)
    return _signed_zeros(np.fmin(a, b), lambda: _neg_zero(a) | _neg_zero(b))


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
    r = (np.fmax if largest else np.fmin).reduce(x, axis=axis)
    if largest:
        return _signed_zeros(r, lambda: ~np.any(_pos_zero(x), axis=axis))
    return _signed_zeros(r, lambda: np.any(_neg_zero(x), axis=axis))
