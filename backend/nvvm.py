"""llvmlite helpers for NVVM-form LLVM IR: types, NVVM intrinsics, and inline PTX for what
LLVM does not expose (predicated vector loads and stores, mma.sync, barriers)."""

from __future__ import annotations

import re
import struct

import llvmlite.ir as ir

from kitjit.ir.types import DType


class BFloatType(ir.types._BaseFloatType):
    """LLVM's `bfloat`, which llvmlite's ir module lacks."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"

    def format_constant(self, value: float) -> str:
        if value != value:
            return "0xR7FC0"
        if abs(value) >= 3.3961775292304087e38:  # rounds past bf16's largest finite value
            return "0xR7F80" if value > 0 else "0xRFF80"
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        # round to nearest even, as fptrunc would
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 if value == value else 0x7FC0
        return f"0xR{bits & 0xFFFF:04X}"


BFloatType._create_instance()

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
BF16 = BFloatType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
GPTR = ir.PointerType(addrspace=1)
SPTR = ir.PointerType(addrspace=3)
VOID = ir.VoidType()


def llvm_type(dt: DType) -> ir.Type:
    """Register type of an element (bool is i1 in registers, i8 in memory)."""
    if dt.is_ptr():
        return GPTR
    if dt.is_bool():
        return I1
    if dt.is_floating() and dt.bits == 8:
        return I8  # fp8: the byte; backend/lower/fp8.py converts
    if dt.is_floating():
        return {16: BF16 if dt.name == "bf16" else F16, 32: F32, 64: F64}[dt.bits]
    return ir.IntType(dt.bits)


def mem_type(dt: DType) -> ir.Type:
    return I8 if dt.is_bool() else llvm_type(dt)


class Intrinsics:
    """Declares intrinsics on first use."""

    def __init__(self, module: ir.Module):
        self.m = module
        self.fns: dict[str, ir.Function] = {}

    def get(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        f = self.fns.get(name)
        if f is None:
            f = self.m.globals.get(name)
            if f is None:
                f = ir.Function(self.m, ir.FunctionType(ret, args), name)
            self.fns[name] = f
        return f

    def sreg(self, b: ir.IRBuilder, name: str) -> ir.Value:
        return b.call(self.get(f"llvm.nvvm.read.ptx.sreg.{name}", I32, []), [])


# PTX that every thread of a CTA (bar, barrier) or of a warp (.aligned) must reach together:
# LLVM may not make such a call depend on more control flow than it had (see asm).
_CONVERGENT = re.compile(r"(^|[\s;{}])(bar|barrier)\.|\.aligned\b")


def asm(b: ir.IRBuilder, ret: ir.Type, text: str, constraints: str, args: list,
        side_effect: bool = True) -> ir.Value:
    """Inline PTX. Barriers and `.aligned` instructions are called `convergent`: without it,
    LLVM's CFG simplification may merge two `if (tid == 0) {spin}; bar.sync` steps into one
    branch with a copy of the barrier on each side, so a divergent warp waits at two
    different barriers (two signal_waits in a row hung on an H200)."""
    fty = ir.FunctionType(ret, [a.type for a in args])
    attrs = ("convergent",) if _CONVERGENT.search(text) else ()
    return b.call(ir.InlineAsm(fty, text, constraints, side_effect=side_effect), args,
                  attrs=attrs)


def barrier(b: ir.IRBuilder) -> None:
    asm(b, VOID, "bar.sync 0;", "~{memory}", [])
