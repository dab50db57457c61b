"""The Builder's state and shared helpers, and the type rules every family uses.

`BuilderBase` appends ops to the current block (`emit` accepts only ops declared in
`kitjit.ir.ops`) and raises `CompileError` at the current source location. Type promotion
follows Triton: floats win over ints, the wider float wins, fp16 with bf16 meets at fp32; ints
of one signedness take the wider; Python literals are weak and take the tile's type.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Block, Function, Loc, Op, Value
from kitjit.ir.registry import OPS
from kitjit.ir.types import (
    DType,
    PointerDType,
    TileType,
    bfloat16,
    float16,
    float32,
    float64,
    int1,
    int32,
    int64,
)

from ..errors import CompileError

Number = (int, float, bool)
MAX_TILE_NUMEL = 1 << 20  # as Triton: every element is unrolled into registers


def is_pow2(n: int) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


class BuilderBase:
    """The Builder's state (the function, the block stack, the source location, the current
    warp role) and what every family's rules share: errors, op emission, shape checks."""

    def __init__(self, fn: Function):
        self.fn = fn
        self.blocks: list[Block] = [fn.body]
        self.loc: Loc | None = None
        self.warps: int = fn.attrs["num_warps"]  # of the current role (`if` on warpgroup_id)
        self.role: tuple[int, int] = (0, max(1, self.warps // 4))  # (first warpgroup, count)

    # ---------------------------------------------------------------- plumbing
    @property
    def block(self) -> Block:
        return self.blocks[-1]

    def error(self, msg: str, hint: str | None = None) -> CompileError:
        return CompileError(msg, self.loc, hint)

    def emit(self, name: str, operands: list[Value], result_types: list[TileType],
             attrs: dict | None = None, regions: list[Block] | None = None) -> Op:
        if name not in OPS:
            raise self.error(f"internal: op '{name}' is not declared in kitjit/ir/ops.py")
        results = [Value(t) for t in result_types]
        op = Op(name, list(operands), results, dict(attrs or {}), list(regions or []), self.loc)
        self.block.append(op)
        return op

    def emit1(self, name, operands, rtype, attrs=None) -> Value:
        return self.emit(name, operands, [rtype], attrs).result

    # ---------------------------------------------------------------- shape checks
    def check_numel(self, shape: tuple, what: str) -> None:
        n = 1
        for s in shape:
            n *= s
        if n > MAX_TILE_NUMEL:
            raise self.error(f"{what}: a tile of {n} elements is over kitjit's limit of "
                             f"{MAX_TILE_NUMEL}", "split the work over more programs")

    def check_shape(self, shape: Any, what: str) -> tuple[int, ...]:
        if isinstance(shape, int):
            shape = (shape,)
        if not isinstance(shape, (tuple, list)) or not all(isinstance(s, int) for s in shape):
            raise self.error(f"{what} needs a shape of constexpr ints, got {_describe(shape)}",
                             "shapes must be known at compile time: pass sizes as "
                             "kit.constexpr parameters")
        for s in shape:
            if not is_pow2(s):
                raise self.error(f"{what}: every dim of a tile must be a power of two, "
                                 f"got shape {_shape(tuple(shape))}",
                                 "round the block size up to a power of two and mask the tail")
        self.check_numel(tuple(shape), what)
        return tuple(shape)


# -------------------------------------------------------------------- type rules
def literal_dtype(x: Any) -> DType | None:
    if isinstance(x, bool):
        return int1
    if isinstance(x, int):
        return int32 if -(2 ** 31) <= x < 2 ** 31 else int64
    if isinstance(x, float):
        return float32
    return None


def weak_dtype(x: Any, other: DType | None) -> DType:
    """The dtype a Python literal takes next to a tile of dtype `other`."""
    if other is None or other.is_ptr():
        return literal_dtype(x)
    if isinstance(x, bool):
        return other if not other.is_floating() else other
    if isinstance(x, int):
        if other.is_bool():
            return literal_dtype(x)
        if other.is_int():
            # next to a signed int tile a Python int takes the tile's dtype whatever its
            # value, wrapped to it (to_value): Triton 3.6's computation_type_impl, where an
            # int scalar (of kind uint or int) never outranks an int tile, and whose
            # constants truncate (x_i32 * 2654435761 wraps in 32 bits there, so here too).
            # Not Triton's yet next to unsigned tiles: a literal in range keeps the tile's
            # dtype (Triton: uint8 + 5 is int32), else it is int32/int64 and promotes
            if other.is_int_signed():
                return other
            lo, hi = int_range(other)
            return other if lo <= x <= hi else literal_dtype(x)
        return other
    if isinstance(x, float):
        return other if other.is_floating() else float32
    return literal_dtype(x)


def int_range(dt: DType) -> tuple[int, int]:
    if dt.is_bool():
        return 0, 1
    if dt.is_int_unsigned():
        return 0, 2 ** dt.bits - 1
    return -(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1


def promote(a: DType, b: DType) -> DType | None:
    """The dtype two operands meet at, as Triton 3.6's computation_type_impl for two tiles:
    fp64 > fp32 > fp16 > bf16 (bf16 only with bf16: with fp16, an int or an fp8 it is fp32),
    one fp8 type with itself stays that type, two different fp8 types give fp16, fp8 with
    a wider float that float (with an int: fp16, which Triton rejects). Division and `%`
    of fp16/bf16 then compute in fp32, and an integer tile with a bf16 tile meets at fp32
    (elementwise.py, which sees shapes). Python literals take the tile's dtype first
    (weak_dtype). Not Triton's yet: its rule for a scalar next to a tile (a scalar of the
    same or a lower kind takes the tile's dtype: fp16 tile * fp32 scalar is fp16 there,
    fp32 here)."""
    if a.is_fp8() or b.is_fp8():
        if a.is_ptr() or b.is_ptr():
            return None
        if a is b:
            return a
        other = b if a.is_fp8() else a
        if other is bfloat16:
            return float32
        return other if other.is_floating() and not other.is_fp8() else float16
    if a is b:
        return a
    if a.is_ptr() or b.is_ptr():
        return None
    if a.is_floating() or b.is_floating():
        if a.is_floating() and b.is_floating():
            if float64 in (a, b):
                return float64
            if float32 in (a, b):
                return float32
            return float32  # fp16 with bf16
        return a if a.is_floating() else b
    if a.is_bool():
        return b
    if b.is_bool():
        return a
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    u, s = (a, b) if a.is_int_unsigned() else (b, a)
    return u if u.bits >= s.bits else s


def _shape(s: tuple) -> str:
    return "[" + ", ".join(str(x) for x in s) + "]"


def _describe(x: Any) -> str:
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) > 10 ** 30:
        return "a very large integer"
    if isinstance(x, Value):
        art = "an" if x.dtype.name[0] in "aeiou" else "a"
        if x.type.is_scalar:
            return f"{art} {x.dtype} scalar"
        if x.type.is_shared:
            return f"{art} {x.dtype} shared tile of shape {_shape(x.shape)}"
        return f"{art} {x.dtype} tile of shape {_shape(x.shape)}"
    if isinstance(x, PointerDType):
        return f"the pointer type {x}"
    if isinstance(x, (tuple, list)) and any(isinstance(e, Value) for e in x):
        inner = ", ".join(_describe(e) if isinstance(e, Value) else repr(e) for e in x)
        return f"{type(x).__name__} ({inner})"
    return f"{type(x).__name__} {x!r}"


describe = _describe
shape_str = _shape
