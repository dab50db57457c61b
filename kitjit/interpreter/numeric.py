"""How the interpreter holds values of each dtype in numpy: the numpy dtypes of values and of
memory, bf16 rounding (bf16 values are float32 arrays kept exactly representable in bf16),
and Python numbers as numpy scalars."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kitjit.ir.types import DType, bfloat16


def _np(dt: DType) -> Any:
    """The numpy dtype a value of `dt` is held in (bf16: float32, pointers: int64)."""
    return np.dtype(dt.np_dtype)


def _mem_np(dt: DType) -> Any:
    """The numpy dtype of `dt` as laid out in memory."""
    if dt is bfloat16:
        return np.dtype(np.uint16)
    if dt.is_bool():
        return np.dtype(np.uint8)
    return np.dtype(dt.np_dtype)


def _bf16_bits(x: Any) -> np.ndarray:
    """float32 -> the uint32 bits of the nearest-even bf16 (low 16 bits zero); NaN stays NaN."""
    x = np.asarray(x, dtype=np.float32)
    b = x.view(np.uint32)
    r = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    nan = x != x
    if nan.any():
        r = np.where(nan, (b | np.uint32(0x00400000)) & np.uint32(0xFFFF0000), r)
    return r


def round_bf16(x: Any) -> np.ndarray:
    """Round to the nearest bf16 value (ties to even), returned as float32.

    float64 input is first rounded to float32 with round-to-odd, so the result is the
    correctly rounded bf16 of the float64 value (no double-rounding error)."""
    x = np.asarray(x)
    if x.dtype == np.float64 or x.dtype.kind in "iu" and x.dtype.itemsize > 2:
        x = _f64_to_f32_round_odd(x.astype(np.float64))
    return _bf16_bits(x).view(np.float32)


def _f64_to_f32_round_odd(x: np.ndarray) -> np.ndarray:
    f = x.astype(np.float32)
    bits = f.view(np.uint32).copy()
    fin = np.isfinite(x)
    back = f.astype(np.float64)
    # RNE went away from zero: step one ulp back toward zero (truncation), then mark inexact.
    away = fin & (np.abs(back) > np.abs(x))
    bits = np.where(away, bits - np.uint32(1), bits)
    inexact = fin & (back != x)
    bits = np.where(inexact, bits | np.uint32(1), bits)
    return bits.view(np.float32)


def _fixer(dt: DType) -> Callable[[Any], Any] | None:
    """How to bring a computed value back into `dt`'s set of values (None: nothing to do)."""
    if dt is bfloat16:
        return round_bf16
    return None


def _int_bounds(dt: DType) -> tuple[int, int]:
    if dt.is_int_unsigned():
        return 0, 2 ** dt.bits - 1
    return -(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1


def _scalar_arg(dt: DType, x: Any) -> Any:
    """A Python number (an argument or a constant) as a numpy scalar of `dt`; ints wrap."""
    if dt.is_bool():
        return np.bool_(bool(x))
    if dt.is_int():
        n = int(x) & ((1 << dt.bits) - 1)
        if dt.is_int_signed() and n >= 1 << (dt.bits - 1):
            n -= 1 << dt.bits
        return _np(dt).type(n)
    if dt is bfloat16:
        return round_bf16(np.float64(float(x)))[()]
    return _np(dt).type(float(x))
