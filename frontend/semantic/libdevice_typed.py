"""Typing of libdevice's integer, conversion and bit functions (kitjit/ir/libm_typed.py):
Triton's overload tables, matched exactly as Triton's extern_elementwise matches them.

A number becomes its `to_tensor` dtype (an int int32, or uint32/int64/uint64 where it does
not fit; a float fp32); fp16/bf16 tiles widen to fp32 first (exact: kitjit's other libdevice
functions compute them in fp32 too, where Triton finds no overload); then the operand dtypes
must be one of Triton's overloads, else a CompileError lists them. Shapes broadcast.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Value
from kitjit.ir.libm_typed import TYPED, signature
from kitjit.ir.types import TileType, bfloat16, dtype_from_name, float16, float32

from .base import describe, literal_dtype


def typed_libdevice(b: Any, fn: str, args: list, what: str) -> Value:
    """Emit the `math` op of libdevice's `fn` (a key of TYPED) on `args`."""
    sigs = TYPED[fn]
    if len(args) != len(sigs[0].args):
        n = len(sigs[0].args)
        raise b.error(f"{what} takes {n} argument{'s' if n > 1 else ''}, got {len(args)}")
    if not any(isinstance(a, Value) for a in args):
        raise b.error(f"{what} needs at least one tile argument")
    vals = []
    for a in args:
        if isinstance(a, Value):
            if a.dtype in (float16, bfloat16):
                a = b.cast(a, float32)
        elif isinstance(a, (int, float)) and not isinstance(a, bool):
            a = b.constant(a, getattr(a, "kit_dtype", None) or literal_dtype(a))
        else:
            raise b.error(f"{what}: expected a tile or a number, got {describe(a)}")
        vals.append(a)
    names = tuple(v.dtype.name for v in vals)
    sig = signature(fn, names)
    if sig is None:
        want = " or ".join("(" + ", ".join(str(dtype_from_name(t)) for t in s.args) + ")"
                           for s in sigs)
        got = ", ".join(str(v.dtype) for v in vals)
        raise b.error(f"{what} takes {want} (Triton's overloads), got ({got})",
                      "convert with .to(...) to one of those dtypes")
    shape = vals[0].shape
    for v in vals[1:]:
        shape = b.broadcast_shapes(shape, v.shape)
    vals = [b.broadcast_to(v, shape) for v in vals]
    return b.emit1("math", vals, TileType(dtype_from_name(sig.ret), shape), {"fn": fn})
