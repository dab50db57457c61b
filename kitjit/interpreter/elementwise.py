"""Semantics of the elementwise family: unary and binary arithmetic, cmp, cast, select and
addptr. Float math on fp16/bf16 runs in fp32 and rounds back, as on the GPU; integer division
and remainder truncate toward zero (and give 0 for a zero divisor)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kitjit.ir import ops as O
from kitjit.ir.core import Op
from kitjit.ir.libm_typed import TYPED
from kitjit.ir.registry import semantics
from kitjit.ir.types import DType, bfloat16, float16, int16, uint16

from .compiler import pure
from .floats import maxnum, minnum
from .libm import math_fn
from .libm_typed import typed_fn
from .numeric import (
    _fixer,
    _int_bounds,
    _mem_np,
    _np,
    from_bits,
    round_bf16,
    round_fp8,
    to_bits,
)
from .sync import _Ctx


def _compute_in_f32(f: Callable, dt: DType) -> Callable:
    """Float math on fp16/bf16 runs in fp32 and rounds back, as on the GPU."""
    if dt is float16:
        return lambda x: f(np.asarray(x, np.float32)).astype(np.float16)
    if dt is bfloat16:
        return lambda x: round_bf16(f(x))
    return f


def _rsqrt(x):
    return np.reciprocal(np.sqrt(x))


def _rounded_once(g: Callable) -> Callable:
    """`g` computed in float64 and rounded once to the argument's dtype: the GPU calls
    libdevice's sinf/cosf/logf/log2f here (as Triton does), which are within 1-2 ulp of it
    at any argument."""
    def f(x):
        x = np.asarray(x)
        with np.errstate(all="ignore"):
            return g(x.astype(np.float64)).astype(x.dtype)
    return f


_LOG2E = np.float32(1.4426950408889634)


def _exp(x, sign: float = 1.0):
    """exp on fp32 as the GPU (and Triton's tl.exp) computes it: ex2.approx of the product
    x * log2(e) rounded to fp32. That rounding costs up to ~|x| ulp of the result; doing the
    same product here leaves only ex2's own 2 ulp between the two paths, at any x."""
    x = np.asarray(x)
    if x.dtype != np.float32:  # (fp64 kit.exp is libdevice's, a math op: never here)
        return np.exp(sign * x)
    with np.errstate(all="ignore"):
        t = x * (np.float32(sign) * _LOG2E)
        return np.exp2(t.astype(np.float64)).astype(np.float32)


def _sigmoid(x):
    """1 / (1 + exp(-x)), the exp as the GPU's (ex2.approx of x * -log2(e) in fp32)."""
    x = np.asarray(x)
    one = x.dtype.type(1)
    with np.errstate(all="ignore"):
        return one / (one + _exp(x, -1.0))


_FLOAT_UNARY = {"exp": _exp, "exp2": np.exp2, "log": _rounded_once(np.log),
                "log2": _rounded_once(np.log2), "sqrt": np.sqrt, "rsqrt": _rsqrt,
                "sin": _rounded_once(np.sin), "cos": _rounded_once(np.cos),
                "sigmoid": _sigmoid, "floor": np.floor, "ceil": np.ceil}


def _unary(op: Op) -> Callable:
    name, dt = op.name, op.operands[0].dtype
    if name == "neg":
        return np.negative
    if name == "not":
        return np.logical_not
    if name == "invert":
        return np.logical_not if dt.is_bool() else np.invert
    if name == "abs":
        return np.abs
    f = _FLOAT_UNARY[name]
    if not dt.is_floating():
        raise NotImplementedError(f"interpreter: '{name}' on {dt} (the frontend casts to "
                                  "float first)")
    if op.attrs.get("ftz"):                        # results below 2**-126 flush to zero
        g = f

        def f(x):
            r = g(x)
            return np.where(np.abs(r) < np.float32(2.0 ** -126), r.dtype.type(0), r)
    return _compute_in_f32(f, dt)


def _int_floordiv(a, b):
    zero = b == 0
    bs = np.where(zero, 1, b).astype(np.asarray(b).dtype)
    if np.asarray(a).dtype.kind == "u":
        return np.where(zero, 0, np.floor_divide(a, bs)).astype(np.asarray(a).dtype)
    r = np.fmod(a, bs)
    # (a - r) is an exact multiple of b; floor division of it is exact, hence truncation.
    return np.where(zero, 0, np.floor_divide(a - r, bs)).astype(np.asarray(a).dtype)


def _int_mod(a, b):
    zero = b == 0
    bs = np.where(zero, 1, b).astype(np.asarray(b).dtype)
    return np.where(zero, 0, np.fmod(a, bs)).astype(np.asarray(a).dtype)


def _shifts(dt: DType):
    bits = dt.bits
    t = _np(dt).type

    def amount(b):
        big = (b >= bits) if dt.is_int_unsigned() else ((b < 0) | (b >= bits))
        return big, np.where(big, 0, b).astype(_np(dt))

    def shl(a, b):
        big, s = amount(b)
        return np.where(big, t(0), np.left_shift(a, s)).astype(_np(dt))

    def shr(a, b):  # numpy: arithmetic for signed, logical for unsigned, like the GPU
        big, s = amount(b)
        fill = t(0) if dt.is_int_unsigned() else np.where(a < 0, t(-1), t(0))
        return np.where(big, fill, np.right_shift(a, s)).astype(_np(dt))

    return shl, shr


def _binary(op: Op) -> Callable:
    name, dt = op.name, op.operands[0].dtype
    if name in ("add", "sub", "mul", "minimum", "maximum", "and", "or", "xor"):
        # minimum/maximum: the GPU's min.f32/max.f32 (LLVM minnum/maxnum) return the other
        # operand when one is NaN, as Triton does by default (propagate_nan=NONE), and
        # order -0.0 < +0.0 (floats.py)
        f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "minimum": minnum,
             "maximum": maxnum, "and": np.bitwise_and, "or": np.bitwise_or,
             "xor": np.bitwise_xor}[name]
        return f
    if name in ("shl", "shr"):
        if not dt.is_int():
            raise NotImplementedError(f"interpreter: '{name}' on {dt}")
        return _shifts(dt)[0 if name == "shl" else 1]
    if dt.is_floating():
        if name == "div":
            return np.true_divide
        if name == "floordiv":
            return lambda a, b: np.floor(np.true_divide(a, b))
        if name == "mod":
            return np.fmod
    elif dt.is_int():
        if name == "floordiv":
            return _int_floordiv
        if name == "mod":
            return _int_mod
    raise NotImplementedError(f"interpreter: '{name}' on {dt}")


_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "eq": np.equal, "ne": np.not_equal}


def _rounded(op: Op, f: Callable) -> Callable:
    """`f` with its result rounded back into the result dtype (bf16) where it can leave it."""
    fix = _fixer(op.result.dtype)
    if fix is not None and op.name not in ("minimum", "maximum", "neg", "abs"):
        return lambda *xs: fix(f(*xs))
    return f


@semantics(*sorted(O.UNARY))
@pure
def unary(op: Op, ctx: _Ctx) -> Callable:
    return _rounded(op, _unary(op))


@semantics(*sorted(O.BINARY))
@pure
def binary(op: Op, ctx: _Ctx) -> Callable:
    return _rounded(op, _binary(op))


@semantics("cmp")
@pure
def cmp(op: Op, ctx: _Ctx) -> Callable:
    return _CMP[op.attrs["pred"]]


@semantics("cast")
@pure
def _cast(op: Op, ctx: _Ctx) -> Callable:
    src, dst = op.operands[0].dtype, op.result.dtype
    nd = _np(dst)
    if op.attrs.get("bitcast"):
        mdst = _mem_np(dst)
        return lambda x: from_bits(np.asarray(to_bits(x, src)).view(mdst), dst)
    if op.attrs.get("rounding") == "rtz":
        return lambda x: _round_toward_zero(x, dst)
    if src.is_ptr() or dst.is_ptr():  # addresses are int64 here
        return lambda x: np.asarray(x).view(nd) if np.asarray(x).dtype.itemsize == 8 else x
    if dst.is_fp8():
        return lambda x: round_fp8(x, dst)
    if dst.is_bool():
        return lambda x: np.not_equal(x, 0)
    if src.is_bool():
        if dst is bfloat16:
            return lambda x: np.asarray(x).astype(np.float32)
        return lambda x: np.asarray(x).astype(nd)
    if dst.is_int():
        if src.is_int():
            return lambda x: np.asarray(x).astype(nd)  # wraps
        # Triton's GPU code: truncate toward zero, saturate, NaN -> 0 (cvt.rzi); an 8-bit
        # int saturates to 16 bits and keeps the low byte (cvt.rzi.s16/u16: 200.5 -> int8
        # is -56, as on Triton's GPU; its interpreter's numpy differs there)
        wide = _np(int16 if dst.is_int_signed() else uint16) if dst.bits == 8 else nd
        lo, hi = _int_bounds(dst if dst.bits > 8 else int16 if dst.is_int_signed() else uint16)

        def f2i(x):
            t = np.trunc(np.asarray(x, np.float64))
            safe = np.where((t >= lo) & (t < float(hi) + 1), t, 0)
            r = safe.astype(wide)
            r = np.where(t >= float(hi) + 1, wide.type(hi), r)
            return np.where(t < lo, wide.type(lo), r).astype(wide).astype(nd)
        return f2i
    if dst is bfloat16:
        return round_bf16
    # int/float -> fp16/fp32/fp64; bf16 sources are already float32.
    return lambda x: np.asarray(x).astype(nd)


def _round_toward_zero(x, dst: DType):
    """A float narrowed toward zero (cvt.rz): round to nearest, then one step back toward
    zero where that went away from zero (overflow gives the largest finite value)."""
    x = np.asarray(x)
    if dst is bfloat16:
        x32 = _rtz_step(x, np.float32) if x.dtype == np.float64 else x.astype(np.float32)
        r = round_bf16(x32)
        away = np.abs(r) > np.abs(x32)  # never for NaN
        bits = r.view(np.uint32) - np.where(away, np.uint32(0x10000), np.uint32(0))
        return bits.astype(np.uint32).view(np.float32)
    if dst is float16 and x.dtype == np.float64:
        x = _rtz_step(x, np.float32)
    return _rtz_step(x, _np(dst).type)


def _rtz_step(x, t):
    r = np.asarray(x).astype(t)
    away = np.abs(r.astype(np.float64)) > np.abs(np.asarray(x, np.float64))
    return np.where(away, np.nextafter(r, t(0)), r).astype(t)


@semantics("select")
@pure
def select(op: Op, ctx: _Ctx) -> Callable:
    return np.where


@semantics("addptr")
@pure
def addptr(op: Op, ctx: _Ctx) -> Callable:
    size = np.int64(op.result.dtype.element_ty.itemsize)
    return lambda p, o: p + np.asarray(o).astype(np.int64) * size


def _umulhi64(a, b):
    """High 64 bits of the unsigned 128-bit product, from 32-bit halves (exact in uint64)."""
    m = np.uint64(0xFFFFFFFF)
    s = np.uint64(32)
    a0, a1, b0, b1 = a & m, a >> s, b & m, b >> s
    lo = a0 * b0
    mid1 = a1 * b0 + (lo >> s)
    mid2 = a0 * b1 + (mid1 & m)
    return a1 * b1 + (mid1 >> s) + (mid2 >> s)


@semantics("inline_asm")
def inline_asm(comp: object, op: Op, gen: bool = False) -> Callable:
    """The interpreter cannot run PTX: a clear error at the user's line (Triton's interpreter
    raises NotImplementedError("inline_asm not supported in interpreter mode") too)."""
    from kitjit.frontend.errors import CompileError

    raise CompileError("kit.inline_asm_elementwise runs PTX, which the CPU interpreter cannot "
                       "run (as in Triton's interpreter)", op.loc,
                       "run this kernel on the GPU, or give the interpreter a path written "
                       "with kit ops (e.g. `if kit.constexpr(INTERPRET): ...`)")


@semantics("umulhi")
@pure
def umulhi(op: Op, ctx: _Ctx) -> Callable:
    """Unsigned whatever the signedness (Triton's tt.mulhiui): the bits are read as uint."""
    dt = op.result.dtype
    nd = _np(dt)
    if dt.bits == 32:
        def f(a, b):
            p = np.asarray(a).astype(np.uint32).astype(np.uint64) * \
                np.asarray(b).astype(np.uint32).astype(np.uint64)
            return (p >> np.uint64(32)).astype(np.uint32).astype(nd)
        return f
    return lambda a, b: _umulhi64(np.asarray(a).astype(np.uint64),
                                  np.asarray(b).astype(np.uint64)).astype(nd)


@semantics("math")
@pure
def math(op: Op, ctx: _Ctx) -> Callable:
    """libm functions (kitjit/ir/libm.py), in float64 rounded once: see interpreter/libm.py;
    libdevice's integer and conversion functions exactly (interpreter/libm_typed.py)."""
    fn = op.attrs["fn"]
    if fn in TYPED:
        f = typed_fn(fn, tuple(v.dtype.name for v in op.operands), op.result.dtype.name)
    else:
        ft = next(v.dtype for v in op.operands if v.dtype.is_floating())  # (jn: order first)
        f = math_fn(fn, ft.bits == 32)

    def shaped(*xs):  # scalars stay 0-d (torch and frompyfunc paths return 1-d or floats)
        return np.asarray(f(*xs)).reshape(np.broadcast_shapes(*(np.shape(x) for x in xs)))
    return shaped
