"""fp8 conversions (helpers of the elementwise family's `cast`; no op of their own).

fp8 values live in registers as their byte (i8). Upcasts go through fp16, which holds every
fp8 value exactly: e4nv with `cvt.rn.f16x2.e4m3x2` (sm_89+), e5 by shifting (e5m2 is the top
byte of an fp16), e4b15 by moving its fields (same exponent bias as fp16). Downcasts go
through fp32 (exact from fp16/bf16; fp64 rounds to fp32 first): e4nv and e5 with
`cvt.rn.satfinite.{e4m3,e5m2}x2.f32` (round to nearest even, out-of-range values and
infinities saturate to the largest finite value, NaN stays NaN); e4b15 rounds the fp16 value
to nearest even on its 3 mantissa bits, saturating to +-1.875 (it has no inf or NaN: NaN and
infinities become +-1.875). kitjit/interpreter/numeric.py computes the same bits.
"""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir.types import DType, float16

from ..nvvm import F16, F32, F64, I8, I16, asm, llvm_type


def fp8_cast_fn(lw, src: DType, dst: DType):
    """f(x) converting one register between an fp8 type and fp16/bf16/fp32/fp64."""
    b = lw.b
    if src.is_fp8():
        to_dst = lw.cast_fn(float16, dst) if dst is not float16 else (lambda x: x)

        def up(x):
            if src.name == "fp8e4nv":
                h = asm(b, I16, "{ .reg .b32 t; .reg .b16 hi; cvt.rn.f16x2.e4m3x2 t, $1; "
                        "mov.b32 {$0, hi}, t; }", "=h,h", [b.zext(x, I16)],
                        side_effect=False)
            elif src.name == "fp8e5":
                h = b.shl(b.zext(x, I16), ir.Constant(I16, 8))
            else:  # e4b15: sign to bit 15, exponent and mantissa to bits 7..14
                w = b.zext(x, I16)
                h = b.or_(b.shl(b.and_(w, ir.Constant(I16, 0x80)), ir.Constant(I16, 8)),
                          b.shl(b.and_(w, ir.Constant(I16, 0x7F)), ir.Constant(I16, 7)))
            return to_dst(b.bitcast(h, F16))
        return up
    t = llvm_type(src)

    def down(x):
        if dst.name == "fp8e4b15":
            h = x if t is F16 else b.fptrunc(b.fptrunc(x, F32) if t is F64 else
                                             lw.to_f32(x), F16)
            bits = b.bitcast(h, I16)
            sign = b.and_(bits, ir.Constant(I16, 0x8000))
            mag = b.and_(bits, ir.Constant(I16, 0x7FFF))
            big = b.icmp_unsigned(">", mag, ir.Constant(I16, 0x3F80))
            mag = b.select(big, ir.Constant(I16, 0x3F80), mag)  # NaN and inf too
            odd = b.and_(b.lshr(mag, ir.Constant(I16, 7)), ir.Constant(I16, 1))
            r = b.add(b.add(mag, ir.Constant(I16, 0x3F)), odd)
            out = b.or_(b.lshr(r, ir.Constant(I16, 7)), b.lshr(sign, ir.Constant(I16, 8)))
            return b.trunc(out, I8)
        f = b.fptrunc(x, F32) if t is F64 else lw.to_f32(x)
        fmt = "e4m3x2" if dst.name == "fp8e4nv" else "e5m2x2"
        r = asm(b, I16, f"cvt.rn.satfinite.{fmt}.f32 $0, $1, $2;", "=h,f,f",
                [ir.Constant(F32, 0.0), f], side_effect=False)
        return b.trunc(r, I8)
    return down
