"""The Builder's state and shared helpers, and the type rules every family uses.

`BuilderBase` appends ops to the current block (`emit` accepts only ops declared in
`kitjit.ir.ops`) and raises `CompileError` at the current source location. Type promotion
follows Triton: floats win over ints, the wider float wins, fp16 with bf16 is fp16; ints
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
    uint32,
    uint64,
)

from ..errors import CompileError

Number = (int, float, bool)
MAX_TILE_NUMEL = 1 << 20  # as Triton: every element is unrolled into registers


def is_row_blocks(n: int) -> bool:
    """A dim of 64-row blocks that is not a power of two (192: three warpgroups' rows of a
    kit.mma result). The layout pass accepts it only where each warpgroup holds one block
    (frontend/layout_pass.py `_three_groups`), and says so elsewhere."""
    return n > 0 and n % 64 == 0 and not is_pow2(n)


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
            if not is_pow2(s) and not is_row_blocks(s):
                raise self.error(f"{what}: every dim of a tile must be a power of two, "
                                 f"got shape {_shape(tuple(shape))}",
                                 "round the block size up to a power of two and mask the tail")
        self.check_numel(tuple(shape), what)
        return tuple(shape)


# -------------------------------------------------------------------- type rules
def literal_dtype(x: Any) -> DType | None:
    """The dtype Triton's `to_tensor` gives a Python number: bool int1; int int32, uint32
    (2**31 <= x < 2**32), int64 or uint64 (2**63 <= x < 2**64); float fp32 where fp32 holds
    it as a normal number (or 0, inf, NaN), else fp64."""
    if isinstance(x, bool):
        return int1
    if isinstance(x, int):
        if -(2 ** 31) <= x < 2 ** 31:
            return int32
        if 2 ** 31 <= x < 2 ** 32:
            return uint32
        return int64 if -(2 ** 63) <= x < 2 ** 63 else uint64
    if isinstance(x, float):
        ax = abs(x)
        if ax == 0.0 or ax == float("inf") or x != x or 2.0 ** -126 <= ax <= _FP32_MAX:
            return float32
        return float64
    return None


_FP32_MAX = (2 - 2 ** -23) * 2.0 ** 127


class TypedInt(int):
    """A Python int a kernel assigned to a name (`n = 3`, `acc = 0`). Triton's code
    generator turns such a value into a scalar tensor (`to_tensor`: int32, uint32, int64 or
    uint64), so next to a tile it promotes as a tensor, not as a literal (`x_i8 + n` is
    int32 there, `x_i8 + 3` int8). kitjit keeps its value known at compile time, so it still
    serves where a constant is wanted (kit.arange bounds, shapes), and types it as Triton
    does next to tiles (`typed_dtype`)."""

    kit_dtype: DType

    def __new__(cls, value: int, dtype: DType):
        obj = super().__new__(cls, value)
        obj.kit_dtype = dtype
        return obj


class TypedFloat(float):
    """A Python float a kernel assigned to a name: an fp32 (or fp64) scalar as in Triton
    (`eps = 1e-6; x_fp16 + eps` computes in fp32 there); see TypedInt."""

    kit_dtype: DType

    def __new__(cls, value: float, dtype: DType):
        obj = super().__new__(cls, value)
        obj.kit_dtype = dtype
        return obj


def typed_number(x: Any) -> Any:
    """`x` as Triton's assignment leaves it: an int or float becomes a TypedInt/TypedFloat
    of its `to_tensor` dtype (bools need no mark: a bool literal already takes the other
    side's dtype, as an int1 tensor would); anything else is returned as it is."""
    if isinstance(x, (TypedInt, TypedFloat)) or isinstance(x, bool):
        return x
    if isinstance(x, int):
        return TypedInt(x, literal_dtype(x))
    if isinstance(x, float):
        return TypedFloat(x, literal_dtype(x))
    return x


def typed_dtype(x: Any) -> DType | None:
    """The dtype of an assigned number (TypedInt/TypedFloat), None for a plain literal."""
    return getattr(x, "kit_dtype", None)


def weak_dtype(x: Any, other: DType | None) -> DType:
    """The dtype a Python literal takes next to a tile of dtype `other`: Triton 3.6's
    computation_type_impl for a scalar, where a number of the same or a lower kind (bool <
    int < float) takes the tile's dtype, and one of a higher kind (a float next to an int
    tile, an int next to a bool tile) is its `to_tensor` dtype and then promotes. An int out
    of the resulting int dtype's range is an error there (`check_literal_range`)."""
    if other is None or other.is_ptr():
        return literal_dtype(x)
    typed = typed_dtype(x)
    if typed is not None:
        return typed
    if isinstance(x, bool):
        return other
    if isinstance(x, int):
        return literal_dtype(x) if other.is_bool() else other
    if isinstance(x, float):
        return other if other.is_floating() else literal_dtype(x)
    return literal_dtype(x)


def literal_range_error(x: Any, dt: DType) -> str | None:
    """Triton's message when the literal `x` does not fit the int dtype `dt` the operation
    computes in, else None (it raises ValueError there; kitjit: a CompileError)."""
    if not isinstance(x, int) or isinstance(x, bool) or typed_dtype(x) is not None or \
            not dt.is_int():
        return None
    if x < 0 and dt.is_int_unsigned():
        return ("Cannot perform a binary operation between an unsigned tensor and a negative "
                "scalar. Perform a explicit cast on one of them.")
    lo, hi = int_range(dt)
    if not lo <= x <= hi:  # (str() of an int past 4300 digits raises: name its size)
        shown = x if x.bit_length() < 1024 else f"of {x.bit_length()} bits"
        return f"Scalar {shown} is out of range for type {dt}"
    return None


def int_range(dt: DType) -> tuple[int, int]:
    if dt.is_bool():
        return 0, 1
    if dt.is_int_unsigned():
        return 0, 2 ** dt.bits - 1
    return -(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1


def promote(a: DType, b: DType) -> DType | None:
    """The dtype two operands meet at, as Triton 3.6's computation_type_impl for two tiles:
    fp64 > fp32 > fp16 > bf16 (fp16 with bf16 is fp16; bf16 with an int or an fp8 is fp32),
    one fp8 type with itself stays that type, two different fp8 types give fp16, fp8 with
    a wider float that float (with an int: fp16, which Triton rejects). Division and `%`
    of fp16/bf16 then compute in fp32, and an integer tile with a bf16 tile meets at fp32
    (elementwise.py). Python literals take the tile's dtype first (weak_dtype); run-time
    scalars and assigned numbers promote as tiles do (Triton's "scalar" rule is for Python
    numbers only)."""
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
            return float16  # fp16 with bf16: Triton's rule 3 (fp16 wins) comes first
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
