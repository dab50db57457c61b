"""Shape ops: broadcasting (splat, broadcast), new size-1 dims (expand_dims), and the ops
that move elements: permute, reshape, join, split, cat, flip, gather.

Call rules: kit.expand_dims, kit.broadcast_to, kit.broadcast, kit.permute, kit.trans,
kit.reshape, kit.view, kit.ravel, kit.squeeze, kit.unsqueeze, kit.join, kit.split,
kit.interleave, kit.cat, kit.flip, kit.gather (and the tile methods of the same names,
frontend/codegen/expressions.py).
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Value
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import TileType

from .base import _describe, _shape
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

    # ------------------------------------------------------------ ops that move elements
    def register_tile(self, v: Value, what: str) -> Value:
        if not isinstance(v, Value) or v.type.is_scalar or v.type.is_shared:
            raise self.error(f"{what} needs a register tile, got {_describe(v)}")
        return v

    def _axis(self, axis: Any, rank: int, what: str) -> int:
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise self.error(f"{what}: the axis must be a constexpr int, got {_describe(axis)}")
        if not -rank <= axis < rank:
            raise self.error(f"{what}: axis {axis} is out of range for a {rank}-d tile",
                             f"use an axis in [{-rank}, {rank - 1}]")
        return axis % rank

    @typing_rule("permute")
    def permute(self, v: Value, dims: tuple, what: str = "kit.permute") -> Value:
        self.register_tile(v, what)
        dims = tuple(dims)
        rank = len(v.shape)
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims) or \
                sorted(d % rank if -rank <= d < rank else d for d in dims) != list(range(rank)):
            raise self.error(f"{what}: dims {list(dims)} are not a permutation of the "
                             f"{rank} dims of a tile of shape {_shape(v.shape)}",
                             f"give each of 0..{rank - 1} once, e.g. "
                             f"{tuple(range(rank - 1, -1, -1))}")
        dims = tuple(d % rank for d in dims)
        if dims == tuple(range(rank)):
            return v
        shape = tuple(v.shape[d] for d in dims)
        return self.emit1("permute", [v], TileType(v.dtype, shape), {"dims": dims})

    @typing_rule("reshape")
    def reshape(self, v: Value, shape: tuple, what: str = "kit.reshape") -> Value:
        shape = self.check_shape(tuple(shape), what)
        if isinstance(v, Value) and v.type.is_scalar:
            n = 1
            for s in shape:
                n *= s
            if n != 1:
                raise self.error(f"{what}: a scalar has 1 element, shape {_shape(shape)} has {n}")
            return self.emit1("splat", [v], TileType(v.dtype, shape))
        self.register_tile(v, what)
        if v.type.numel != TileType(v.dtype, shape).numel:
            raise self.error(f"{what}: a tile of shape {_shape(v.shape)} has "
                             f"{v.type.numel} elements, shape {_shape(shape)} has "
                             f"{TileType(v.dtype, shape).numel}",
                             "the new shape must hold the same number of elements")
        if shape == v.shape:
            return v
        return self.emit1("reshape", [v], TileType(v.dtype, shape))

    @typing_rule("join")
    def join(self, a: Any, b: Any) -> Value:
        if not isinstance(a, Value) and not isinstance(b, Value):
            a = self.to_value(a)
        a = self.to_value(a, b if isinstance(b, Value) else None)
        b = self.to_value(b, a)
        if a.type.is_shared or b.type.is_shared:
            raise self.error("kit.join needs register tiles or scalars, got "
                             f"{_describe(a if a.type.is_shared else b)}")
        if a.dtype is not b.dtype:
            raise self.error(f"kit.join: the two inputs have dtypes {a.dtype} and {b.dtype}",
                             "convert one with .to(...) so both have one dtype")
        if a.type.is_scalar and b.type.is_scalar:  # two scalars: a tile of shape [2]
            j = self.join(self.expand_dims(a, 0), self.expand_dims(b, 0))
            return self.reshape(j, (2,), "kit.join")
        shape = self.broadcast_shapes(a.shape, b.shape)
        a, b = self.broadcast_to(a, shape), self.broadcast_to(b, shape)
        self.check_numel(shape + (2,), "kit.join")
        return self.emit1("join", [a, b], TileType(a.dtype, shape + (2,)))

    @typing_rule("split")
    def split(self, v: Value) -> tuple[Value, Value]:
        self.register_tile(v, "kit.split")
        if v.shape[-1] != 2:
            raise self.error(f"kit.split splits a last dim of size 2, got a tile of shape "
                             f"{_shape(v.shape)}", "reshape first, e.g. "
                             "x.reshape(..., n // 2, 2), or split with kit.split(kit."
                             "permute(...)) to split another dim")
        if len(v.shape) == 1:
            raise self.error("kit.split of a tile of shape [2] into two scalars is not "
                             "supported yet", "split a tile of shape [1, 2] into two of "
                             "shape [1], e.g. kit.split(x[None, :])")
        t = TileType(v.dtype, v.shape[:-1])
        op = self.emit("split", [v], [t, t])
        return op.results[0], op.results[1]

    @typing_rule("cat")
    def cat(self, a: Value, b: Value) -> Value:
        self.register_tile(a, "kit.cat")
        self.register_tile(b, "kit.cat")
        if a.shape != b.shape or a.dtype is not b.dtype:
            raise self.error(f"kit.cat needs two tiles of one shape and dtype, got "
                             f"{_describe(a)} and {_describe(b)}",
                             "the result's dim 0 must stay a power of two; cast with .to()")
        shape = (2 * a.shape[0],) + a.shape[1:]
        self.check_numel(shape, "kit.cat")
        return self.emit1("cat", [a, b], TileType(a.dtype, shape))

    @typing_rule("flip")
    def flip(self, v: Value, dim: Any) -> Value:
        self.register_tile(v, "kit.flip")
        dim = len(v.shape) - 1 if dim is None else self._axis(dim, len(v.shape), "kit.flip")
        if v.shape[dim] == 1:
            return v
        return self.emit1("flip", [v], TileType(v.dtype, v.shape), {"dim": dim})

    @typing_rule("gather")
    def gather(self, src: Value, index: Value, axis: Any) -> Value:
        self.register_tile(src, "kit.gather")
        self.register_tile(index, "kit.gather's index")
        if not index.dtype.is_int() or index.dtype.is_bool():
            raise self.error(f"kit.gather: the index must be an integer tile, got "
                             f"{_describe(index)}")
        rank = len(src.shape)
        axis = self._axis(axis, rank, "kit.gather")
        if len(index.shape) != rank or any(
                index.shape[d] != src.shape[d] for d in range(rank) if d != axis):
            raise self.error(f"kit.gather: the index (shape {_shape(index.shape)}) must have "
                             f"src's rank and src's dims (shape {_shape(src.shape)}) except "
                             f"along axis {axis}")
        return self.emit1("gather", [src, index], TileType(src.dtype, index.shape),
                          {"axis": axis})


# -------------------------------------------------------------------- kit.<name> calls
def _ints(c: Call, key: str) -> tuple:
    """A `*shape`/`*dims` argument given as separate ints or as one tuple (as Triton)."""
    v = c[key]
    if len(v) == 1 and isinstance(v[0], (tuple, list)):
        v = tuple(v[0])
    for x in v:
        if isinstance(x, Value):
            raise c.err(f"kit.{c.name}: '{key}' must be constexpr ints, got {_describe(x)}",
                        "pass it as a kit.constexpr parameter")
    return tuple(v)


@call_rule("expand_dims", lambda input, axis: None)
def _expand_dims(c: Call) -> Any:
    axis = c.const("axis")
    x = c.b.to_value(c["input"])
    if not isinstance(axis, (tuple, list)):
        return c.b.expand_dims(x, axis)
    rank = len(x.shape) + len(axis)  # indices into the result, as Triton
    axes = []
    for a in axis:
        if not isinstance(a, int) or not -rank <= a < rank:
            raise c.err(f"kit.expand_dims: axis {a!r} is out of range for a new dim of a "
                        f"{rank}-d result")
        axes.append(a % rank)
    if len(set(axes)) != len(axes):
        raise c.err(f"kit.expand_dims: duplicate axes {list(axis)}")
    for a in sorted(axes):
        x = c.b.expand_dims(x, a)
    return x


@call_rule("broadcast_to", lambda input, *shape: None)
def _broadcast_to(c: Call) -> Any:
    shape = c.b.check_shape(_ints(c, "shape"), "kit.broadcast_to")
    return c.b.broadcast_to(c.b.to_value(c["input"]), shape)


@call_rule("broadcast", lambda input, other: None)
def _broadcast(c: Call) -> Any:
    a, b = c["input"], c["other"]
    a = c.b.to_value(a, b if isinstance(b, Value) else None)
    b = c.b.to_value(b, a)
    shape = c.b.broadcast_shapes(a.shape, b.shape)
    return c.b.broadcast_to(a, shape), c.b.broadcast_to(b, shape)


@call_rule("permute", lambda input, *dims: None)
def _permute(c: Call) -> Any:
    return c.b.permute(c["input"], _ints(c, "dims"))


@call_rule("trans", lambda input, *dims: None)
def _trans(c: Call) -> Any:
    dims = _ints(c, "dims") or (1, 0)  # Triton: no dims is the (1, 0) permutation
    return c.b.permute(c["input"], dims, "kit.trans")


@call_rule("reshape", lambda input, *shape, can_reorder=False: None)
def _reshape(c: Call) -> Any:
    c.const("can_reorder")  # kitjit keeps row-major order either way
    return c.b.reshape(c.b.to_value(c["input"]), _ints(c, "shape"))


@call_rule("view", lambda input, *shape: None)
def _view(c: Call) -> Any:
    return c.b.reshape(c.b.to_value(c["input"]), _ints(c, "shape"), "kit.view")


@call_rule("ravel", lambda x, can_reorder=False: None)
def _ravel(c: Call) -> Any:
    c.const("can_reorder")
    x = c.b.register_tile(c["x"], "kit.ravel")
    return c.b.reshape(x, (x.type.numel,), "kit.ravel")


@call_rule("squeeze", lambda x, dim: None)
def _squeeze(c: Call) -> Any:
    x = c.b.register_tile(c["x"], "kit.squeeze")
    d = c.b._axis(c.const("dim"), len(x.shape), "kit.squeeze")
    if x.shape[d] != 1:
        raise c.err(f"kit.squeeze: dim {d} of a tile of shape {_shape(x.shape)} has size "
                    f"{x.shape[d]}, not 1")
    return c.b.reshape(x, x.shape[:d] + x.shape[d + 1:], "kit.squeeze")


@call_rule("unsqueeze", lambda x, dim: None)
def _unsqueeze(c: Call) -> Any:
    x = c.b.register_tile(c["x"], "kit.unsqueeze")
    d = c.const("dim")
    if not isinstance(d, int) or not 0 <= d <= len(x.shape):  # Triton: no negative dims
        raise c.err(f"kit.unsqueeze: dim {d!r} is out of range for a tile of shape "
                    f"{_shape(x.shape)}", f"use a dim in [0, {len(x.shape)}]")
    return c.b.reshape(x, x.shape[:d] + (1,) + x.shape[d:], "kit.unsqueeze")


@call_rule("join", lambda a, b: None)
def _join(c: Call) -> Any:
    return c.b.join(c["a"], c["b"])


@call_rule("split", lambda a: None)
def _split(c: Call) -> Any:
    return c.b.split(c["a"])


@call_rule("interleave", lambda a, b: None)
def _interleave(c: Call) -> Any:
    j = c.b.join(c["a"], c["b"])
    if len(j.shape) == 1:  # two scalars
        return j
    return c.b.reshape(j, j.shape[:-2] + (2 * j.shape[-2],), "kit.interleave")


@call_rule("cat", lambda input, other, can_reorder=False: None)
def _cat(c: Call) -> Any:
    c.const("can_reorder")  # kitjit keeps the order either way
    return c.b.cat(c["input"], c["other"])


@call_rule("flip", lambda x, dim=None: None)
def _flip(c: Call) -> Any:
    return c.b.flip(c["x"], c.const("dim"))


@call_rule("gather", lambda src, index, axis: None)
def _gather(c: Call) -> Any:
    return c.b.gather(c["src"], c["index"], c.const("axis"))
