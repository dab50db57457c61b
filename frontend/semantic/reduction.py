"""Reductions along one axis: sum, max, min, argmax, argmin.

Call rules: kit.sum, kit.max, kit.min, kit.argmax, kit.argmin.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Value
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import TileType, bfloat16, float16, float32, int32

from .base import _describe, _shape
from .call_rules import Call, call_rule


class ReductionOps:
    """Typing rules of the reduction family."""

    @typing_rule("reduce")
    def reduce(self, kind: str, x: Any, axis: Any, keep_dims: bool = False) -> Value:
        if not isinstance(x, Value) or x.type.is_scalar:
            raise self.error(f"kit.{kind} needs a tile, got {_describe(x)}")
        if x.dtype.is_ptr():
            raise self.error(f"kit.{kind} does not apply to pointers")
        if axis is None:
            if kind in ("argmax", "argmin"):
                raise self.error(f"kit.{kind} needs an axis")
            v = x
            while not v.type.is_scalar:
                v = self.reduce(kind, v, len(v.shape) - 1)
            return v
        if not isinstance(axis, int):
            raise self.error("a reduction axis must be a constexpr int")
        rank = len(x.shape)
        if not -rank <= axis < rank:
            raise self.error(f"axis {axis} is out of range for a {rank}-d tile of shape "
                             f"{_shape(x.shape)}", f"use an axis in [{-rank}, {rank - 1}]")
        axis %= rank
        if kind == "sum":
            dt = x.dtype
            if dt.is_bool() or dt.is_int() and dt.bits < 32:
                x = self.cast(x, int32)
            elif dt in (float16, bfloat16):
                x = self.cast(x, float32)
        out_dt = int32 if kind in ("argmax", "argmin") else x.dtype
        shape = x.shape[:axis] + x.shape[axis + 1:]
        r = self.emit1("reduce", [x], TileType(out_dt, shape), {"kind": kind, "axis": axis})
        if keep_dims:
            r = self.expand_dims(r, axis)
        return r


# -------------------------------------------------------------------- kit.<name> calls
@call_rule(("sum", "max", "min"), lambda x, axis=None, keep_dims=False: None)
@call_rule(("argmax", "argmin"), lambda x, axis, keep_dims=False: None)
def _reduce(c: Call) -> Any:
    axis = c.const("axis")
    return c.b.reduce(c.name, c["x"], axis, bool(c.const("keep_dims")))
