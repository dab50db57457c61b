"""Element types and tile types of the tile IR.

A `DType` is an element type (bf16, i32, a pointer to f16, ...). A `TileType` is what an IR
value has: an element type, a shape (``()`` for a scalar) and, once layout inference has
run, a layout that says how the tile is spread over the threads of a CTA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .dtype_triton import TritonDTypeMixin


class DType(TritonDTypeMixin):
    """An element type. Singletons: compare with ``is`` or ``==``."""

    def __init__(self, name: str, kind: str, bits: int, np_dtype: Any, aliases: tuple = ()):
        self.name = name
        self.kind = kind  # 'f' float, 'i' signed int, 'u' unsigned int, 'b' bool, 'p' pointer
        self.bits = bits
        self.np_dtype = np_dtype
        self.aliases = aliases

    # Triton-compatible predicates
    def is_floating(self) -> bool:
        return self.kind == "f"

    def is_int(self) -> bool:
        return self.kind in ("i", "u")

    def is_int_signed(self) -> bool:
        return self.kind == "i"

    def is_int_unsigned(self) -> bool:
        return self.kind == "u"

    def is_bool(self) -> bool:
        return self.kind == "b"

    def is_ptr(self) -> bool:
        return self.kind == "p"

    def is_fp8(self) -> bool:
        return self.kind == "f" and self.bits == 8

    @property
    def primitive_bitwidth(self) -> int:
        return self.bits

    @property
    def itemsize(self) -> int:
        """Bytes in memory (bool takes one byte, as in torch)."""
        return max(self.bits, 8) // 8

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self):
        return (dtype_from_name, (self.name,))


class PointerDType(DType):
    """A pointer to elements of `element_ty` in global memory."""

    _cache: dict[str, PointerDType] = {}

    def __new__(cls, element_ty: DType, address_space: int = 1, const: bool = False):
        if const or address_space != 1:
            what = "const=True" if const else f"address_space={address_space}"
            raise TypeError(f"kit.pointer_type(..., {what}) is not supported yet (Triton's "
                            "tl.pointer_type); for a read-only pointer parameter annotate it "
                            "`X: kit.const`")
        key = element_ty.name
        if key not in cls._cache:
            obj = super().__new__(cls)
            DType.__init__(obj, f"*{element_ty.name}", "p", 64, np.int64)
            obj.element_ty = element_ty
            cls._cache[key] = obj
        return cls._cache[key]

    def __init__(self, element_ty: DType, address_space: int = 1, const: bool = False):
        pass

    @property
    def itemsize(self) -> int:
        return 8


float16 = DType("fp16", "f", 16, np.float16, ("float16", "half"))
bfloat16 = DType("bf16", "f", 16, np.float32, ("bfloat16",))  # numpy has no bf16: f32 storage
float32 = DType("fp32", "f", 32, np.float32, ("float32", "float"))
float64 = DType("fp64", "f", 64, np.float64, ("float64", "double"))
int8 = DType("i8", "i", 8, np.int8, ("int8",))
int16 = DType("i16", "i", 16, np.int16, ("int16",))
int32 = DType("i32", "i", 32, np.int32, ("int32",))
int64 = DType("i64", "i", 64, np.int64, ("int64",))
uint8 = DType("u8", "u", 8, np.uint8, ("uint8",))
uint16 = DType("u16", "u", 16, np.uint16, ("uint16",))
uint32 = DType("u32", "u", 32, np.uint32, ("uint32",))
uint64 = DType("u64", "u", 64, np.uint64, ("uint64",))
int1 = DType("i1", "b", 1, np.bool_, ("bool", "bool_"))
# fp8 (Triton's names): values are held as float32 in the interpreter (like bf16), one byte in
# memory. e4nv is torch.float8_e4m3fn (max 448, no inf), e5 is torch.float8_e5m2 (max 57344),
# e4b15 has exponent bias 15 and no inf/NaN (max 1.875) and no torch dtype: pass its bytes as
# a torch.uint8 tensor and reinterpret them in the kernel (x.to(kit.float8e4b15, bitcast=True))
float8e4nv = DType("fp8e4nv", "f", 8, np.float32, ("float8e4nv", "float8_e4m3fn"))
float8e5 = DType("fp8e5", "f", 8, np.float32, ("float8e5", "float8_e5m2"))
float8e4b15 = DType("fp8e4b15", "f", 8, np.float32, ("float8e4b15",))
FP8 = (float8e4nv, float8e5, float8e4b15)
# Hopper machinery, never in registers: an mbarrier (8 bytes of shared memory) and a TMA
# descriptor (a 128-byte kernel parameter built on the host from a tensor)
mbarrier = DType("mbarrier", "m", 64, np.int64)
tma_desc = DType("tmadesc", "d", 1024, np.uint8)

ALL_DTYPES = [float16, bfloat16, float32, float64, int8, int16, int32, int64,
              uint8, uint16, uint32, uint64, int1, float8e4nv, float8e5, float8e4b15]
_BY_NAME = {d.name: d for d in ALL_DTYPES + [mbarrier, tma_desc]}
for _d in ALL_DTYPES:
    for _a in _d.aliases:
        _BY_NAME[_a] = _d


def dtype_from_name(name: str) -> DType:
    """'bf16', 'bfloat16', '*fp32' ... -> DType."""
    if name.startswith("*"):
        return PointerDType(dtype_from_name(name[1:]))
    return _BY_NAME[name]


def pointer_type(element_ty: DType) -> PointerDType:
    return PointerDType(element_ty)


_TORCH_NAMES = {
    "torch.float16": float16, "torch.bfloat16": bfloat16, "torch.float32": float32,
    "torch.float64": float64, "torch.int8": int8, "torch.int16": int16, "torch.int32": int32,
    "torch.int64": int64, "torch.uint8": uint8, "torch.uint16": uint16,
    "torch.uint32": uint32, "torch.uint64": uint64, "torch.bool": int1,
    "torch.float8_e4m3fn": float8e4nv, "torch.float8_e5m2": float8e5,
}


def from_torch(torch_dtype: Any) -> DType | None:
    """The kitjit dtype of a torch dtype, or None when kitjit has none for it."""
    return _TORCH_NAMES.get(str(torch_dtype))


@dataclass(frozen=True)
class TileType:
    """The type of an IR value: element type, shape (() for scalars) and layout (or None)."""

    dtype: DType
    shape: tuple[int, ...] = ()
    layout: Any = None
    space: str = "reg"  # "reg": a value in registers; "smem": a region of shared memory

    @property
    def is_shared(self) -> bool:
        return self.space == "smem"

    @property
    def is_scalar(self) -> bool:
        return self.shape == () and self.space == "reg"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def with_layout(self, layout: Any) -> TileType:
        return TileType(self.dtype, self.shape, layout, self.space)

    def with_dtype(self, dtype: DType) -> TileType:
        return TileType(dtype, self.shape, self.layout, self.space)

    def __str__(self) -> str:
        if self.space == "smem":
            s = "x".join(str(d) for d in self.shape)
            lay = f", {self.layout}" if self.layout is not None else ""
            return f"smem<{s}{'x' if s else ''}{self.dtype.name}{lay}>"
        if not self.shape:
            return self.dtype.name
        s = "x".join(str(d) for d in self.shape)
        lay = f", {self.layout}" if self.layout is not None else ""
        return f"tile<{s}x{self.dtype.name}{lay}>"


def scalar(dtype: DType) -> TileType:
    return TileType(dtype, ())
