"""Reductions along one axis: sum, max, min, argmax, argmin (the `reduce` op, one kind
each), and `kit.reduce` with a `@kit.jit` combine function (`reduce_combine`: the function
is inlined, on scalars, into the op's region), xor_sum and reduce_or.

Call rules: kit.sum, kit.max, kit.min, kit.argmax, kit.argmin, kit.reduce, kit.xor_sum,
kit.reduce_or.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kitjit.ir.core import Block, Value
from kitjit.ir.registry import family_of, typing_rule
from kitjit.ir.types import DType, TileType, bfloat16, float16, float32, int32, uint32

from .base import _describe, _shape
from .call_rules import Call, call_rule

# what a combine function's body may hold: computations on its scalar arguments
_COMBINE_FAMILIES = frozenset({"elementwise", "core"})


class ReductionOps:
    """Typing rules of the reduction family."""

    @typing_rule("reduce")
    def reduce(self, kind: str, x: Any, axis: Any, keep_dims: bool = False,
               dtype: DType | None = None, indices: bool = False) -> Value:
        """`kit.sum/max/min/argmax/argmin` with Triton 3.6's dtypes (`reduce_dtypes`);
        `indices`: the values of max/min(..., return_indices=True)."""
        if not isinstance(x, Value) or x.type.is_scalar:
            raise self.error(f"kit.{kind} needs a tile, got {_describe(x)}")
        if x.dtype.is_ptr():
            raise self.error(f"kit.{kind} does not apply to pointers")
        if axis is None and kind in ("argmax", "argmin"):
            raise self.error(f"kit.{kind} needs an axis")
        compute, back = reduce_dtypes(kind, x.dtype, dtype, indices)
        if compute is not x.dtype:
            x = self.cast(x, compute)
        if axis is None:
            r = x
            while not r.type.is_scalar:
                r = self._reduce1(kind, r, len(r.shape) - 1)
        else:
            axis = self.reduction_axis(x, axis)
            r = self._reduce1(kind, x, axis)
        if back is not None:  # rounded once, after a wider accumulation
            r = self.cast(r, back)
        if keep_dims and axis is not None:
            r = self.expand_dims(r, axis)
        return r

    def _reduce1(self, kind: str, x: Value, axis: int) -> Value:
        out_dt = int32 if kind in ("argmax", "argmin") else x.dtype
        shape = x.shape[:axis] + x.shape[axis + 1:]
        return self.emit1("reduce", [x], TileType(out_dt, shape), {"kind": kind, "axis": axis})

    def reduction_axis(self, x: Value, axis: Any) -> int:
        """`axis` checked against `x`'s rank, made non-negative."""
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise self.error("a reduction axis must be a constexpr int")
        rank = len(x.shape)
        if not -rank <= axis < rank:
            raise self.error(f"axis {axis} is out of range for a {rank}-d tile of shape "
                             f"{_shape(x.shape)}", f"use an axis in [{-rank}, {rank - 1}]")
        return axis % rank

    def combine_inputs(self, what: str, xs: Any) -> tuple[list[Value], bool]:
        """The tiles a combine op works on (a tile or a tuple of tiles of one shape), and
        whether they came as a tuple."""
        multi = isinstance(xs, (tuple, list))
        vs = list(xs) if multi else [xs]
        if not vs:
            raise self.error(f"{what} needs at least one tile")
        for v in vs:
            if not isinstance(v, Value) or v.type.is_scalar or v.type.is_shared:
                raise self.error(f"{what} needs tiles, got {_describe(v)}")
            if v.dtype.is_ptr():
                raise self.error(f"{what} does not apply to pointers")
            if v.shape != vs[0].shape:
                raise self.error(f"{what}: the tiles of a tuple must have one shape, got "
                                 f"{_shape(vs[0].shape)} and {_shape(v.shape)}",
                                 "broadcast them first (kit.broadcast_to)")
        return vs, multi

    def combine_region(self, what: str, dtypes: list[DType],
                       body: Callable[[list[Value]], Any]) -> Block:
        """The region of a combine op: 2N scalar arguments (the left group, then the right)
        and the yield of `body(args)`'s N scalars, which must keep the inputs' dtypes."""
        blk = Block()
        args = [blk.add_arg(TileType(dt), f"{side}{i}") for side in "lr"
                for i, dt in enumerate(dtypes)]
        self.blocks.append(blk)
        try:
            r = body(args)
            rs = list(r) if isinstance(r, (tuple, list)) else [r]
            if len(rs) != len(dtypes):
                raise self.error(f"{what}: combine_fn returns {len(rs)} value(s) for "
                                 f"{len(dtypes)} input(s)",
                                 "return one value per input tile, as a tuple")
            ys = []
            for k, (v, dt) in enumerate(zip(rs, dtypes)):
                v = self.to_value(v, args[k]) if not isinstance(v, Value) else v
                if not v.type.is_scalar:
                    raise self.error(f"{what}: combine_fn returns {_describe(v)}; it combines "
                                     "scalars")
                if v.dtype is not dt:
                    name = (dt.aliases or (dt.name,))[0]
                    raise self.error(f"{what}: combine_fn returns {v.dtype} for input {k} of "
                                     f"dtype {dt}", f"convert it with .to(kit.{name}) or "
                                     "convert the input first")
                ys.append(v)
            self.emit("yield", ys, [])
        finally:
            self.blocks.pop()
        for op in blk.ops:
            if op.name != "yield" and (family_of(op.name) not in _COMBINE_FAMILIES or
                                       op.name in ("program_id", "num_programs", "arange")):
                raise _not_allowed(self, op, what)
        return blk

    @typing_rule("reduce_combine")
    def reduce_combine(self, xs: list[Value], axis: Any, region: Callable[[], Block],
                       keep_dims: bool = False) -> list[Value]:
        """`kit.reduce`: `region()` builds a fresh combine region (one per reduced axis)."""
        if axis is None:
            vs = xs
            while not vs[0].type.is_scalar:
                vs = self.reduce_combine(vs, len(vs[0].shape) - 1, region)
            return vs
        axis = self.reduction_axis(xs[0], axis)
        shape = xs[0].shape[:axis] + xs[0].shape[axis + 1:]
        op = self.emit("reduce_combine", list(xs), [TileType(x.dtype, shape) for x in xs],
                       {"axis": axis}, [region()])
        rs = list(op.results)
        if keep_dims:
            rs = [self.expand_dims(r, axis) for r in rs]
        return rs


def _not_allowed(b: Any, op: Any, what: str) -> Exception:
    b.loc = op.loc or b.loc
    return b.error(f"{what}: combine_fn may only compute on its scalar arguments "
                   f"('{op.name}' is not allowed there)",
                   "use kit.where instead of branches; no loads, loops or tiles")


def _jit_region(c: Call, what: str, fn: Any, dtypes: list[DType]) -> Callable[[], Block]:
    from kitjit.jit import JITFunction

    if not isinstance(fn, JITFunction):
        raise c.err(f"{what}: combine_fn must be a @kit.jit function, got {_describe(fn)}")

    def make() -> Block:
        return c.b.combine_region(what, dtypes,
                                  lambda args: c.cg.inline(fn, list(args), {}, c.node))
    return make


def _binary_region(c: Call, what: str, name: str, dt: DType) -> Callable[[], Block]:
    return lambda: c.b.combine_region(what, [dt], lambda a: c.b.binary(name, a[0], a[1]))


def reduce_dtypes(kind: str, dt: DType, dtype: DType | None = None,
                  indices: bool = False) -> tuple[DType, DType | None]:
    """(the dtype a reduction computes in, the dtype its result is rounded to or None).

    Result dtypes are Triton 3.6's (python/triton/language/standard.py):
      - sum: `dtype` if given; else signed ints narrower than 32 bits give int32, unsigned
        ones and bool uint32, floats keep their dtype. Triton adds fp16/bf16/fp8 in that
        dtype; kitjit accumulates them in fp32 and rounds the sum once (closer to the exact
        sum; interpreter and GPU agree up to that one rounding).
      - max/min: floats narrower than 32 bits (fp16, bf16, fp8) give fp32, ints narrower
        than 32 bits (bool and unsigned too) int32. With return_indices=True (`indices`)
        the values keep their dtype but bf16 (fp32), as Triton's.
      - argmax/argmin: int32 indices (fp8 values are compared in fp32, exactly)."""
    if kind == "sum":
        out = dtype
        if out is None:
            if dt.is_bool() or dt.is_int_unsigned() and dt.bits < 32:
                out = uint32
            elif dt.is_int() and dt.bits < 32:
                out = int32
            else:
                out = dt
        if out.is_floating() and out.bits < 32:
            return float32, out
        return out, None
    if kind in ("max", "min"):
        if dt is bfloat16:
            return float32, None
        if indices:
            return (float32, dt) if dt.is_fp8() or dt is float16 else (dt, None)
        if dt.is_floating() and dt.bits < 32:
            return float32, None
        if (dt.is_int() or dt.is_bool()) and dt.bits < 32:
            return int32, None
        return dt, None
    return (float32 if dt.is_fp8() else dt), None  # argmax / argmin


# -------------------------------------------------------------------- kit.<name> calls
@call_rule("sum", lambda input, axis=None, keep_dims=False, dtype=None: None)
def _reduce(c: Call) -> Any:
    axis = c.const("axis")
    dt = c.const("dtype")
    if dt is not None and not isinstance(dt, DType):
        raise c.err(f"kit.sum: dtype must be a kit dtype, got {_describe(dt)}")
    return c.b.reduce(c.name, c["input"], axis, bool(c.const("keep_dims")), dt)


@call_rule(("max", "min"), lambda input, axis=None, return_indices=False,
           return_indices_tie_break_left=True, keep_dims=False: None)
def _max_min(c: Call) -> Any:
    axis, keep = c.const("axis"), bool(c.const("keep_dims"))
    c.const("return_indices_tie_break_left")
    if not c.const("return_indices"):
        return c.b.reduce(c.name, c["input"], axis, keep)
    if axis is None:
        raise c.err(f"kit.{c.name}(..., return_indices=True) needs an axis")
    x = c["input"]
    if isinstance(x, Value) and x.dtype is bfloat16:  # as Triton
        x = c.b.cast(x, float32)
    idx = c.b.reduce("arg" + c.name, x, axis, keep)
    if not (isinstance(x, Value) and x.dtype.is_floating()):
        return c.b.reduce(c.name, x, axis, keep, indices=True), idx
    return _value_at(c.b, x, idx, axis, keep), idx


def _value_at(b: Any, x: Value, idx: Value, axis: int, keep: bool) -> Value:
    """x[..., idx, ...] along `axis`: the value of a float max/min with indices, so that the
    pair agrees where the row holds NaN (argmax's first NaN: the value is NaN, as torch.max's)
    or both zeros (-0.0 vs +0.0 tie: the first's sign). A sum of the selected element and
    -0.0 elsewhere, exact in any order (x + -0.0 is x, -0.0 included)."""
    axis = b.reduction_axis(x, axis)
    iota = b.arange(0, x.shape[axis])
    for i in range(len(x.shape)):
        if i != axis:
            iota = b.expand_dims(iota, i)
    at = idx if keep else b.expand_dims(idx, axis)
    picked = b.where(b.compare("eq", iota, at), x, -0.0)
    return b.reduce("sum", picked, axis, keep, dtype=x.dtype)


@call_rule(("argmax", "argmin"), lambda input, axis, tie_break_left=True, keep_dims=False:
           None)
def _argmax(c: Call) -> Any:
    c.const("tie_break_left")  # kitjit always breaks ties to the left (Triton: any index)
    return c.b.reduce(c.name, c["input"], c.const("axis"), bool(c.const("keep_dims")))


@call_rule("reduce", lambda input, axis, combine_fn, keep_dims=False: None)
def _reduce_fn(c: Call) -> Any:
    xs, multi = c.b.combine_inputs("kit.reduce", c["input"])
    region = _jit_region(c, "kit.reduce", c["combine_fn"], [x.dtype for x in xs])
    rs = c.b.reduce_combine(xs, c.const("axis"), region, bool(c.const("keep_dims")))
    return tuple(rs) if multi else rs[0]


@call_rule(("xor_sum", "reduce_or"), lambda input, axis=None, keep_dims=False: None)
def _bitwise(c: Call) -> Any:
    what = f"kit.{c.name}"
    xs, multi = c.b.combine_inputs(what, c["input"])
    if multi or not xs[0].dtype.is_int() and not xs[0].dtype.is_bool():
        raise c.err(f"{what} needs an integer tile, got {_describe(c['input'])}")
    # (a bool tile reduces in int1, as Triton's: xor_sum is the parity, reduce_or any)
    if c.name == "reduce_or" and c["axis"] is None:
        raise c.err("kit.reduce_or needs an axis (as Triton's)")
    region = _binary_region(c, what, "xor" if c.name == "xor_sum" else "or", xs[0].dtype)
    return c.b.reduce_combine(xs, c.const("axis"), region, bool(c.const("keep_dims")))[0]


@call_rule("item", lambda input: None)
def _item(c: Call) -> Any:
    """Triton's x.item(): a single-element tile as a scalar, by reducing its axes with a
    combine that returns the element unchanged (max of a float with itself, or of an
    integer), so the dtype stays."""
    x = c["input"]
    if not isinstance(x, Value):
        return x
    if x.type.is_scalar:
        return x
    if x.type.is_shared or x.dtype.is_ptr():
        raise c.err(f"x.item() needs a register tile of numbers, got {_describe(x)}")
    if x.type.numel != 1:
        raise c.err(f"x.item() needs a single-element tile, got {_describe(x)}",
                    "as Triton's: 'can only unsplat single-element tensors'")
    name = "maximum" if x.dtype.is_floating() else "or"
    return c.b.reduce_combine([x], None, _binary_region(c, "x.item()", name, x.dtype))[0]
