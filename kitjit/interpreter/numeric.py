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
    if dt.is_bool() or dt.is_fp8():
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
    if dt.is_fp8():
        return lambda x: round_fp8(x, dt)
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
    if dt.is_fp8():
        return round_fp8(np.float32(float(x)), dt)[()]
    return _np(dt).type(float(x))


# ----------------------------------------------------------------------------- fp8
# The GPU's conversions (backend/lower/fp8.py): e4nv/e5 round to nearest even and saturate
# to the largest finite value (cvt.rn.satfinite: infinities too), NaN -> 0x7F; e4b15 rounds
# the fp16 value to its 3 mantissa bits (nearest even), saturating to +-1.875 (NaN too).
_FP8_MAX = {"fp8e4nv": 448.0, "fp8e5": 57344.0}


def fp8_encode(x: Any, dt: DType) -> np.ndarray:
    """Values (float32/float64/float16) -> the uint8 bits of `dt`, as the GPU rounds."""
    import torch

    x = np.asarray(x)
    if x.dtype == np.float64:
        x = x.astype(np.float32)  # the GPU narrows fp64 to fp32 first
    if dt.name == "fp8e4b15":
        bits = np.asarray(x, np.float32).astype(np.float16).view(np.uint16)
        sign = bits & np.uint16(0x8000)
        mag = np.minimum(bits & np.uint16(0x7FFF), np.uint16(0x3F80))
        r = mag + np.uint16(0x3F) + ((mag >> np.uint16(7)) & np.uint16(1))
        return ((r >> np.uint16(7)) | (sign >> np.uint16(8))).astype(np.uint8)
    x = np.asarray(x, np.float32)
    m = np.float32(_FP8_MAX[dt.name])
    nan = x != x
    xc = np.clip(np.where(nan, np.float32(0), x), -m, m)
    tdt = torch.float8_e4m3fn if dt.name == "fp8e4nv" else torch.float8_e5m2
    out = torch.from_numpy(np.ascontiguousarray(xc).reshape(-1)).to(tdt).view(torch.uint8)
    out = out.numpy().reshape(xc.shape)
    return np.where(nan, np.uint8(0x7F), out).astype(np.uint8)


def fp8_decode(bits: Any, dt: DType) -> np.ndarray:
    """uint8 bits of `dt` -> float32 values (exact)."""
    import torch

    bits = np.asarray(bits, np.uint8)
    if dt.name == "fp8e4b15":
        w = bits.astype(np.uint16)
        h = ((w & np.uint16(0x80)) << np.uint16(8)) | ((w & np.uint16(0x7F)) << np.uint16(7))
        return h.view(np.float16).astype(np.float32)
    tdt = torch.float8_e4m3fn if dt.name == "fp8e4nv" else torch.float8_e5m2
    t = torch.from_numpy(np.ascontiguousarray(bits).reshape(-1).copy()).view(tdt)
    return t.to(torch.float32).numpy().reshape(bits.shape)


def round_fp8(x: Any, dt: DType) -> np.ndarray:
    return fp8_decode(fp8_encode(x, dt), dt)


def to_bits(x: Any, dt: DType) -> np.ndarray:
    """Values of `dt` as held here -> their bits in memory (numpy dtype `_mem_np(dt)`)."""
    if dt is bfloat16:
        return (_bf16_bits(x) >> np.uint32(16)).astype(np.uint16)
    if dt.is_fp8():
        return fp8_encode(x, dt)
    if dt.is_bool():
        return np.asarray(x).astype(np.uint8)
    return np.asarray(x, _mem_np(dt))


def from_bits(raw: Any, dt: DType) -> np.ndarray:
    """Bits in memory -> values of `dt` as held here."""
    if dt is bfloat16:
        return (np.asarray(raw).astype(np.uint32) << np.uint32(16)).view(np.float32)
    if dt.is_fp8():
        return fp8_decode(raw, dt)
    if dt.is_bool():
        return np.asarray(raw) != 0
    return np.asarray(raw)
