"""Triton's type classes (`triton.language.core`'s base_type, base_value, block_type,
constexpr_type, tuple_type, slice_type, slice, void, pi32_t) for the code that touches them:
`isinstance` checks and annotations in host helpers and kernels, `x.type` of a tile in a
kernel (a `block_type`, or the dtype of a scalar, as Triton's), and `tl.pi32_t` as a
pointer dtype. kitjit's own IR types (kitjit/ir/types.py) stay what the compiler uses;
these are the Triton-shaped views of them."""

from __future__ import annotations

import math
from typing import Any

from ..ir.types import DType, PointerDType, int32


class _TypeMeta(type):
    """`isinstance(kit.float32, kit.base_type)` holds: kitjit's dtypes are types too."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if cls is base_type and isinstance(obj, DType):
            return True
        return super().__instancecheck__(obj)


class base_type(metaclass=_TypeMeta):
    """The base of Triton's types: dtypes, block types, tuple types, constexpr types."""

    def __ne__(self, other: Any) -> bool:
        return not self == other


class base_value:
    """The base of Triton's kernel values. In a kernel every value is one (tiles, scalars,
    descriptors, block pointers, compile-time values: Triton wraps those as constexpr, a
    base_value too), so `isinstance(x, kit.base_value)` is True there."""


class constexpr_type(base_type):
    """The type of a compile-time value (Triton's `constexpr_type(value)`)."""

    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, constexpr_type) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"constexpr_type[{self.value}]"


class block_type(base_type):
    """A tile's type: element dtype and shape (Triton's `block_type(element_ty, shape)`);
    `x.type` of a tile in a kernel. A 0-d block is refused, as in Triton (a scalar's type
    is its dtype)."""

    def __init__(self, element_ty: DType, shape: Any):
        if not isinstance(shape, (list, tuple)):
            raise TypeError(f"block_type takes a list or tuple shape, got {shape!r}")
        self.element_ty = element_ty
        self.shape = tuple(getattr(d, "value", d) for d in shape)
        if not self.shape:
            raise TypeError("0d block_type is forbidden")
        self.numel = validate_block_shape(self.shape)
        self.name = f"<{self.shape}, {element_ty}>"

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, block_type) and self.element_ty == other.element_ty \
            and self.shape == other.shape

    def __hash__(self) -> int:
        return hash((self.element_ty.name, self.shape))

    def is_block(self) -> bool:
        return True

    def is_ptr(self) -> bool:
        return False

    @property
    def scalar(self) -> DType:
        return self.element_ty

    def get_block_shapes(self) -> tuple:
        return self.shape

    def with_element_ty(self, scalar_ty: DType) -> block_type:
        return block_type(scalar_ty, self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * (self.element_ty.primitive_bitwidth // 8)


class tuple_type(base_type):
    """The type of a tuple of kernel values (Triton's `tuple_type(types, fields)`)."""

    def __init__(self, types: Any, fields: Any = None):
        self.types = list(types)
        self.fields = list(fields or [""] * len(self.types))
        self.name = "[" + ",".join(f"{k}:{v}" for k, v in zip(self.fields, self.types)) + "]"

    def __repr__(self) -> str:
        return self.name

    def __iter__(self):
        return iter(self.types)

    def __getitem__(self, index: int) -> Any:
        return self.types[index]

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and self.types == other.types and \
            self.fields == other.fields

    __hash__ = None


class slice_type(base_type):
    """The type of a `slice` (Triton's `slice_type`)."""

    name = "slice_type"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, slice_type)

    def __hash__(self) -> int:
        return hash(self.name)


class slice:  # noqa: A001 - Triton's name
    """Triton's `tl.slice(start, stop, step)`: the value of `a:b:c` in a subscript."""

    def __init__(self, start: Any, stop: Any, step: Any):
        self.start, self.stop, self.step = start, stop, step
        self.type = slice_type()


def validate_block_shape(shape: Any) -> int:
    """The element count of a tile shape, checked as Triton checks it: int dims, each a
    power of two, at most TRITON_MAX_TENSOR_NUMEL elements."""
    from . import TRITON_MAX_TENSOR_NUMEL

    for i, d in enumerate(shape):
        if not isinstance(d, int):
            raise TypeError(f"shape element {i} must be an int, got {type(d).__name__}")
        if d <= 0 or d & (d - 1):
            raise ValueError(f"shape element {i} must be a power of 2, got {d}")
    numel = math.prod(shape)
    if numel > TRITON_MAX_TENSOR_NUMEL:
        raise ValueError(f"numel ({numel}) exceeds the maximum tile numel "
                         f"({TRITON_MAX_TENSOR_NUMEL})")
    return numel


def get_primitive_bitwidth(dtype: str) -> int:
    """The bit width of a dtype named as Triton names it ("int32", "fp16", "bf16", ...)."""
    from ..ir.types import dtype_from_name

    try:
        return dtype_from_name(dtype).bits
    except KeyError:
        raise KeyError(f"no dtype named {dtype!r}") from None


def is_negative_zero(x: float) -> bool:
    """Whether the number `x` is -0.0."""
    return x == 0.0 and math.copysign(1.0, x) < 0


class _VoidDType(DType):
    """Triton's `tl.void`: the type of nothing (what an op without a result has). No tile
    holds it: a cast or a full of it is an error."""

    def __init__(self):
        super().__init__("void", "v", 0, None)

    def is_void(self) -> bool:
        return True


void = _VoidDType()
pi32_t = PointerDType(int32)  # Triton's pointer-to-int32 dtype

__all__ = ["base_type", "base_value", "constexpr_type", "block_type", "tuple_type",
           "slice_type", "slice", "void", "pi32_t", "validate_block_shape",
           "get_primitive_bitwidth", "is_negative_zero"]
