"""Shape ops: broadcasting (splat, broadcast) and new size-1 dims (expand_dims).

Call rules: kit.expand_dims, kit.broadcast_to.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Value
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import TileType

from .base import _shape
from .call_rules import Call, call_rule


class ShapeOps:
    """Typing rules of the shape family (convert_layout comes from the layout pass)."""

    def broadcast_shapes(self, a: tuple, b: tuple) -> tuple:
        ra, rb = len(a), len(b)
        a = (1,) * (rb - ra) + a if rb > ra else a
        b = (1,) * (ra - rb) + b if ra > rb else b
        out = []
        for x, y in zip(a, b):
            if x != y and x != 1 and y != 1:
                raise self.error(f"shapes {_shape(a)} and {_shape(b)} cannot broadcast",
                                 "each dim must match or be 1; use x[:, None] / x[None, :] "
                                 "to add a dim")
            out.append(max(x, y))
        self.check_numel(tuple(out), "broadcasting")
        return tuple(out)

    @typing_rule("splat", "broadcast")
    def broadcast_to(self, v: Value, shape: tuple) -> Value:
        shape = tuple(shape)
        if v.shape == shape:
            return v
        if v.type.is_scalar:
            return self.emit1("splat", [v], TileType(v.dtype, shape))
        if len(v.shape) > len(shape):
            raise self.error(f"cannot broadcast shape {_shape(v.shape)} to {_shape(shape)}")
        while len(v.shape) < len(shape):
            v = self.expand_dims(v, 0)
        for x, y in zip(v.shape, shape):
            if x != y and x != 1:
                raise self.error(f"cannot broadcast shape {_shape(v.shape)} to {_shape(shape)}")
        if v.shape == shape:
            return v
        return self.emit1("broadcast", [v], TileType(v.dtype, shape))

    @typing_rule("expand_dims")
    def expand_dims(self, v: Value, axis: int) -> Value:
        if v.type.is_scalar:
            return self.emit1("splat", [v], TileType(v.dtype, (1,)))
        rank = len(v.shape) + 1
        if not -rank <= axis < rank:
            raise self.error(f"axis {axis} is out of range for a new dim of a "
                             f"{len(v.shape)}-d tile")
        axis %= rank
        shape = v.shape[:axis] + (1,) + v.shape[axis:]
        return self.emit1("expand_dims", [v], TileType(v.dtype, shape), {"axis": axis})


# -------------------------------------------------------------------- kit.<name> calls
@call_rule("expand_dims", lambda x, axis: None)
def _expand_dims(c: Call) -> Any:
    return c.b.expand_dims(c.b.to_value(c["x"]), c.const("axis"))


@call_rule("broadcast_to", lambda x, shape: None)
def _broadcast_to(c: Call) -> Any:
    shape = c.b.check_shape(c.const("shape"), "kit.broadcast_to")
    return c.b.broadcast_to(c.b.to_value(c["x"]), shape)
