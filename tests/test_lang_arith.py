"""The kitjit language's arithmetic: binary operators, Triton's type promotion, weak Python
literals, math functions and kit.where (see lang_helpers.py for the rules every check follows)."""

from __future__ import annotations

import lang_helpers
import pytest
import torch
from lang_helpers import FLOATS, cdiv, close, poisoned, rand, run_both_poisons, same

import kitjit as kit
from kitjit.ir.types import from_torch


# ============================================================================ arithmetic
@kit.jit
def binop_kernel(X, Y, Out, n, OP: kit.constexpr, EXPECT: kit.constexpr,
                 BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask)
    y = kit.load(Y + offs, mask=mask)
    if OP == "add":
        z = x + y
    elif OP == "sub":
        z = x - y
    elif OP == "mul":
        z = x * y
    elif OP == "div":
        z = x / y
    elif OP == "floordiv":
        z = x // y
    elif OP == "mod":
        z = x % y
    elif OP == "and":
        z = x & y
    elif OP == "or":
        z = x | y
    elif OP == "xor":
        z = x ^ y
    elif OP == "shl":
        z = x << y
    elif OP == "shr":
        z = x >> y
    elif OP == "minimum":
        z = kit.minimum(x, y)
    elif OP == "maximum":
        z = kit.maximum(x, y)
    elif OP == "lt":
        z = x < y
    elif OP == "le":
        z = x <= y
    elif OP == "gt":
        z = x > y
    elif OP == "ge":
        z = x >= y
    elif OP == "eq":
        z = x == y
    else:
        z = x != y
    kit.static_assert(z.dtype == EXPECT, "unexpected result dtype")
    kit.store(Out + offs, z, mask=mask)


def _run_binop(op, x, y, out, expect, block=128):
    n = x.numel()
    binop_kernel[(cdiv(n, block),)](x, y, out, n, OP=op, EXPECT=expect, BLOCK=block)
    return out


PROMOTIONS = [
    # (x dtype, y dtype, result dtype): Triton's rules
    (torch.bfloat16, torch.float16, kit.float16),   # Triton 3.6: fp16 wins (rule 3)
    (torch.float16, torch.bfloat16, kit.float16),
    (torch.float16, torch.float32, kit.float32),
    (torch.bfloat16, torch.float32, kit.float32),
    (torch.float16, torch.float16, kit.float16),
    (torch.bfloat16, torch.bfloat16, kit.bfloat16),
    (torch.int32, torch.float16, kit.float16),
    (torch.int8, torch.bfloat16, kit.float32),  # Triton 3.6: bf16 only with bf16
    (torch.int8, torch.int32, kit.int32),
    (torch.uint8, torch.int32, kit.int32),
    (torch.int8, torch.int8, kit.int8),
    (torch.bool, torch.int32, kit.int32),
]


@pytest.mark.parametrize("xd,yd,rd", PROMOTIONS,
                         ids=[f"{a}-{b}".replace("torch.", "") for a, b, _ in PROMOTIONS])
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_promotion(xd, yd, rd, op):
    n = 300
    small = dict(lo=-9, hi=9) if not xd.is_floating_point else {}
    x = rand(n, xd, **small) if xd not in (torch.uint8, torch.bool) else rand(n, xd, 0, 9) \
        if xd == torch.uint8 else rand(n, xd)
    y = rand(n, yd, lo=-9, hi=9) if not yd.is_floating_point else rand(n, yd)
    out_dt = {kit.float32: torch.float32, kit.float16: torch.float16,
              kit.bfloat16: torch.bfloat16, kit.int32: torch.int32, kit.int8: torch.int8}[rd]
    out = _run_binop(op, x, y, poisoned(n, out_dt), rd)
    f = {"add": torch.add, "sub": torch.sub, "mul": torch.mul}[op]
    ref = f(x.double().cpu(), y.double().cpu())
    if out_dt.is_floating_point:
        close(out, ref)
    else:
        if out_dt == torch.int8:  # int8 arithmetic wraps
            ref = f(x.long(), y.long()).to(torch.int8)
        same(out, ref.long())


@FLOATS
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "minimum", "maximum"])
@pytest.mark.parametrize("n", [128, 1000])
def test_float_binops(dtype, op, n):
    x, y = rand(n, dtype), rand(n, dtype)
    if op == "div":
        y = torch.where(y.abs() < 0.1, torch.full_like(y, 0.5), y)
    # Triton 3.6 divides fp16/bf16 in fp32 (a fp32 result); the store rounds it back
    # and takes bf16 min/max in fp32 (no bf16 min/max in the hardware it targets)
    rd = kit.float32 if op == "div" and dtype in (torch.float16, torch.bfloat16) or \
        op in ("minimum", "maximum") and dtype == torch.bfloat16 else from_torch(dtype)
    out = _run_binop(op, x, y, poisoned(n, dtype), rd)
    a, b = x.double().cpu(), y.double().cpu()
    ref = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
           "minimum": torch.minimum, "maximum": torch.maximum}[op](a, b)
    close(out, ref, what=op)


def test_float_floordiv_mod():
    n = 500
    x = rand(n) * 10
    # divisors +-2^k: exact quotients, so floor() cannot land on the other side of an
    # integer through rounding (fp32 division on the GPU is not correctly rounded)
    # (lang_helpers.DEVICE read at run time: test_gpu.py sets it to "cuda")
    y = (2.0 ** rand(n, torch.int32, -2, 2).float() * torch.sign(rand(n))).to(lang_helpers.DEVICE)
    out = _run_binop("floordiv", x, y, poisoned(n, torch.float32), kit.float32)
    close(out, torch.floor(x.double().cpu() / y.double().cpu()))
    out = _run_binop("mod", x, y, poisoned(n, torch.float32), kit.float32)
    # the GPU's frem (C fmod): the sign of the dividend
    close(out, torch.fmod(x.double().cpu(), y.double().cpu()), 1e-5)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.uint8],
                         ids=["i32", "i8", "u8"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "floordiv", "mod", "minimum", "maximum",
                                "and", "or", "xor"])
def test_int_binops(dtype, op):
    n = 777
    lo = 0 if dtype == torch.uint8 else -100
    x, y = rand(n, dtype, lo, 100), rand(n, dtype, lo, 100)
    y = torch.where(y == 0, torch.ones_like(y), y)
    out = _run_binop(op, x, y, poisoned(n, dtype), from_torch(dtype))
    a, b = x.long(), y.long()
    ref = {"add": a + b, "sub": a - b, "mul": a * b,
           "floordiv": torch.div(a, b, rounding_mode="trunc"),  # C (and Triton) semantics
           "mod": torch.fmod(a, b), "minimum": torch.minimum(a, b),
           "maximum": torch.maximum(a, b), "and": a & b, "or": a | b, "xor": a ^ b}[op]
    same(out, ref.to(dtype), op)  # wraps like the hardware


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8], ids=["i32", "u8"])
@pytest.mark.parametrize("op", ["shl", "shr"])
def test_shifts(dtype, op):
    n = 600
    bits = 32 if dtype == torch.int32 else 8
    x = rand(n, dtype)
    y = rand(n, dtype, 0, bits - 1)
    out = _run_binop(op, x, y, poisoned(n, dtype), from_torch(dtype))
    ref = (x << y) if op == "shl" else (x >> y)  # torch: arithmetic >> on signed, like the GPU
    same(out, ref, op)


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge", "eq", "ne"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32],
                         ids=["fp32", "bf16", "i32"])
def test_comparisons(op, dtype):
    n = 333
    x = rand(n, dtype, -3, 3) if not dtype.is_floating_point else rand(n, dtype)
    y = rand(n, dtype, -3, 3) if not dtype.is_floating_point else rand(n, dtype)
    y[::3] = x[::3]  # some ties, so le/ge/eq/ne are really tested
    ref = {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y, "eq": x == y, "ne": x != y}[op]
    out = run_both_poisons(lambda o: _run_binop(op, x, y, o, kit.int1), n, torch.bool)
    same(out, ref, op)


@kit.jit
def literal_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask)
    # Python literals are weakly typed: they take the tile's dtype
    y = x * 2 + 1
    y = 3 - y
    kit.static_assert(y.dtype == X.dtype.element_ty, "a literal changed the dtype")
    kit.store(Out + offs, y, mask=mask)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8, torch.int32,
                                   torch.uint8], ids=["fp16", "bf16", "i8", "i32", "u8"])
def test_python_literals_are_weak(dtype):
    n = 200
    x = rand(n, dtype, 0, 20) if not dtype.is_floating_point else rand(n, dtype)
    out = poisoned(n, dtype)
    literal_kernel[(cdiv(n, 64),)](x, out, n, BLOCK=64)
    if dtype.is_floating_point:
        close(out, 3 - (x.double().cpu() * 2 + 1))
    else:
        same(out, (3 - (x.long() * 2 + 1)).to(dtype))


@kit.jit
def float_literal_on_int_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n)
    y = x * 0.5  # int tile with a float literal: fp32
    kit.static_assert(y.dtype == kit.float32, "int * float literal is fp32")
    z = x / 4  # true division on ints: fp32
    kit.static_assert(z.dtype == kit.float32, "int / int is fp32")
    kit.store(Out + offs, y + z, mask=offs < n)


def test_float_literal_with_int_tile():
    n = 100
    x = rand(n, torch.int32, -1000, 1000)
    out = poisoned(n, torch.float32)
    float_literal_on_int_kernel[(2,)](x, out, n, BLOCK=64)
    close(out, x.double().cpu() * 0.5 + x.double().cpu() / 4)


# ============================================================================ math
@kit.jit
def unary_kernel(X, Out, n, FN: kit.constexpr, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask, other=1.0)
    if FN == "exp":
        y = kit.exp(x)
    elif FN == "exp2":
        y = kit.exp2(x)
    elif FN == "log":
        y = kit.log(x)
    elif FN == "log2":
        y = kit.log2(x)
    elif FN == "sqrt":
        y = kit.sqrt(x)
    elif FN == "rsqrt":
        y = kit.rsqrt(x)
    elif FN == "abs":
        y = kit.abs(x)
    elif FN == "sin":
        y = kit.sin(x)
    elif FN == "cos":
        y = kit.cos(x)
    elif FN == "sigmoid":
        y = kit.sigmoid(x)
    elif FN == "floor":
        y = kit.floor(x)
    elif FN == "ceil":
        y = kit.ceil(x)
    elif FN == "neg":
        y = -x
    else:
        y = x.exp()  # the method spelling
    kit.static_assert(y.dtype == x.dtype, "math keeps the dtype")
    kit.store(Out + offs, y, mask=mask)


UNARY = {
    # name: (torch reference on float64, input range)
    "exp": (torch.exp, (-5, 5)), "exp2": (torch.exp2, (-5, 5)),
    "log": (torch.log, (0.01, 50)), "log2": (torch.log2, (0.01, 50)),
    "sqrt": (torch.sqrt, (0.0, 50)), "rsqrt": (torch.rsqrt, (0.01, 50)),
    "abs": (torch.abs, (-5, 5)), "sin": (torch.sin, (-3.1, 3.1)),
    "cos": (torch.cos, (-3.1, 3.1)), "sigmoid": (torch.sigmoid, (-8, 8)),
    "floor": (torch.floor, (-20, 20)), "ceil": (torch.ceil, (-20, 20)),
    "neg": (torch.neg, (-5, 5)), "method_exp": (torch.exp, (-5, 5)),
}


@FLOATS
@pytest.mark.parametrize("fn", list(UNARY))
def test_unary_math(fn, dtype):
    n = 513
    ref_fn, (lo, hi) = UNARY[fn]
    x = rand(n, dtype, lo, hi)
    out = poisoned(n, dtype)
    unary_kernel[(cdiv(n, 256),)](x, out, n, FN=fn, BLOCK=256)
    close(out, ref_fn(x.double().cpu()), what=fn)


@kit.jit
def int_math_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n)
    y = kit.sqrt(x)  # ints go through fp32
    kit.static_assert(y.dtype == kit.float32, "sqrt of an int is fp32")
    kit.store(Out + offs, y + kit.abs(x).to(kit.float32) + (~x).to(kit.float32),
              mask=offs < n)


def test_math_on_ints():
    n = 70
    x = rand(n, torch.int32, 1, 10000)
    out = poisoned(n, torch.float32)
    int_math_kernel[(2,)](x, out, n, BLOCK=64)
    a = x.double().cpu()
    close(out, a.sqrt() + a.abs() + (~x).double().cpu())


@kit.jit
def where_kernel(X, Y, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask)
    y = kit.load(Y + offs, mask=mask)
    z = kit.where(x > y, x - y, y * 2)
    z = kit.where(offs % 3 == 0, 0.25, z)  # a literal on one side
    z = z if OFFSET_SIGN > 0 else -z  # a constant condition is Python's, at compile time
    kit.store(Out + offs, z, mask=mask)


OFFSET_SIGN = 1  # a global constant the kernel reads


@FLOATS
def test_where(dtype):
    n = 1000
    x, y = rand(n, dtype), rand(n, dtype)
    out = poisoned(n, dtype)
    where_kernel[(cdiv(n, 128),)](x, y, out, n, BLOCK=128)
    a, b = x.double().cpu(), y.double().cpu()
    ref = torch.where(a > b, a - b, b * 2)
    ref[::3] = 0.25
    close(out, ref)
