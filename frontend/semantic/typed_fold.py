"""Compile-time arithmetic on assigned numbers, with the result Triton computes at run time.

In Triton a Python number assigned to a name in a kernel becomes a scalar tensor
(`to_tensor`: int32, uint32, int64, uint64, fp32 or fp64), so `n = 3; m = n * 2**31`
computes in int32 and wraps, `//` and `%` truncate toward zero, and an fp32 value is rounded
to fp32 after each operation. kitjit keeps such values known at compile time (base.TypedInt,
base.TypedFloat: they still serve as constants, for kit.arange bounds and shapes), so the
folding of an operation on them must give the value and the dtype Triton's tensor operation
gives. Plain literals and constexprs keep Python's arithmetic, as in Triton.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kitjit.ir.types import DType, float32, float64

from .base import (
    TypedFloat,
    TypedInt,
    int_range,
    literal_range_error,
    promote,
    typed_dtype,
    weak_dtype,
)

_INT_OPS = {"add", "sub", "mul", "floordiv", "mod", "and", "or", "xor", "shl", "shr"}


def is_typed(x: Any) -> bool:
    return typed_dtype(x) is not None


def result_dtype(op: str, a: Any, b: Any) -> DType:
    """The dtype of `a op b` where one or both are assigned numbers (the other a literal)."""
    da, db = typed_dtype(a), typed_dtype(b)
    if da is None:
        msg = literal_range_error(a, weak_dtype(a, db))
        if msg is not None:
            raise ValueError(msg)
        da = weak_dtype(a, db)
    if db is None:
        msg = literal_range_error(b, weak_dtype(b, da))
        if msg is not None:
            raise ValueError(msg)
        db = weak_dtype(b, da)
    if op == "div":   # Triton's truediv: ints are cast to fp32 first
        da = float32 if not da.is_floating() else da
        db = float32 if not db.is_floating() else db
    dt = promote(da, db)
    if dt is None:
        raise ValueError(f"cannot combine {da} and {db}")
    return dt


def _wrap(v: int, dt: DType) -> int:
    lo, hi = int_range(dt)
    span = hi - lo + 1
    return (v - lo) % span + lo


def fold_typed(op: str, a: Any, b: Any) -> Any:
    """`a op b` (op one of kitjit's binary op names) with Triton's run-time semantics,
    returned as a TypedInt/TypedFloat of the result dtype."""
    dt = result_dtype(op, a, b)
    if dt.is_floating():
        if op not in ("add", "sub", "mul", "div", "mod", "floordiv"):
            raise ValueError(f"'{op}' needs integer operands, got {dt}")
        np_t = np.float32 if dt is float32 else np.float64
        x, y = np_t(float(a)), np_t(float(b))
        with np.errstate(all="ignore"):
            if op == "mod":   # C's fmod, as Triton's frem
                r = np.fmod(x, y)
            elif op == "floordiv":
                r = np.floor(x / y)
            else:
                r = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                     "div": np.divide}[op](x, y)
        return TypedFloat(float(np_t(r)), float32 if dt is float32 else float64)
    x, y = _wrap(int(a), dt), _wrap(int(b), dt)
    if op in ("floordiv", "mod"):
        if y == 0:
            raise ZeroDivisionError("integer division by zero")
        q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)   # toward zero, as C
        r = q if op == "floordiv" else x - q * y
    elif op == "shl":
        r = x << y if 0 <= y < dt.bits else 0
    elif op == "shr":   # arithmetic on signed, logical on unsigned (x is in range)
        r = x >> y if 0 <= y < dt.bits else (-1 if x < 0 else 0)
    else:
        r = {"add": x + y, "sub": x - y, "mul": x * y, "and": x & y, "or": x | y,
             "xor": x ^ y}[op]
    return TypedInt(_wrap(r, dt), dt)
