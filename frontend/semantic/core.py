"""Core ops: constants, the program's grid position, arange and full.

Call rules: kit.program_id, kit.num_programs, kit.arange, kit.zeros, kit.full, and the
hints kit.multiple_of, kit.max_contiguous, kit.max_constancy, kit.assume.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Value
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import DType, TileType, float32, int32

from .base import (
    Number,
    _describe,
    int_range,
    is_pow2,
    is_row_blocks,
    literal_dtype,
    typed_dtype,
    weak_dtype,
)
from .call_rules import Call, call_rule


class CoreOps:
    """Typing rules of the core family."""

    @typing_rule("constant")
    def constant(self, value: Any, dtype: DType | None = None) -> Value:
        if not isinstance(value, Number):
            raise self.error(f"expected a number here, got {_describe(value)}")
        if isinstance(value, int) and not -(2 ** 64) < value < 2 ** 64:
            raise self.error("an integer constant this large fits no kernel dtype")
        if dtype is None:
            dtype = literal_dtype(value)
            if dtype is None:
                raise self.error(f"cannot use {value!r} as a value in a kernel")
        if dtype.is_fp8():  # fp8 has no constants in the IR: an fp32 one, converted
            return self.cast(self.constant(float(value), float32), dtype)
        if dtype.is_floating():
            value = float(value)
        elif dtype.is_bool():
            value = bool(value)
        else:
            value = int(value)
            lo, hi = int_range(dtype)
            if not lo <= value <= hi:
                raise self.error(f"the constant {value} does not fit in {dtype}")
        return self.emit1("constant", [], TileType(dtype), {"value": value})

    def to_value(self, x: Any, like: Value | None = None) -> Value:
        """A Python literal becomes a constant of `like`'s dtype where that fits (weak typing)."""
        if isinstance(x, Value):
            return x
        if not isinstance(x, Number):
            raise self.error(f"expected a tile or a number, got {_describe(x)}")
        dt = weak_dtype(x, like.dtype if like is not None else None)
        if typed_dtype(x) is None and isinstance(x, int) and not isinstance(x, bool) and \
                dt.is_int() and dt.is_int_signed() and -(2 ** 63) <= x < 2 ** 64 and \
                not int_range(dt)[0] <= x <= int_range(dt)[1]:
            # a literal out of a signed tile's range: wrapped (two's complement). Operators,
            # comparisons and kit.where refuse it first as Triton does (check_literal_fits);
            # what still arrives here (shape ops' and reductions' operands) keeps the wrap
            x = (x + 2 ** (dt.bits - 1)) % 2 ** dt.bits - 2 ** (dt.bits - 1)
        return self.constant(x, dt)

    @typing_rule("program_id", "num_programs")
    def program_id(self, name: str, axis: int) -> Value:
        """kit.program_id / kit.num_programs (`name`) along grid axis `axis` (0, 1 or 2)."""
        return self.emit1(name, [], TileType(int32), {"axis": axis})

    def full(self, shape: Any, value: Any, dtype: Any) -> Value:
        shape = self.check_shape(shape, "kit.full")
        if not isinstance(dtype, DType):
            raise self.error(f"expected a dtype such as kit.float32, got {_describe(dtype)}")
        v = self.cast(value, dtype) if isinstance(value, Value) else self.constant(value, dtype)
        if not v.type.is_scalar:
            raise self.error("kit.full needs a scalar fill value")
        return self.broadcast_to(v, shape)

    @typing_rule("arange")
    def arange(self, start: Any, end: Any) -> Value:
        if not isinstance(start, int) or not isinstance(end, int):
            raise self.error("kit.arange needs constexpr bounds",
                             "pass the block size as a kit.constexpr parameter")
        n = end - start
        if not is_pow2(n) and not is_row_blocks(n):
            raise self.error(f"kit.arange({start}, {end}) has {n} elements; tiles need a power "
                             "of two", "round the block up and mask the tail: "
                             "offs < n")
        self.check_numel((n,), f"kit.arange({start}, {end})")
        return self.emit1("arange", [], TileType(int32, (n,)), {"start": start, "end": end})


    @typing_rule("hint")
    def hint(self, x: Value, kind: str, values: tuple[int, ...]) -> Value:
        """`x`, with a fact the user promises about it (Triton's multiple_of, max_contiguous,
        max_constancy): one positive power of two per dim (one value for a scalar)."""
        n = max(1, len(x.shape))
        if len(values) != n:
            raise self.error(f"kit.{kind} needs {n} value(s) for {_describe(x)}, got "
                             f"{len(values)}")
        for v in values:
            if not is_pow2(v):
                raise self.error(f"kit.{kind}: {v!r} is not a positive power of two")
        if not x.dtype.is_int() and not x.dtype.is_ptr():
            raise self.error(f"kit.{kind} needs integers or pointers, got {_describe(x)}")
        return self.emit1("hint", [x], x.type, {"kind": kind, "values": tuple(values)})

    @typing_rule("assume")
    def assume(self, cond: Value) -> None:
        """A scalar condition the user promises holds (`llvm.assume` on the GPU)."""
        if not cond.type.is_scalar:
            raise self.error(f"kit.assume needs a scalar condition, got {_describe(cond)}")
        if not cond.dtype.is_bool():
            cond = self.compare("ne", cond, 0)
        self.emit("assume", [cond], [])


# -------------------------------------------------------------------- kit.<name> calls
@call_rule(("program_id", "num_programs"), lambda axis=0: None)
def _program_id(c: Call) -> Any:
    axis = c.const("axis")
    if axis not in (0, 1, 2):
        raise c.err(f"kit.{c.name}: axis must be 0, 1 or 2, got {axis!r}")
    return c.b.program_id(c.name, axis)


@call_rule("arange", lambda start, end: None)
def _arange(c: Call) -> Any:
    return c.b.arange(c.const("start"), c.const("end"))


@call_rule("zeros", lambda shape, dtype=float32: None)
def _zeros(c: Call) -> Any:
    return c.b.full(c.const("shape"), 0, c.const("dtype"))


@call_rule("full", lambda shape, value, dtype: None)
def _full(c: Call) -> Any:
    return c.b.full(c.const("shape"), c["value"], c.const("dtype"))


def _hint_rule(c: Call) -> Any:
    x, values = c["input"], c.const("values")
    values = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    if not isinstance(x, Value):
        return x  # a compile-time number: nothing to promise
    return c.b.hint(x, c.name, values)


for _name in ("multiple_of", "max_contiguous", "max_constancy"):
    call_rule(_name, lambda input, values: None)(_hint_rule)


@call_rule("assume", lambda cond: None)
def _assume(c: Call) -> Any:
    cond = c["cond"]
    if not isinstance(cond, Value):
        if not cond:
            raise c.err("kit.assume: the condition is false at compile time")
        return None
    return c.b.assume(cond)
