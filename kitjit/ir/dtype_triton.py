"""Triton's `tl.dtype` predicates and facts that kernels and host wrappers read
(`x.dtype.is_fp16()`, `dtype.fp_mantissa_width`, `dtype.get_int_max_value()`, ...), as a
mixin of kitjit's DType so `kit.float16.is_fp16()` answers as `tl.float16.is_fp16()` does."""

from __future__ import annotations

from enum import Enum

# Triton's dtype names (kitjit's DType.name is Triton's too)
SINT_TYPES = ["int8", "int16", "int32", "int64"]
UINT_TYPES = ["int1", "uint8", "uint16", "uint32", "uint64"]
FP_TYPES = ["fp8e4b15", "fp8e4nv", "fp8e4b8", "fp8e5", "fp8e5b16", "fp16", "bf16", "fp32",
            "fp64"]
STANDARD_FP_TYPES = ["fp16", "bf16", "fp32", "fp64"]
OTHER_TYPES = ["void"]
# (mantissa bits, exponent bias) of each float type
_FP_FORMAT = {"fp8e4b15": (3, 15), "fp8e4nv": (3, 7), "fp8e4b8": (3, 8), "fp8e5": (2, 15),
              "fp8e5b16": (2, 16), "fp16": (10, 15), "bf16": (7, 127), "fp32": (23, 127),
              "fp64": (52, 1023)}


class _Signedness(Enum):
    SIGNED = 0
    UNSIGNED = 1


class _Kind(Enum):
    BOOLEAN = 0
    INTEGRAL = 1
    FLOATING = 2


class TritonDTypeMixin:
    """Triton's dtype API over DType's `name`, `kind` and `bits`."""

    SINT_TYPES, UINT_TYPES, FP_TYPES = SINT_TYPES, UINT_TYPES, FP_TYPES
    STANDARD_FP_TYPES, OTHER_TYPES = STANDARD_FP_TYPES, OTHER_TYPES
    SIGNEDNESS, KIND = _Signedness, _Kind

    def _is(self, name: str) -> bool:
        return self.name == name

    def is_fp8e4nv(self) -> bool:
        return self._is("fp8e4nv")

    def is_fp8e4b8(self) -> bool:
        return self._is("fp8e4b8")

    def is_fp8e4b15(self) -> bool:
        return self._is("fp8e4b15")

    def is_fp8e5(self) -> bool:
        return self._is("fp8e5")

    def is_fp8e5b16(self) -> bool:
        return self._is("fp8e5b16")

    def is_fp16(self) -> bool:
        return self._is("fp16")

    def is_bf16(self) -> bool:
        return self._is("bf16")

    def is_fp32(self) -> bool:
        return self._is("fp32")

    def is_fp64(self) -> bool:
        return self._is("fp64")

    def is_int1(self) -> bool:
        return self._is("i1")

    def is_int8(self) -> bool:
        return self._is("i8")

    def is_int16(self) -> bool:
        return self._is("i16")

    def is_int32(self) -> bool:
        return self._is("i32")

    def is_int64(self) -> bool:
        return self._is("i64")

    def is_uint8(self) -> bool:
        return self._is("u8")

    def is_uint16(self) -> bool:
        return self._is("u16")

    def is_uint32(self) -> bool:
        return self._is("u32")

    def is_uint64(self) -> bool:
        return self._is("u64")

    def is_standard_floating(self) -> bool:
        return self.name in STANDARD_FP_TYPES

    def is_void(self) -> bool:
        return False

    def is_block(self) -> bool:
        return False  # a DType is an element type; tiles carry shapes separately

    def is_const(self) -> bool:
        return False

    @staticmethod
    def is_dtype(type_str: str) -> bool:
        return type_str in SINT_TYPES + UINT_TYPES + FP_TYPES + OTHER_TYPES

    @property
    def scalar(self):
        return self

    @property
    def fp_mantissa_width(self) -> int:
        if self.name not in _FP_FORMAT:
            raise AttributeError(f"{self.name} is not a floating-point type")
        return _FP_FORMAT[self.name][0]

    @property
    def exponent_bias(self) -> int:
        if self.name not in _FP_FORMAT:
            raise AttributeError(f"{self.name} is not a floating-point type")
        return _FP_FORMAT[self.name][1]

    def get_int_max_value(self) -> int:
        """The largest value of an integer type (Triton's; int1 counts as unsigned)."""
        if self.kind == "i":
            return 2 ** (self.bits - 1) - 1
        if self.kind in ("u", "b"):
            return 2 ** self.bits - 1
        raise RuntimeError(f"get_int_max_value: {self.name} is not an integer type")

    def get_int_min_value(self) -> int:
        if self.kind == "i":
            return -2 ** (self.bits - 1)
        if self.kind in ("u", "b"):
            return 0
        raise RuntimeError(f"get_int_min_value: {self.name} is not an integer type")

    def codegen_name(self) -> str:
        return self.name
