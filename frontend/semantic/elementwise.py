"""Elementwise ops: casts, arithmetic, pointer offsets, comparisons, unary math, select.

Call rules: kit.where, kit.minimum, kit.maximum, the math functions (kit.exp, ...),
kit.cdiv, kit.cast.
"""

from __future__ import annotations

import builtins
import math
from numbers import Number
from typing import Any

from kitjit.ir import libm
from kitjit.ir import ops as O
from kitjit.ir.core import Value
from kitjit.ir.libm_typed import TYPED
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import (
    DType,
    TileType,
    bfloat16,
    float16,
    float32,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
)
from kitjit.language.extra.libdevice import SUPPORTED as LIBDEVICE

from .base import describe, literal_range_error, promote, typed_number, weak_dtype
from .call_rules import Call, call_rule
from .libdevice_typed import typed_libdevice


class ElementwiseOps:
    """Typing rules of the elementwise family."""

    @typing_rule("cast")
    def cast(self, v: Value, dtype: DType, bitcast: bool = False,
             rounding: str | None = None) -> Value:
        """Conversion (Triton's semantic.cast): values convert, `bitcast` reinterprets bits
        of the same width, int64 <-> pointer moves addresses, and `rounding` ("rtne",
        "rtz") picks how a float narrows. fp8 converts only to and from fp16/bf16/fp32/fp64
        in the IR; other pairs go through fp32 here."""
        src = v.dtype
        if not isinstance(dtype, DType):
            raise self.error(f"expected a dtype such as kit.float32, got {describe(dtype)}")
        if dtype.is_void():
            raise self.error("a tile cannot hold kit.void (Triton's type of nothing): no "
                             "conversion to it", "convert to a value dtype such as kit.int32")
        if src is dtype and not bitcast:
            return v  # as Triton: a conversion to the same type is the value (any rounding)
        if rounding is not None:
            if rounding not in ("rtne", "rtz"):
                raise self.error(f"fp_downcast_rounding must be 'rtne' or 'rtz', got "
                                 f"{rounding!r}")
            if not (src.is_floating() and dtype.is_floating() and dtype.bits < src.bits):
                raise self.error(f"fp_downcast_rounding applies to float downcasts only, not "
                                 f"{src} to {dtype}")
            if rounding == "rtne" and not (src.bits == 32 and dtype.bits == 16):
                rounding = None   # the default; fp32 -> fp16/bf16 keeps it (rn_pinned)
            elif rounding == "rtz" and dtype.is_fp8():
                raise self.error("fp_downcast_rounding='rtz' to fp8 is not supported yet",
                                 "fp8 conversions round to nearest even (cvt.rn.satfinite)")
        if src is dtype:
            return v
        if src.is_ptr() or dtype.is_ptr():
            return self._pointer_cast(v, dtype)
        if bitcast:
            if src.bits != dtype.bits:
                raise self.error(f"cannot bitcast {src} ({src.bits} bits) to {dtype} "
                                 f"({dtype.bits} bits)", "bitcast keeps the bits: pick a "
                                 "dtype of the same width")
            return self.emit1("cast", [v], TileType(dtype, v.shape), {"bitcast": True})
        if src.is_fp8() or dtype.is_fp8():
            other = dtype if src.is_fp8() else src
            if other.is_fp8() or not other.is_floating():
                v = self.cast(v, float16 if other.is_fp8() else float32)
                return self.cast(v, dtype, rounding=rounding if dtype.is_floating() else None)
        attrs = {"rounding": rounding} if rounding else None
        return self.emit1("cast", [v], TileType(dtype, v.shape), attrs)

    def _pointer_cast(self, v: Value, dtype: DType) -> Value:
        src = v.dtype
        ok = src.is_ptr() and dtype.is_ptr() or \
            src.is_ptr() and dtype.name in ("i64", "u64") or \
            dtype.is_ptr() and src.name in ("i64", "u64")
        if not ok:
            raise self.error(f"cannot convert {src} to {dtype}",
                             "a pointer converts to and from int64 (x.to(kit.int64), "
                             "addr.to(kit.pointer_type(kit.float32))) and to another pointer "
                             "type; otherwise pointers change by adding integer offsets")
        return self.emit1("cast", [v], TileType(dtype, v.shape))

    def binary_operands(self, a: Any, b: Any, opname: str) -> tuple[Value, Value]:
        """Both operands as Values of one dtype and shape, ready for an elementwise op."""
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise self.error(f"internal: '{opname}' on two constants")
        self.check_literal_fits(a, b)
        if not isinstance(a, Value):
            a = self.to_value(a, b)
        if not isinstance(b, Value):
            b = self.to_value(b, a)
        dt = promote(a.dtype, b.dtype)
        if dt is not None and (a.dtype is bfloat16) != (b.dtype is bfloat16) and \
                any(v.dtype.is_int() or v.dtype.is_bool() for v in (a, b)):
            dt = float32  # Triton: an integer and bf16 meet at fp32 (tiles or scalars)

        if dt is None:
            raise self.error(f"'{opname}' cannot combine {a.dtype} and {b.dtype}",
                             "convert one side with .to(kit.<dtype>)")
        shape = self.broadcast_shapes(a.shape, b.shape)
        return (self.broadcast_to(self.cast(a, dt), shape),
                self.broadcast_to(self.cast(b, dt), shape))

    def check_literal_fits(self, a: Any, b: Any) -> None:
        """A Python int beside an int tile must fit the tile's dtype, as Triton checks
        before any conversion (`x_i32 / 3000000000` raises there too)."""
        lit, tile = (b, a) if isinstance(a, Value) else (a, b)   # a Python number, if any
        if not isinstance(lit, Value) and isinstance(tile, Value):
            msg = literal_range_error(lit, weak_dtype(lit, tile.dtype))
            if msg is not None:   # Triton raises too; wrapping would change the value
                big = lit.bit_length() >= 64  # (and str() of an int past 4300 digits raises)
                raise self.error(msg, "convert the tile with .to(...) first" if big else
                                 f"write the constant as kit.full([], {lit}, kit.int64) "
                                 "or convert the tile with .to(...) first")

    # ---------------------------------------------------------------- arithmetic
    @typing_rule(*sorted(O.BINARY))
    def binary(self, opname: str, a: Any, b: Any) -> Value:
        """Python operators: add sub mul div floordiv mod and or xor shl shr minimum maximum."""
        va = a.dtype if isinstance(a, Value) else None
        vb = b.dtype if isinstance(b, Value) else None
        if opname in ("add", "sub") and ((va and va.is_ptr()) or (vb and vb.is_ptr())):
            return self.pointer_arith(opname, a, b)
        if opname == "div":
            self.check_literal_fits(a, b)
            a, b = self._float_operands(a, b)
        if opname in ("div", "mod"):   # Triton: fp16/bf16 `/` and `%` compute in fp32, and a
            a, b = (self.cast(v, float32) if isinstance(v, Value) and  # literal beside them
                    v.dtype in (float16, bfloat16) else v for v in (a, b))  # is made in fp32
        left_signed = isinstance(a, Value) and a.dtype.is_int_signed()
        a, b = self.binary_operands(a, b, opname)
        dt = a.dtype
        if opname == "shr" and left_signed and dt.is_int_unsigned():
            # Triton picks the shift by the left operand's own signedness (ashr for a signed
            # one) and computes it in the promoted unsigned dtype: the same bits as a shift
            # of the signed type of that width
            st = {8: int8, 16: int16, 32: int32, 64: int64}[dt.bits]
            r = self.emit1("shr", [self.cast(a, st), self.cast(b, st)], TileType(st, a.shape))
            return self.cast(r, dt)
        if opname in ("div", "mod") and dt in (float16, bfloat16):  # Triton: in fp32
            a, b = self.cast(a, float32), self.cast(b, float32)
            dt = float32
        if dt.is_fp8() and opname in _FP8_ARITH:  # computed in fp32, rounded once to dt
            r = self.emit1(opname, [self.cast(a, float32), self.cast(b, float32)],
                           TileType(float32, a.shape))
            return self.cast(r, dt)
        if opname in ("and", "or", "xor", "shl", "shr") and dt.is_floating():
            raise self.error(f"bitwise '{_SYMBOL[opname]}' needs integer or bool operands, "
                             f"got {dt}", "convert with .to(kit.int32) first")
        if dt.is_bool() and opname in _BOOL_ARITH:
            return self._bool_arith(opname, a, b)
        return self.emit1(opname, [a, b], a.type)

    def _bool_arith(self, opname: str, a: Value, b: Value) -> Value:
        """Two int1 tiles stay int1, as Triton types them, with the values of Triton's GPU
        code (LLVM's i1 arithmetic, one bit that wraps): + and - are xor, * is and. Where
        that code is undefined (a // 0, a % 0, a shift by 1, past i1's width) kitjit gives
        what Triton's interpreter gives where it gives a bool: a // b is a & b, a % b is 0
        (a % 1 is 0), a >> b is a & ~b; a << b is a & ~b too (Triton's interpreter gives the
        int 2 for 1 << 1, its GPU a poison value)."""
        if opname in ("add", "sub"):
            return self.emit1("xor", [a, b], a.type)
        if opname in ("mul", "floordiv"):
            return self.emit1("and", [a, b], a.type)
        if opname == "mod":
            return self.emit1("xor", [a, a], a.type)
        return self.emit1("and", [a, self.emit1("not", [b], b.type)], a.type)  # shl, shr

    def _float_operands(self, a, b):
        def f(x, other):
            if isinstance(x, Value) and not x.dtype.is_floating():
                return self.cast(x, float32)
            if isinstance(x, (int, bool)) and not isinstance(other, Value):
                return float(x)
            if isinstance(x, (int, bool)) and not other.dtype.is_floating():
                return float(x)
            return x
        return f(a, b), f(b, a)

    @typing_rule("addptr")
    def pointer_arith(self, opname: str, a: Any, b: Any) -> Value:
        if isinstance(b, Value) and b.dtype.is_ptr():
            if opname == "sub" or (isinstance(a, Value) and a.dtype.is_ptr()):
                raise self.error("pointers can only be offset by integers (ptr + int)",
                                 _PTR_HINT)
            a, b = b, a
        if isinstance(b, Value):
            if not b.dtype.is_int():
                raise self.error(f"a pointer offset must be an integer tile, got {b.dtype}",
                                 _PTR_HINT)
        elif not isinstance(b, int) or isinstance(b, bool):
            raise self.error(f"a pointer offset must be an integer, got {b!r}", _PTR_HINT)
        if not isinstance(b, Value):
            b = self.constant(b, int32 if -(2 ** 31) <= b < 2 ** 31 else int64)
        if opname == "sub":
            b = self.emit1("neg", [b], b.type)
        shape = self.broadcast_shapes(a.shape, b.shape)
        a, b = self.broadcast_to(a, shape), self.broadcast_to(b, shape)
        return self.emit1("addptr", [a, b], a.type)

    @typing_rule("cmp")
    def compare(self, pred: str, a: Any, b: Any) -> Value:
        if isinstance(a, Value) and a.dtype.is_ptr() or isinstance(b, Value) and b.dtype.is_ptr():
            raise self.error("pointers cannot be compared")
        # Triton's comparison operators take a number as its `to_tensor` dtype (fp32, int32,
        # ...), not the tile's: x_fp16 < 0.1 compares in fp32 there
        a, b = (v if isinstance(v, Value) else typed_number(v) for v in (a, b))
        a, b = self.binary_operands(a, b, _CMP_SYMBOL[pred])
        if a.dtype.is_fp8():  # (exact in fp32)
            a, b = self.cast(a, float32), self.cast(b, float32)
        return self.emit1("cmp", [a, b], TileType(int1, a.shape), {"pred": pred})

    @typing_rule(*sorted(O.UNARY))
    def unary(self, opname: str, x: Any, ftz: bool = False) -> Value:
        x = self.to_value(x)
        dt = x.dtype
        if dt.is_ptr():
            raise self.error(f"'{opname}' does not apply to pointers")
        if opname == "not":
            if not dt.is_bool():
                x = self.compare("ne", x, 0)
            return self.emit1("not", [x], x.type)
        if opname == "invert":
            if dt.is_floating():
                raise self.error("'~' needs an integer or bool operand")
            return self.emit1("not" if dt.is_bool() else "invert", [x], x.type)
        if opname in O.FLOAT_MATH:
            if not dt.is_floating():
                x = self.cast(x, float32)
            if x.dtype is float64 and opname == "sigmoid":  # 1 / (1 + exp(-x))
                e = self.math_fn("exp", [self.emit1("neg", [x], x.type)])
                return self.binary("div", 1.0, self.binary("add", 1.0, e))
            if x.dtype is float64 and opname not in ("sqrt", "floor", "ceil"):
                return self.math_fn(opname, [x])  # libdevice's double version
            return self.emit1(opname, [x], x.type, {"ftz": True} if ftz else None)
        if opname == "neg" and dt.is_bool():
            return x  # Triton's 0 - x in int1: -x is x (a bool stays a bool)
        if opname == "abs" and dt.is_int_unsigned() or opname == "abs" and dt.is_bool():
            return x
        return self.emit1(opname, [x], x.type)

    @typing_rule("umulhi")
    def umulhi(self, x: Any, y: Any) -> Value:
        if not isinstance(x, Value) and not isinstance(y, Value):
            x = self.to_value(x)
        x, y = self.binary_operands(x, y, "umulhi")
        if x.dtype.name not in ("i32", "u32", "i64", "u64"):
            raise self.error(f"kit.umulhi needs int32, uint32, int64 or uint64 operands, got "
                             f"{x.dtype}", "convert with .to(kit.uint32)")
        return self.emit1("umulhi", [x, y], x.type)


    @typing_rule("math")
    def math_fn(self, fn: str, args: list, what: str | None = None) -> Value:
        """A libm function (kitjit/ir/libm.py) of `args`: float operands meet in fp64 if one
        is fp64, else in fp32 (fp16/bf16 and ints compute in fp32, and a result of fp16/bf16
        operands rounds back); the int operands of powi/ldexp become int32."""
        spec = libm.FNS[fn]
        what = what or f"kit.{fn}"
        floats = [a for i, a in enumerate(args) if i not in spec.int_args]
        dts = [a.dtype for a in floats if isinstance(a, Value)]
        for a in args:
            if isinstance(a, Value) and a.dtype.is_ptr():
                raise self.error(f"{what} does not apply to pointers")
            if not isinstance(a, (Value, int, float, bool)):
                raise self.error(f"{what}: expected a tile or a number, got {describe(a)}")
        dt = float64 if float64 in dts else float32
        if dt is float64 and libm.symbol(fn, True) is None:
            raise self.error(f"{what} has no fp64 version", "convert with .to(kit.float32)")
        halves = {d for d in dts if d.is_floating() and d.bits == 16}
        back = halves.pop() if len(halves) == 1 and all(d in (float16, bfloat16, int1) or
                                                       d.is_int() for d in dts) else None
        if not dts and not any(isinstance(a, Value) for a in args):
            raise self.error(f"{what} needs at least one tile argument")
        vals = []
        for i, a in enumerate(args):
            t = int32 if i in spec.int_args else dt
            if isinstance(a, Value):
                if i in spec.int_args and not a.dtype.is_int():
                    raise self.error(f"{what}: argument {i + 1} must be an integer tile, got "
                                     f"{a.dtype}")
                vals.append(self.cast(a, t))
            else:
                vals.append(self.constant(int(a) if t is int32 else float(a), t))
        shape = vals[0].shape
        for v in vals[1:]:
            shape = self.broadcast_shapes(shape, v.shape)
        vals = [self.broadcast_to(v, shape) for v in vals]
        out = self.emit1("math", vals, TileType(int32 if spec.pred else dt, shape), {"fn": fn})
        return self.cast(out, back) if back is not None and not spec.pred else out

    @typing_rule("select")
    def where(self, cond: Any, x: Any, y: Any) -> Value:
        if isinstance(cond, Number):  # a constexpr condition, as Triton takes it
            cond = self.constant(bool(cond), int1)
        if not isinstance(cond, Value):
            raise self.error(f"kit.where needs a tile or constexpr condition, got "
                             f"{type(cond).__name__}")
        if not cond.dtype.is_bool():
            cond = self.compare("ne", cond, 0)
        if not isinstance(x, Value) and not isinstance(y, Value):
            x = self.to_value(x)
        x, y = self.binary_operands(x, y, "where")
        shape = self.broadcast_shapes(cond.shape, x.shape)
        cond, x, y = (self.broadcast_to(v, shape) for v in (cond, x, y))
        return self.emit1("select", [cond, x, y], x.type)

    @typing_rule("inline_asm")
    def inline_asm(self, asm: str, constraints: str, args: list, dtypes: list,
                   is_pure: bool, pack: int) -> list[Value]:
        """Triton's inline_asm_elementwise: `args` broadcast to one shape, one result tile of
        that shape per dtype."""
        what = "kit.inline_asm_elementwise"
        if not args:
            raise self.error(f"{what} needs at least one argument tile",
                             "pass a tile the asm reads (its shape is the results' shape)")
        vals = [self.to_value(a) for a in args]
        for v in vals:
            if v.type.is_shared or v.dtype.is_ptr() or v.dtype.is_bool() or \
                    v.dtype.kind not in "fiu":
                raise self.error(f"{what}: argument {describe(v)} is not supported yet "
                                 "(numeric tiles only)", "cast bool tiles to kit.int8 or "
                                 "kit.int32 first; pass pointers as kit.int64 tiles")
        for dt in dtypes:
            if not isinstance(dt, DType) or dt.is_ptr() or dt.is_bool() or \
                    dt.kind not in "fiu":
                raise self.error(f"{what}: result dtype {dt!r} is not supported yet (numeric "
                                 "dtypes only)", "return kit.int8/kit.int32 and compare")
        shape: tuple = ()
        for v in vals:
            shape = self.broadcast_shapes(shape, v.shape)
        vals = [self.broadcast_to(v, shape) for v in vals]
        op = self.emit("inline_asm", vals, [TileType(dt, shape) for dt in dtypes],
                       {"asm": asm, "constraints": constraints, "is_pure": is_pure,
                        "pack": pack})
        return list(op.results)


# int1 with int1: Triton keeps int1 (ElementwiseOps._bool_arith gives the values)
_BOOL_ARITH = frozenset({"add", "sub", "mul", "floordiv", "mod", "shl", "shr"})

# Triton's fp8 results (an fp8 type with itself); kitjit computes them in fp32
_FP8_ARITH = frozenset({"add", "sub", "mul", "div", "mod", "floordiv", "minimum", "maximum"})

_PTR_HINT = ("a pointer moves by a whole number of elements: add an integer tile such as "
             "kit.arange(0, BLOCK) (convert floats with .to(kit.int32))")
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
           "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
_CMP_SYMBOL = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


# -------------------------------------------------------------------- kit.<name> calls
@call_rule("where", lambda condition, x, y: None)
def _where(c: Call) -> Any:
    return c.b.where(c["condition"], c["x"], c["y"])


def _fold_min_max(largest: bool, x: Any, y: Any, propagate_nan: Any) -> Any:
    """kit.maximum/minimum of two numbers, by the GPU's rule (maxnum/minnum): a NaN gives
    the other number (NaN with propagate_nan=ALL) and -0.0 < +0.0 (Python's max(-0.0, 0.0)
    is -0.0)."""
    if isinstance(x, float) and x != x:
        return x if propagate_nan else y
    if isinstance(y, float) and y != y:
        return y if propagate_nan else x
    if x == 0 and y == 0 and (isinstance(x, float) or isinstance(y, float)):
        nx, ny = math.copysign(1.0, x) < 0, math.copysign(1.0, y) < 0
        return -0.0 if ((nx and ny) if largest else (nx or ny)) else 0.0
    return (builtins.max if largest else builtins.min)(x, y)


@call_rule(("minimum", "maximum"), lambda x, y, propagate_nan=0: None)
def _min_max(c: Call) -> Any:
    """NaN: by default the other operand (the GPU's min/max.f32, Triton's NONE); with
    propagate_nan=kit.PropagateNan.ALL a NaN on either side gives NaN."""
    nan = c.const("propagate_nan", "kit.PropagateNan.NONE or ALL")
    nan = getattr(nan, "value", nan)
    if not isinstance(c["x"], Value) and not isinstance(c["y"], Value):
        return _fold_min_max(c.name == "maximum", c["x"], c["y"], nan)
    # Triton's tl.minimum/maximum take a number as its `to_tensor` dtype (not the tile's:
    # maximum(x_fp16, 0.0) is fp32 there) and compute bf16 in fp32 (no bf16 min/max)
    x, y = (typed_number(v) if not isinstance(v, Value) else
            c.b.cast(v, float32) if v.dtype is bfloat16 else v for v in (c["x"], c["y"]))
    r = c.b.binary(c.name, x, y)
    if nan and r.dtype.is_floating():
        x, y = c.b.binary_operands(x, y, c.name)
        r = c.b.where(c.b.compare("ne", x, x), x, c.b.where(c.b.compare("ne", y, y), y, r))
    return r


@call_rule(("exp", "exp2"), lambda x, ftz=False: None)
@call_rule(("log", "log2", "sqrt", "rsqrt", "abs", "sin", "cos", "sigmoid", "floor", "ceil"),
           lambda x: None)
def _math(c: Call) -> Any:
    x = c["x"]
    ftz = bool(c.const("ftz", "True or False")) if c.name in ("exp", "exp2") else False
    if not isinstance(x, Value):
        return _fold_math(c.cg, c.node, c.name, x)
    return c.b.unary(c.name, x, ftz=ftz)


@call_rule(("fma",), lambda x, y, z: None)
@call_rule(("erf", "sqrt_rn"), lambda x: None)
@call_rule(("div_rn",), lambda x, y: None)
def _libm_top(c: Call) -> Any:
    return c.b.math_fn(c.name, [c.args[k] for k in c.args], f"kit.{c.name}")


@call_rule("fdiv", lambda x, y, ieee_rounding=False: None)
def _fdiv(c: Call) -> Any:
    if c.const("ieee_rounding", "True or False"):
        return c.b.math_fn("div_rn", [c["x"], c["y"]], "kit.fdiv")
    x, y = c.b._float_operands(c["x"], c["y"])
    return c.b.binary("div", x, y)


@call_rule("clamp", lambda x, min, max, propagate_nan=0: None)
def _clamp(c: Call) -> Any:
    b = c.b
    x = c["x"]
    if not isinstance(x, Value) or not x.dtype.is_floating():
        raise c.err("kit.clamp needs a float tile x", "Triton's clamp is for floats; use "
                    "kit.minimum(kit.maximum(x, lo), hi) on integers")
    nan = c.const("propagate_nan", "kit.PropagateNan.NONE or ALL")
    nan = getattr(nan, "value", nan)
    r = b.math_fn("fmin", [b.math_fn("fmax", [x, c["min"]], "kit.clamp"), c["max"]],
                  "kit.clamp")
    if nan:
        r = b.where(b.compare("ne", x, x), x, r)
    return r


@call_rule(tuple(f"libdevice.{n}" for n in LIBDEVICE), lambda *args: None)
def _libdevice(c: Call) -> Any:
    name = c.name.split(".", 1)[1]
    args = list(c["args"])
    what = f"libdevice.{name}"
    fn = LIBDEVICE[name]
    if fn in TYPED:
        return typed_libdevice(c.b, fn, args, what)
    nargs = libm.FNS[fn].nargs
    if len(args) != nargs:
        raise c.err(f"{what} takes {nargs} argument{'s' if nargs > 1 else ''}, got {len(args)}")
    if fn == "nextafter" and any(isinstance(a, Value) and a.dtype not in (float32, float64)
                                 for a in args):
        raise c.err(f"{what} needs fp32 or fp64 tiles, got "
                    f"{', '.join(describe(a) for a in args)}",
                    "the next fp16/bf16 value is not the next fp32 one: convert with .to()")
    if name == "abs" and isinstance(args[0], Value) and not args[0].dtype.is_floating():
        return c.b.unary("abs", args[0])
    if fn == "pow":  # an integer exponent is powif/powi, as in Triton's dispatch
        e = args[1]
        if isinstance(e, Value) and e.dtype.is_int() and not e.dtype.is_bool() or \
                isinstance(e, int) and not isinstance(e, bool) and -(2 ** 31) <= e < 2 ** 31:
            fn = "powi"
    return c.b.math_fn(fn, args, what)


@call_rule("cdiv", lambda x, div: None)
def _cdiv(c: Call) -> Any:
    b = c.b
    x, d = c["x"], c["div"]
    if not isinstance(x, Value) and not isinstance(d, Value):
        return -(-x // d)
    return b.binary("floordiv", b.binary("sub", b.binary("add", x, d), 1), d)


@call_rule("cast", lambda x, dtype, fp_downcast_rounding=None, bitcast=False: None)
def _cast(c: Call) -> Any:
    dt = c.const("dtype")
    rnd = c.const("fp_downcast_rounding", "'rtne' or 'rtz'")
    bitcast = c.const("bitcast", "True or False")
    x = c["x"]
    if not isinstance(dt, DType):
        raise c.err(f"kit.cast needs a dtype such as kit.float32, got {describe(dt)}")
    if not isinstance(x, Value):
        if bitcast or rnd is not None:  # a number first takes its literal dtype
            x = c.b.to_value(x)
        else:
            return c.b.constant(x, dt)
    return c.b.cast(x, dt, bitcast=bool(bitcast), rounding=rnd)


def scalar_constructor(cg, dt: DType, args: list, kwargs: dict, node) -> Value:
    """`kit.float32(x)` (Triton code writes `tl.float32(n)`): x converted to the dtype, a
    number becoming a scalar of it; the same as `x.to(dtype)`."""
    if len(args) != 1 or kwargs:
        raise cg.err(node, f"{dt}(x) takes one argument, the value to convert")
    x = args[0]
    if isinstance(x, Value):
        return cg.b.cast(x, dt)
    if dt.is_ptr() or not isinstance(x, (int, float, bool)):
        raise cg.err(node, f"cannot make a {dt} from {describe(x)}")
    if dt.is_fp8():
        return cg.b.cast(cg.b.constant(float(x), float32), dt)
    return cg.b.constant(x, dt)


def _fold_math(cg, node, name, x):
    fns = {"exp": math.exp, "exp2": lambda v: 2.0 ** v, "log": math.log, "log2": math.log2,
           "sqrt": math.sqrt, "rsqrt": lambda v: 1 / math.sqrt(v), "abs": builtins.abs,
           "sin": math.sin, "cos": math.cos, "sigmoid": lambda v: 1 / (1 + math.exp(-v)),
           "floor": math.floor, "ceil": math.ceil}
    try:
        return fns[name](x)
    except Exception as e:
        raise cg.err(node, f"kit.{name}({x!r}) failed at compile time: {e}") from None


@call_rule("inline_asm_elementwise",
           lambda asm, constraints, args, dtype, is_pure, pack: None)
def _inline_asm_elementwise(c: Call) -> Any:
    asm, constraints = c.const("asm", "a string"), c.const("constraints", "a string")
    if not isinstance(asm, str) or not isinstance(constraints, str):
        raise c.err("kit.inline_asm_elementwise: 'asm' and 'constraints' must be strings")
    args = c["args"]
    if isinstance(args, Value) or not isinstance(args, (list, tuple)):
        raise c.err("kit.inline_asm_elementwise: 'args' must be a list of tiles",
                    "e.g. args=[x, y]")
    dtype = c.const("dtype", "a dtype or a tuple of dtypes")
    dtypes = list(dtype) if isinstance(dtype, (list, tuple)) else [dtype]
    if not dtypes:
        raise c.err("kit.inline_asm_elementwise needs at least one result dtype (as Triton)",
                    "return a dummy tile you do not use")
    pack = c.const("pack", "a constexpr int")
    if isinstance(pack, bool) or not isinstance(pack, int) or pack < 1:
        raise c.err(f"kit.inline_asm_elementwise: 'pack' must be a positive int, got {pack!r}")
    is_pure = c.const("is_pure", "a constexpr bool")
    results = c.b.inline_asm(asm, constraints, list(args), dtypes, bool(is_pure), pack)
    return tuple(results) if isinstance(dtype, (list, tuple)) else results[0]


@call_rule("map_elementwise", lambda scalar_fn, *args, pack=1: None)
def _map_elementwise(c: Call) -> Any:
    """Triton's map_elementwise(scalar_fn, *args): the args broadcast to one shape and
    `scalar_fn` inlined over the whole tiles. Its ops are elementwise (Triton accepts only
    ops valid on scalars there), so the results are Triton's; control flow on an element
    (`if x > 0:`) is a CompileError at that line (not supported yet)."""
    from kitjit.jit import JITFunction

    fn, args = c["scalar_fn"], list(c["args"])
    if not isinstance(fn, JITFunction):
        raise c.err(f"kit.map_elementwise needs a @kit.jit scalar function, got {describe(fn)}")
    if c.const("pack", "a constexpr int") != 1:
        raise c.err("kit.map_elementwise with pack > 1 is not supported yet (Triton's "
                    "tl.map_elementwise pack)", "use pack=1: kitjit maps whole tiles")
    if not args:
        raise c.err("kit.map_elementwise needs at least one argument tile")
    tiles = [a for a in args if isinstance(a, Value)]
    shape: tuple = ()
    for v in tiles:
        shape = c.b.broadcast_shapes(shape, v.shape)
    args = [c.b.broadcast_to(a, shape) if isinstance(a, Value) else a for a in args]
    return c.cg.call(fn, args, {}, c.node)


@call_rule("umulhi", lambda x, y: None)
def _umulhi(c: Call) -> Any:
    return c.b.umulhi(c["x"], c["y"])
