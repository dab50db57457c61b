"""The kitjit language, one feature at a time: small kernels run in the CPU interpreter
through the real launch path (`kernel[grid](...)`) and checked against torch in float64.

Rules every check follows: fresh random inputs, outputs poisoned before the launch (NaN for
floats, a sentinel for ints, both values for bools) so an unwritten element fails, sizes
that are and are not multiples of the block, and fp32 within 1e-5 / fp16 and bf16 within
1e-2 of a float64 reference. A representative subset is also compiled for sm_90a (PTX and
cubin, no GPU needed) through `JITFunction.compile`, so the GPU backend sees the same
kernels.
"""

from __future__ import annotations

import math

import pytest
import torch

import kitjit as kit
from kitjit.ir.types import from_torch
from kitjit.testing import check

# ============================================================================ helpers
# Where the tensors live. The CPU run uses the interpreter; test_gpu.py sets "cuda" and runs
# these same tests on the GPU (references are always computed on the CPU in float64).
DEVICE = "cpu"
TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float64: 1e-12}
INT_SENTINEL = -1234567
FLOATS = pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                                 ids=["fp32", "fp16", "bf16"])


def poisoned(shape, dtype, value=None) -> torch.Tensor:
    if isinstance(shape, int):
        shape = (shape,)
    if value is None:
        if dtype.is_floating_point:
            value = float("nan")
        elif dtype == torch.bool:
            value = True
        elif dtype == torch.uint8:
            value = 0xA5
        elif dtype == torch.int8:
            value = -99
        elif dtype == torch.int16:
            value = -12345
        else:
            value = INT_SENTINEL
    return torch.full(shape, value, dtype=dtype, device=DEVICE)


def rand(shape, dtype=torch.float32, lo=None, hi=None) -> torch.Tensor:
    """Fresh random values, never all zeros: randn for floats, randint for ints."""
    if isinstance(shape, int):
        shape = (shape,)
    if dtype == torch.bool:
        return (torch.rand(shape) < 0.5).to(DEVICE)
    if dtype.is_floating_point:
        x = torch.randn(shape, dtype=torch.float64)
        if lo is not None:
            x = lo + (hi - lo) * torch.rand(shape, dtype=torch.float64)
        return x.to(dtype).to(DEVICE)
    info = torch.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return torch.randint(lo, hi + 1, shape, dtype=torch.int64).to(dtype).to(DEVICE)


def close(out: torch.Tensor, ref: torch.Tensor, tol: float | None = None, what="result"):
    """Float output vs a float64 reference; NaN (an unwritten element) never passes."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    tol = TOL[out.dtype] if tol is None else tol
    assert not torch.isnan(out).any(), f"{what}: {int(torch.isnan(out).sum())} NaN elements"
    err = check(out.cpu(), ref.double().cpu(), tol, what)
    assert math.isfinite(err)
    return err


def same(out: torch.Tensor, ref: torch.Tensor, what="result"):
    """Exact comparison for ints and bools (after a poisoned launch)."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    out = out.cpu()
    ref = ref.cpu().to(out.dtype)
    if not torch.equal(out, ref):
        bad = (out != ref).nonzero()
        raise AssertionError(f"{what}: {bad.shape[0]} of {out.numel()} elements differ, first "
                             f"at {bad[0].tolist()}: got {out[tuple(bad[0])]}, "
                             f"want {ref[tuple(bad[0])]}")


def run_both_poisons(make_launch, shape, dtype):
    """For bool/small-int outputs, where no sentinel is impossible: run with two different
    poisons; an unwritten element shows up as a difference."""
    outs = []
    for v in ((True, False) if dtype == torch.bool else (0x5A, 0x25)):
        out = poisoned(shape, dtype, v)
        make_launch(out)
        outs.append(out)
    assert torch.equal(outs[0], outs[1]), "some elements were not written"
    return outs[0]


def spec_of(a):
    """The specialization the runtime gives a launch argument (what JITFunction.compile
    takes): tensors are typed pointers (16 if 16-byte aligned), ints equal to 1 and None are
    folded in as constants."""
    if isinstance(a, torch.Tensor):
        return (f"*{from_torch(a.dtype).name}", 16 if a.data_ptr() % 16 == 0 else 1)
    if a is None:
        return ("const", None)
    if isinstance(a, bool):
        return ("i1", 1)
    if isinstance(a, int):
        if a == 1:
            return ("const", 1)
        return ("i32" if -2 ** 31 <= a < 2 ** 31 else "i64", 16 if a % 16 == 0 else 1)
    if isinstance(a, float):
        return ("fp32", 1)
    raise TypeError(type(a))


def compile_gpu(jf, *args, num_warps=4, arch="sm_90a", **consts):
    """Compile `jf` for the specialization a launch with these args would get, for sm_90a,
    without a GPU; returns the CompiledKernel after checking its stages."""
    specs = [spec_of(a) for a in args]
    assert len(specs) == len(jf.runtime_params), "give every run-time argument"
    const_vals = tuple(consts[c] for c in jf.constexprs)
    ck = jf.compile(specs, const_vals, num_warps, arch)
    assert f".target {arch}" in ck.asm["ptx"]
    assert f".entry {jf.__name__}(" in ck.asm["ptx"]
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    assert ck.metadata["spills"] == 0
    return ck


def cdiv(a, b):
    return -(-a // b)


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
    y = (2.0 ** rand(n, torch.int32, -2, 2).float() * torch.sign(rand(n))).to(DEVICE)
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


# ============================================================================ reductions
@kit.jit
def reduce_kernel(X, Out, M, N, stride_xm, KIND: kit.constexpr, AXIS: kit.constexpr,
                  KEEP: kit.constexpr, BM: kit.constexpr, BN: kit.constexpr):
    rm = kit.arange(0, BM)
    rn = kit.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    fill = 0.0 if KIND == "sum" else (float("-inf") if KIND in ("max", "argmax")
                                       else float("inf"))
    x = kit.load(X + rm[:, None] * stride_xm + rn[None, :], mask=mask, other=fill)
    if KIND == "sum":
        r = kit.sum(x, axis=AXIS, keep_dims=KEEP)
    elif KIND == "max":
        r = kit.max(x, axis=AXIS, keep_dims=KEEP)
    elif KIND == "min":
        r = kit.min(x, axis=AXIS, keep_dims=KEEP)
    elif KIND == "argmax":
        r = kit.argmax(x, axis=AXIS, keep_dims=KEEP)
    else:
        r = kit.argmin(x, axis=AXIS, keep_dims=KEEP)
    if KEEP:
        kit.static_assert(len(r.shape) == 2, "keep_dims keeps the rank")
        if AXIS == 0:
            kit.static_assert(r.shape[0] == 1 and r.shape[1] == BN, "shape [1, BN]")
            kit.store(Out + rn[None, :], r, mask=rn[None, :] < N)
        else:
            kit.static_assert(r.shape[0] == BM and r.shape[1] == 1, "shape [BM, 1]")
            kit.store(Out + rm[:, None], r, mask=rm[:, None] < M)
    else:
        kit.static_assert(len(r.shape) == 1, "the axis is gone")
        if AXIS == 0:
            kit.store(Out + rn, r, mask=rn < N)
        else:
            kit.store(Out + rm, r, mask=rm < M)


@pytest.mark.parametrize("keep", [False, True], ids=["flat", "keep_dims"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("kind", ["sum", "max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("M,N", [(16, 32), (13, 27)])
def test_reductions_2d(kind, axis, keep, M, N):
    BM, BN = 16, 32
    big = rand((M, N + 5))  # a row stride that is not N
    x = big[:, :N]
    is_arg = kind.startswith("arg")
    length = N if axis == 0 else M
    out = poisoned(length, torch.int32 if is_arg else torch.float32)
    reduce_kernel[(1,)](big, out, M, N, big.stride(0), KIND=kind, AXIS=axis, KEEP=keep,
                        BM=BM, BN=BN)
    d = axis
    ref = {"sum": lambda t: t.sum(d), "max": lambda t: t.amax(d), "min": lambda t: t.amin(d),
           "argmax": lambda t: t.argmax(d), "argmin": lambda t: t.argmin(d)}[kind](x.double().cpu())
    if is_arg:
        same(out, ref)
    else:
        close(out, ref, what=f"{kind} axis={axis}")


@kit.jit
def reduce_dtype_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n)
    s = kit.sum(x, axis=0)
    # Triton 3.6's result dtypes (kitjit accumulates fp16/bf16 in fp32, rounds once)
    if X.dtype.element_ty == kit.float16 or X.dtype.element_ty == kit.bfloat16:
        kit.static_assert(s.dtype == x.dtype, "fp16/bf16 sums keep the dtype")
    if X.dtype.element_ty == kit.int8:
        kit.static_assert(s.dtype == kit.int32, "int8 sums give int32")
    m = kit.max(x, axis=0)
    if X.dtype.element_ty == kit.int32:
        kit.static_assert(m.dtype == x.dtype, "max keeps 32-bit dtypes")
    elif X.dtype.element_ty == kit.int8:
        kit.static_assert(m.dtype == kit.int32, "max of narrow ints gives int32")
    else:
        kit.static_assert(m.dtype == kit.float32, "max of fp16/bf16 gives fp32")
    total = kit.sum(x)  # all axes
    kit.store(Out, s)
    kit.store(Out + 1, m)
    kit.store(Out + 2, total)
    kit.store(Out + 3, x.sum(0) - x.max(0))  # method spellings (padding is 0 < max)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8, torch.int32],
                         ids=["fp16", "bf16", "i8", "i32"])
def test_reduction_accumulator_dtypes(dtype):
    n = 200  # 200 int8 values of up to 100 overflow int8 but not the int32 accumulator
    x = rand(n, dtype, 50, 100) if not dtype.is_floating_point else rand(n, dtype)
    odt = torch.float32 if dtype.is_floating_point else torch.int32
    out = poisoned(4, odt)
    reduce_dtype_kernel[(1,)](x, out, n, BLOCK=256)
    a = x.double().cpu()
    ref = torch.stack([a.sum(), a.max(), a.sum(), a.sum() - a.max()])
    if dtype.is_floating_point:  # each sum rounded once to the input's dtype
        tol = 2e-3 if dtype == torch.float16 else 1.6e-2
        close(out[[0, 2, 3]], ref[[0, 2, 3]], tol)
        close(out[1:2], ref[1:2], 0)
    else:
        same(out, ref.long())


def test_argmax_takes_the_first_of_ties():
    M, N = 8, 32
    x = rand((M, N), torch.int32, 0, 2).float()  # many ties
    out = poisoned(M, torch.int32)
    reduce_kernel[(1,)](x, out, M, N, N, KIND="argmax", AXIS=1, KEEP=False, BM=8, BN=32)
    same(out, torch.tensor([int((r == r.max()).nonzero()[0]) for r in x.cpu()]))


# ============================================================================ casts
@kit.jit
def cast_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n)
    kit.store(Out + offs, x.to(Out.dtype.element_ty), mask=offs < n)


CASTS = [
    (torch.float32, torch.int32), (torch.float32, torch.bfloat16),
    (torch.float32, torch.float16), (torch.bfloat16, torch.float32),
    (torch.float16, torch.bfloat16), (torch.bfloat16, torch.float16),
    (torch.int32, torch.float32), (torch.int32, torch.int8), (torch.int8, torch.int32),
    (torch.uint8, torch.int32), (torch.int32, torch.bfloat16), (torch.float16, torch.int32),
    (torch.bool, torch.int32), (torch.bool, torch.float32), (torch.int32, torch.bool),
    (torch.float32, torch.bool), (torch.float32, torch.uint8), (torch.int32, torch.float16),
]


@pytest.mark.parametrize("src,dst", CASTS,
                         ids=[f"{a}-{b}".replace("torch.", "") for a, b in CASTS])
def test_casts(src, dst):
    n = 300
    if src.is_floating_point:
        x = rand(n, src) * 40
        if dst == torch.uint8:
            x = x.abs()  # negative floats to unsigned saturate on the GPU; C leaves it undefined
        x[::7] = 0
    elif src == torch.bool:
        x = rand(n, src)
    else:
        x = rand(n, src, 0 if src == torch.uint8 else -1000, 1000)
        x[::5] = 0

    def launch(o):
        cast_kernel[(cdiv(n, 128),)](x, o, n, BLOCK=128)

    if dst in (torch.bool, torch.uint8, torch.int8):
        out = run_both_poisons(launch, n, dst)
    else:
        out = poisoned(n, dst)
        launch(out)
    if dst.is_floating_point:
        close(out, x.double().cpu())
    elif dst == torch.bool:
        same(out, x != 0)
    elif src.is_floating_point:
        same(out, x.double().cpu().trunc().long())  # toward zero
    else:
        same(out, x.long().to(dst))  # ints wrap


# ============================================================================ shapes
@kit.jit
def outer_kernel(A, B, Out, M, N, stride_om, BM: kit.constexpr, BN: kit.constexpr):
    rm = kit.program_id(0) * BM + kit.arange(0, BM)
    rn = kit.program_id(1) * BN + kit.arange(0, BN)
    a = kit.load(A + rm, mask=rm < M, other=0.0)
    b = kit.load(B + rn, mask=rn < N, other=0.0)
    z = a[:, None] * b[None, :] + rm[:, None]  # [BM, 1] * [1, BN] + [BM, 1]
    z = z - kit.expand_dims(b, 0)  # the function spelling of b[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    kit.store(Out + rm[:, None] * stride_om + rn[None, :], z, mask=mask)


@pytest.mark.parametrize("M,N", [(32, 64), (37, 50), (1, 70)])
def test_broadcasting_outer(M, N):
    a, b = rand(M), rand(N)
    out = poisoned((M, N + 3), torch.float32)  # padded rows: the stride is not N
    outer_kernel[(cdiv(M, 16), cdiv(N, 32))](a, b, out, M, N, out.stride(0), BM=16, BN=32)
    a, b = a.double().cpu(), b.double().cpu()
    rows = torch.arange(M).double()[:, None]
    ref = a[:, None] * b[None, :] + rows - b[None, :]
    # fp32's error is relative to the terms, not to their sum (a*b - b cancels where a ~ 1,
    # as row 0 of a fresh draw may): each element within 1e-6 of its terms' magnitude
    scale = (a[:, None] * b[None, :]).abs() + rows + b.abs()[None, :]
    got = out[:, :N].double().cpu()
    assert not torch.isnan(got).any(), "an element was not written"
    assert ((got - ref).abs() <= 1e-6 * scale).all(), float(((got - ref).abs() / scale).max())
    assert torch.isnan(out[:, N:]).all(), "the padding was written"


@kit.jit
def transpose_kernel(X, Y, M, N, stride_xm, stride_xn, stride_ym,
                     BM: kit.constexpr, BN: kit.constexpr):
    """Y = X.T for a strided (non-contiguous) X."""
    rm = kit.program_id(0) * BM + kit.arange(0, BM)
    rn = kit.program_id(1) * BN + kit.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = kit.load(X + rm[:, None] * stride_xm + rn[None, :] * stride_xn, mask=mask)
    kit.store(Y + rn[None, :] * stride_ym + rm[:, None], x, mask=mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32],
                         ids=["fp32", "bf16", "i32"])
@pytest.mark.parametrize("M,N", [(32, 32), (45, 19)])
def test_2d_strided_loads(M, N, dtype):
    base = rand((2 * M + 1, N + 7), dtype, -100, 100) if not dtype.is_floating_point \
        else rand((2 * M + 1, N + 7), dtype)
    x = base[1::2, 3:3 + N]  # row stride 2*(N+7), column offset 3
    assert x.shape == (M, N) and not x.is_contiguous()
    y = poisoned((N, M), dtype)
    transpose_kernel[(cdiv(M, 16), cdiv(N, 16))](x, y, M, N, x.stride(0), x.stride(1),
                                                 y.stride(0), BM=16, BN=16)
    if dtype.is_floating_point:
        close(y, x.t().double().cpu(), 0)
    else:
        same(y, x.t())


@kit.jit
def full_zeros_kernel(Out, v, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    a = kit.full((BLOCK,), 3, kit.int32)
    b = kit.zeros((BLOCK,), kit.float32) + v
    c = kit.broadcast_to(kit.full((1,), 2.0, kit.float16), (BLOCK,))
    kit.store(Out + offs, a + b + c)


def test_full_zeros_broadcast_to():
    out = poisoned(64, torch.float32)
    v = float(torch.randn(()))
    full_zeros_kernel[(1,)](out, v, BLOCK=64)
    close(out, torch.full((64,), 5.0 + v, dtype=torch.float64))


@kit.jit
def cdiv_kernel(Out, n, BLOCK: kit.constexpr):
    kit.store(Out, kit.cdiv(n, BLOCK))
    kit.store(Out + 1, kit.cdiv(n, 7))
    kit.store(Out + 2, kit.cdiv(BLOCK * 3 + 1, BLOCK))  # folds at compile time


@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000])
def test_cdiv(n):
    out = poisoned(3, torch.int32)
    cdiv_kernel[(1,)](out, n, BLOCK=64)
    same(out, torch.tensor([cdiv(n, 64), cdiv(n, 7), 4]))
    assert kit.cdiv(n, 64) == cdiv(n, 64)  # also a host helper


# ============================================================================ control flow
@kit.jit
def row_sum_loop_kernel(X, Out, n_cols, stride, BLOCK: kit.constexpr):
    """range loop over column chunks with a loop-carried tile and a loop-carried scalar."""
    row = kit.program_id(0)
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    biggest = kit.full((BLOCK,), float("-inf"), kit.float32)
    count = 0
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = kit.load(X + row * stride + cols, mask=cols < n_cols, other=0.0).to(kit.float32)
        acc += x
        biggest = kit.maximum(biggest, kit.where(cols < n_cols, x, float("-inf")))
        count = count + 1
    kit.store(Out + row * 3, kit.sum(acc, axis=0))
    kit.store(Out + row * 3 + 1, kit.max(biggest, axis=0))
    kit.store(Out + row * 3 + 2, count)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("n_cols", [64, 200, 1, 65])
def test_range_loop_carried(n_cols, dtype):
    rows = 5
    x = rand((rows, n_cols), dtype)
    out = poisoned((rows, 3), torch.float32)
    row_sum_loop_kernel[(rows,)](x, out, n_cols, x.stride(0), BLOCK=64)
    a = x.double().cpu()
    close(out[:, 0], a.sum(1), 1e-5)
    close(out[:, 1], a.amax(1), 0)
    same(out[:, 2].long(), torch.full((rows,), cdiv(n_cols, 64)))


@kit.jit
def loop_forms_kernel(Out, lo, hi, step, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.int32)
    for i in range(lo, hi, step):  # run-time bounds and step
        acc += i
    for j in range(3):  # constant bound: still a loop
        for k in range(j, 4):  # nested, inner bound from the outer induction variable
            acc += offs * k
    for _ in range(hi, lo):  # empty
        acc += 1000
    kit.store(Out + offs, acc)


@pytest.mark.parametrize("lo,hi,step", [(0, 10, 1), (3, 40, 7), (10, 0, -3), (5, 5, 1)])
def test_loop_forms(lo, hi, step):
    out = poisoned(16, torch.int32)
    loop_forms_kernel[(1,)](out, lo, hi, step, BLOCK=16)
    inner = sum(k for j in range(3) for k in range(j, 4))
    empty = 1000 * len(range(hi, lo))
    same(out, sum(range(lo, hi, step)) + torch.arange(16) * inner + empty)


@kit.jit
def static_range_kernel(X, Out, n, BLOCK: kit.constexpr, UNROLL: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    for i in kit.static_range(UNROLL):
        # i is a Python int: it can index into compile-time things and pick constexpr branches
        x = kit.load(X + i * n + offs, mask=offs < n, other=0.0)
        if i % 2 == 0:
            acc += x * (i + 1)
        else:
            acc -= x
    for i in kit.static_range(1, 8, 3):  # 1, 4, 7
        acc += i
    kit.store(Out + offs, acc, mask=offs < n)


def test_static_range():
    n, U = 50, 5
    x = rand((U, n))
    out = poisoned(n, torch.float32)
    static_range_kernel[(1,)](x, out, n, BLOCK=64, UNROLL=U)
    a = x.double().cpu()
    ref = sum(a[i] * (i + 1) if i % 2 == 0 else -a[i] for i in range(U)) + 12
    close(out, ref)
    ck = compile_gpu(static_range_kernel, x, out, n, BLOCK=64, UNROLL=U)
    assert "scf.for" not in ck.asm["tir"]  # unrolled: no loop left
    assert " for " not in ck.asm["tir"] and "for(" not in ck.asm["tir"]


@kit.jit
def const_if_kernel(X, Out, n, MODE: kit.constexpr, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n)
    if MODE == 0:
        y = x * 2
    elif MODE == 1:
        y = x + 1
    else:
        y = this_name_does_not_exist  # noqa: F821 - never compiled: MODE is a constexpr
    kit.store(Out + offs, y, mask=offs < n)


@pytest.mark.parametrize("mode", [0, 1])
def test_if_on_constexpr_compiles_one_branch(mode):
    n = 40
    x = rand(n)
    out = poisoned(n, torch.float32)
    const_if_kernel[(1,)](x, out, n, MODE=mode, BLOCK=64)
    close(out, x.double().cpu() * 2 if mode == 0 else x.double().cpu() + 1)
    if mode == 0:
        compile_gpu(const_if_kernel, x, out, n, MODE=0, BLOCK=64)


@kit.jit
def runtime_if_kernel(X, Out, n, threshold, BLOCK: kit.constexpr):
    pid = kit.program_id(0)
    offs = pid * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask)
    scale = 1.0
    shift = kit.zeros((BLOCK,), kit.float32)
    if pid % 2 == 1:  # a run-time scalar condition
        y = x * 2.0
        scale = 3.0
    else:
        y = x - 1.0
        shift = shift + 0.5
    if threshold > 0:  # no else: values from before the if flow into the merge
        y = y + threshold
    s = kit.sum(kit.where(mask, x, 0.0), axis=0)
    if s > 0.0:  # a condition computed from a reduction
        flag = 1
    else:
        flag = -1
    kit.store(Out + offs, (y * scale + shift) * flag, mask=mask)


@pytest.mark.parametrize("threshold", [5, -2])
def test_if_on_runtime_scalars(threshold):
    n, B = 300, 64
    x = rand(n)
    out = poisoned(n, torch.float32)
    runtime_if_kernel[(cdiv(n, B),)](x, out, n, threshold, BLOCK=B)
    a = x.double().cpu()
    ref = torch.empty_like(a)
    for p in range(cdiv(n, B)):
        sl = slice(p * B, min(n, (p + 1) * B))
        y = a[sl] * 2.0 * 3.0 if p % 2 == 1 else (a[sl] - 1.0) + 0.5
        if p % 2 == 1:
            y = (a[sl] * 2.0 + (threshold if threshold > 0 else 0)) * 3.0
        else:
            y = (a[sl] - 1.0 + (threshold if threshold > 0 else 0)) + 0.5
        ref[sl] = y * (1 if a[sl].sum() > 0 else -1)
    close(out, ref)
    compile_gpu(runtime_if_kernel, x, out, n, threshold, BLOCK=B)


@kit.jit
def loop_with_if_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    for i in range(0, n):
        x = kit.load(X + i * BLOCK + offs)
        if i % 3 == 0:
            acc = acc + x
        else:
            acc = kit.maximum(acc, x)
    kit.store(Out + offs, acc)


def test_if_inside_loop():
    n, B = 7, 32
    x = rand((n, B))
    out = poisoned(B, torch.float32)
    loop_with_if_kernel[(1,)](x, out, n, BLOCK=B)
    acc = torch.zeros(B, dtype=torch.float64)
    for i in range(n):
        acc = acc + x[i].double().cpu() if i % 3 == 0 else torch.maximum(acc, x[i].double().cpu())
    close(out, acc)
    compile_gpu(loop_with_if_kernel, x, out, n, BLOCK=B)


# ============================================================================ calls
@kit.jit
def _scale_shift(x, scale, SHIFT: kit.constexpr):
    return x * scale + SHIFT


@kit.jit
def _stats(x, mask, n):
    mean = kit.sum(kit.where(mask, x, 0.0), axis=0) / n
    d = kit.where(mask, x - mean, 0.0)
    var = kit.sum(d * d, axis=0) / n
    return mean, var  # a tuple


@kit.jit
def _nested(x, k: kit.constexpr):
    return _scale_shift(x, 2.0, SHIFT=k) - k  # calls another @kit.jit function


@kit.jit
def _store_row(Ptr, offs, v, mask):  # no return value
    kit.store(Ptr + offs, v, mask=mask)


@kit.jit
def calls_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask, other=0.0)
    y = _scale_shift(x, 3.0, 1.5)
    y = _scale_shift(y, scale=0.5, SHIFT=-1)  # keywords
    mean, var = _stats(x, mask, n)
    z = _nested(y, 4)
    _store_row(Out, offs, z + mean * 0.0, mask)
    kit.store(Out + n, mean)
    kit.store(Out + n + 1, var)


def test_calls_of_jit_functions():
    n = 100
    x = rand(n) + 2  # a mean well away from 0, so its relative error is meaningful
    out = poisoned(n + 2, torch.float32)
    calls_kernel[(1,)](x, out, n, BLOCK=128)
    a = x.double().cpu()
    y = (a * 3.0 + 1.5) * 0.5 - 1
    z = (y * 2.0 + 4) - 4
    close(out[:n], z)
    mean = a.mean()
    close(out[n:n + 1], mean.reshape(1))
    close(out[n + 1:], ((a - mean) ** 2).mean().reshape(1))
    compile_gpu(calls_kernel, x, out, n, BLOCK=128)


def test_jit_function_called_from_python_raises():
    with pytest.raises(RuntimeError, match="grid"):
        calls_kernel(torch.zeros(1), torch.zeros(1), 1, BLOCK=1)
    with pytest.raises(RuntimeError, match="inside a @kit.jit"):
        kit.load(None)


# ============================================================================ grids
@kit.jit
def grid_kernel(Out):
    x = kit.program_id(0)
    y = kit.program_id(1)
    z = kit.program_id(2)
    nx = kit.num_programs(0)
    ny = kit.num_programs(1)
    nz = kit.num_programs(2)
    flat = (z * ny + y) * nx + x
    kit.store(Out + flat * 4, x + 10 * y + 100 * z)
    kit.store(Out + flat * 4 + 1, nx)
    kit.store(Out + flat * 4 + 2, ny)
    kit.store(Out + flat * 4 + 3, nz)


@pytest.mark.parametrize("grid", [(5,), (3, 4), (3, 4, 2), (1, 1, 7), 6])
def test_grids_and_num_programs(grid):
    g = (grid,) if isinstance(grid, int) else grid
    g3 = tuple(g) + (1,) * (3 - len(g))
    total = g3[0] * g3[1] * g3[2]
    out = poisoned((total, 4), torch.int32)
    grid_kernel[grid](out)
    zz, yy, xx = torch.meshgrid(torch.arange(g3[2]), torch.arange(g3[1]),
                                torch.arange(g3[0]), indexing="ij")
    ref = torch.stack([(xx + 10 * yy + 100 * zz).reshape(-1),
                       torch.full((total,), g3[0]), torch.full((total,), g3[1]),
                       torch.full((total,), g3[2])], 1)
    same(out, ref)


def test_grid_callable_of_meta():
    n = 1000
    x = rand(n)
    out = poisoned(n, torch.float32)
    seen = {}

    def grid(meta):
        seen.update(meta)
        return (kit.cdiv(n, meta["BLOCK"]),)

    const_if_kernel  # noqa: B018 - (unrelated; keeps the names below distinct)
    from_vec = rand(n)
    binop_kernel[lambda meta: (kit.cdiv(n, meta["BLOCK"]),)](
        x, from_vec, out, n, OP="add", EXPECT=kit.float32, BLOCK=128)
    close(out, x.double().cpu() + from_vec.double().cpu())
    out2 = poisoned(n, torch.float32)
    binop_kernel[grid](x, from_vec, out2, n, OP="mul", EXPECT=kit.float32, BLOCK=256)
    close(out2, x.double().cpu() * from_vec.double().cpu())
    assert seen["BLOCK"] == 256 and seen["OP"] == "mul"


def test_empty_grid_runs_nothing():
    out = poisoned(4, torch.int32)
    grid_kernel[(0,)](out)
    grid_kernel[(2, 0)](out)
    assert (out == INT_SENTINEL).all()


# ============================================================================ arguments
@kit.jit
def stride_kernel(X, Out, n, stride, scale, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs * stride, mask=mask)
    kit.store(Out + offs, x * scale + stride, mask=mask)


@pytest.mark.parametrize("n", [1, 2, 100])
@pytest.mark.parametrize("stride", [1, 3])
@pytest.mark.parametrize("scale", [1, 2])
def test_int_args_equal_to_one(n, stride, scale):
    """1 is specialized as a constant: n == 1, stride == 1 and an int scale == 1 must give
    the same results as any other value."""
    base = rand(n * stride + 1)
    x = base[: n * stride]
    out = poisoned(n, torch.float32)
    stride_kernel[(cdiv(n, 64),)](x, out, n, stride, scale, BLOCK=64)
    close(out, x[::stride].double().cpu() * scale + stride)


def test_one_is_a_separate_specialization():
    n = 64
    x = rand(n * 2)
    for stride in (1, 2, 1, 2):
        out = poisoned(n, torch.float32)
        stride_kernel[(1,)](x, out, n, stride, 2.0, BLOCK=64)
        close(out, x[::stride][:n].double().cpu() * 2.0 + stride)
    specs = [s for s in (spec_of(1), spec_of(2))]
    assert specs[0] == ("const", 1) and specs[1][0] == "i32"
    ck1 = compile_gpu(stride_kernel, x, out, n, 1, 2.0, BLOCK=64)
    ck2 = compile_gpu(stride_kernel, x, out, n, 2, 2.0, BLOCK=64)
    assert ck1.metadata["arg_kinds"].count("const") == 1
    assert ck2.metadata["arg_kinds"].count("const") == 0


@kit.jit
def optional_kernel(X, Bias, Out, n, flag, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask)
    if Bias is not None:  # None is folded in: this `if` happens at compile time
        x = x + kit.load(Bias + offs, mask=mask)
    if flag:  # a bool argument: run-time i1
        x = -x
    y = kit.where(flag, x * 2, x)  # a scalar bool condition, broadcast
    kit.store(Out + offs, y, mask=mask)


@pytest.mark.parametrize("flag", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
def test_none_and_bool_args(with_bias, flag):
    n = 150
    x = rand(n)
    bias = rand(n) if with_bias else None
    out = poisoned(n, torch.float32)
    optional_kernel[(cdiv(n, 64),)](x, bias, out, n, flag, BLOCK=64)
    ref = x.double().cpu() + (bias.double().cpu() if with_bias else 0)
    if flag:
        ref = -ref * 2
    close(out, ref)
    if with_bias and flag:
        compile_gpu(optional_kernel, x, bias, out, n, flag, BLOCK=64)
    if not with_bias and not flag:
        ck = compile_gpu(optional_kernel, x, bias, out, n, flag, BLOCK=64)
        assert ck.metadata["arg_kinds"] == ["ptr", "const", "ptr", "i32", "i1"]


@kit.jit
def scalar_args_kernel(Out, i, f, big):
    kit.store(Out, i * 2 + 1)
    kit.store(Out + 1, (f * 2.0).to(kit.int32))
    kit.store(Out + 2, (big - 2 ** 33).to(kit.int32))  # an int64 argument


def test_scalar_args():
    out = poisoned(3, torch.int32)
    scalar_args_kernel[(1,)](out, 20, 3.25, 2 ** 33 + 5)
    same(out, torch.tensor([41, 6, 5]))


# ============================================================================ tensor dtypes
@kit.jit
def copy_scale_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask)
    if X.dtype.element_ty == kit.int1:
        y = x == 0  # bools: not
    elif X.dtype.element_ty == kit.uint8:
        y = x + 3  # wraps at 256
    else:
        y = x * 3
    kit.static_assert(y.dtype == X.dtype.element_ty, "the dtype is kept")
    kit.store(Out + offs, y, mask=mask)


TENSOR_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.uint8,
                 torch.bool, torch.int8, torch.int16, torch.int64, torch.float64]


@pytest.mark.parametrize("dtype", TENSOR_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("n", [64, 99])
def test_tensor_dtypes(dtype, n):
    x = rand(n, dtype) if dtype != torch.int64 else rand(n, dtype, -2 ** 40, 2 ** 40)

    def launch(o):
        copy_scale_kernel[(cdiv(n, 32),)](x, o, n, BLOCK=32)

    if dtype in (torch.bool, torch.uint8, torch.int8):
        out = run_both_poisons(launch, n, dtype)
    else:
        out = poisoned(n, dtype)
        launch(out)
    if dtype == torch.bool:
        same(out, ~x)
    elif dtype == torch.uint8:
        same(out, ((x.long() + 3) % 256).to(dtype))
    elif dtype.is_floating_point:
        close(out, x.double().cpu() * 3)
    else:
        same(out, (x.long() * 3).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int32,
                                   torch.uint8, torch.bool],
                         ids=lambda d: str(d).replace("torch.", ""))
def test_tensor_dtypes_compile_for_sm90(dtype):
    x = rand(64, dtype)
    compile_gpu(copy_scale_kernel, x, torch.empty_like(x), 64, BLOCK=32)


# ============================================================================ kit.dot
@kit.jit
def dot_kernel(A, B, C, M, N, K, stride_am, stride_bk, stride_cm,
               BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
               LOOP: kit.constexpr):
    rm = kit.program_id(0) * BM + kit.arange(0, BM)
    rn = kit.program_id(1) * BN + kit.arange(0, BN)
    rk = kit.arange(0, BK)
    if LOOP:
        acc = kit.zeros((BM, BN), kit.float32)
        for k0 in range(0, K, BK):
            ka = k0 + rk
            a = kit.load(A + rm[:, None] * stride_am + ka[None, :],
                         mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
            b = kit.load(B + ka[:, None] * stride_bk + rn[None, :],
                         mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = kit.dot(a, b, acc)
    else:  # one K block: no accumulator argument, and the @ operator
        a = kit.load(A + rm[:, None] * stride_am + rk[None, :],
                     mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = kit.load(B + rk[:, None] * stride_bk + rn[None, :],
                     mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = a @ b
    kit.static_assert(acc.dtype == kit.float32, "dot accumulates in fp32")
    kit.store(C + rm[:, None] * stride_cm + rn[None, :], acc.to(C.dtype.element_ty),
              mask=(rm[:, None] < M) & (rn[None, :] < N))


DOTS = [  # (M, N, K, BM, BN, BK, loop)
    (32, 32, 32, 32, 32, 32, False),
    (64, 64, 48, 64, 64, 16, True),
    (64, 64, 48, 64, 64, 32, True),  # K is not a multiple of BK
    (70, 50, 45, 64, 64, 32, True),  # ragged everywhere, 2x1 programs
    (20, 33, 30, 32, 32, 32, False),  # one block, masked on all three dims
    (96, 40, 100, 32, 32, 32, True),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("M,N,K,BM,BN,BK,loop", DOTS,
                         ids=[f"{m}x{n}x{k}-b{bm}x{bn}x{bk}" for m, n, k, bm, bn, bk, _ in DOTS])
@pytest.mark.parametrize("out_dtype", ["same", "fp32"])
def test_dot(M, N, K, BM, BN, BK, loop, dtype, out_dtype):
    a = rand((M, K), dtype)
    b = rand((K, N), dtype)
    odt = dtype if out_dtype == "same" else torch.float32
    c = poisoned((M, N), odt)
    dot_kernel[(cdiv(M, BM), cdiv(N, BN))](a, b, c, M, N, K, a.stride(0), b.stride(0),
                                           c.stride(0), BM=BM, BN=BN, BK=BK, LOOP=loop)
    close(c, a.double().cpu() @ b.double().cpu(), 1e-2 if odt != torch.float32 else 1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("BM,BN,BK,loop", [(64, 64, 32, True), (32, 32, 32, False)])
def test_dot_compiles_for_sm90(dtype, BM, BN, BK, loop):
    a, b = rand((BM, BK), dtype), rand((BK, BN), dtype)
    c = poisoned((BM, BN), dtype)
    ck = compile_gpu(dot_kernel, a, b, c, 50, 50, 40, BK, BN, BN, BM=BM, BN=BN, BK=BK,
                     LOOP=loop)
    assert "mma.sync" in ck.asm["ptx"]


# ============================================================================ more forms
@kit.jit
def merge_consts_kernel(Out, n):
    if n > 3:  # a Python int in one branch, a float in the other: they meet at fp32
        s = 2
    else:
        s = 3.5
    t = 1
    if n > 10:  # only one branch assigns: the other keeps the value from before
        t = 7
    kit.store(Out, s)
    kit.store(Out + 1, t)


@pytest.mark.parametrize("n", [2, 5, 11])
def test_if_merges_python_numbers(n):
    out = poisoned(2, torch.float32)
    merge_consts_kernel[(1,)](out, n)
    close(out, torch.tensor([2.0 if n > 3 else 3.5, 7 if n > 10 else 1]), 0)


@kit.jit
def pointer_loop_kernel(X, Out, n_rows, stride, BLOCK: kit.constexpr):
    """Pointers carried through a loop (`X += stride`) and chosen by a run-time if."""
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    for _ in range(n_rows):
        acc += kit.load(X + offs)
        X += stride
    if n_rows > 2:
        P = Out
    else:
        P = Out + BLOCK
    kit.store(P + offs, acc)


@pytest.mark.parametrize("n_rows", [2, 5])
def test_pointers_in_loops_and_ifs(n_rows):
    B = 32
    x = rand((n_rows, B + 3))
    out = poisoned(2 * B, torch.float32)
    pointer_loop_kernel[(1,)](x, out, n_rows, x.stride(0), BLOCK=B)
    half = slice(0, B) if n_rows > 2 else slice(B, 2 * B)
    close(out[half], x[:, :B].double().cpu().sum(0))
    assert torch.isnan(out[slice(B, 2 * B) if n_rows > 2 else slice(0, B)]).all()


@kit.jit
def scalar_forms_kernel(X, Out, n, lo, hi):
    x = kit.load(X)  # a scalar load through a plain pointer
    a = x if n > 3 else -x  # a run-time conditional expression
    b = max(x, 0.5) + min(x, -0.5) + abs(x)  # Python builtins on values
    c = 1.0 if lo < n < hi else 0.0  # a chained comparison on run-time values
    d = (n > 0 and n < 100) or not (lo < 0)  # boolean operators on run-time scalars
    kit.store(Out, a)
    kit.store(Out + 1, b)
    kit.store(Out + 2, c)
    kit.store(Out + 3, d.to(kit.float32))
    kit.store(Out + 4 + kit.arange(0, 4), 9.0)  # a number stored to a tile of pointers


@pytest.mark.parametrize("n,lo,hi", [(5, 0, 10), (2, -1, 1), (200, 3, 300)])
def test_scalar_forms(n, lo, hi):
    x = rand(1)
    out = poisoned(8, torch.float32)
    scalar_forms_kernel[(1,)](x, out, n, lo, hi)
    v = float(x.cpu())
    d = (0 < n < 100) or not (lo < 0)
    ref = [v if n > 3 else -v, max(v, 0.5) + min(v, -0.5) + abs(v),
           1.0 if lo < n < hi else 0.0, float(d), 9, 9, 9, 9]
    close(out, torch.tensor(ref), 1e-6)


@kit.jit
def tile3d_kernel(Out, BLOCK: kit.constexpr):
    a = kit.arange(0, BLOCK)
    t = a[:, None, None] + a[None, :, None] * 10 + a[None, None, :] * 100
    s = kit.sum(t, axis=1)
    kit.store(Out + a[:, None] * BLOCK + a[None, :], s)


def test_3d_tiles():
    out = poisoned((8, 8), torch.int32)
    tile3d_kernel[(1,)](out, BLOCK=8)
    a = torch.arange(8)
    same(out, (a[:, None, None] + a[None, :, None] * 10 + a[None, None, :] * 100).sum(1))


@pytest.mark.parametrize("num_warps", [1, 2, 8])
def test_num_warps(num_warps):
    """num_warps changes how tiles spread over threads, never the result."""
    M, N = 13, 70
    x = rand((M, N))
    out = poisoned(M, torch.float32)
    reduce_kernel[(1,)](x, out, M, N, N, KIND="sum", AXIS=1, KEEP=False, BM=16, BN=128,
                        num_warps=num_warps)
    close(out, x.double().cpu().sum(1))
    if num_warps != 2:
        compile_gpu(reduce_kernel, x, out, M, N, N, KIND="sum", AXIS=1, KEEP=False, BM=16,
                    BN=128, num_warps=num_warps)


# ============================================================================ sm_90a
def _f(n, dt=torch.float32):
    return rand(n, dt)


SM90_CASES = {
    # name: (kernel, args, constexprs)
    "binop-bf16+fp16": lambda: (binop_kernel, (_f(64, torch.bfloat16), _f(64, torch.float16),
                                               _f(64), 64), dict(OP="add", EXPECT=kit.float16,
                                                                 BLOCK=64)),
    "binop-i8-floordiv": lambda: (binop_kernel, (_f(64, torch.int8), _f(64, torch.int8),
                                                 _f(64, torch.int8), 60),
                                  dict(OP="floordiv", EXPECT=kit.int8, BLOCK=64)),
    "binop-u8-shr": lambda: (binop_kernel, (_f(64, torch.uint8), _f(64, torch.uint8),
                                            _f(64, torch.uint8), 64),
                             dict(OP="shr", EXPECT=kit.uint8, BLOCK=64)),
    "binop-cmp": lambda: (binop_kernel, (_f(64), _f(64), _f(64, torch.bool), 64),
                          dict(OP="le", EXPECT=kit.int1, BLOCK=64)),
    "unary-sin-fp16": lambda: (unary_kernel, (_f(64, torch.float16), _f(64, torch.float16),
                                              64), dict(FN="sin", BLOCK=256)),
    "unary-sigmoid-bf16": lambda: (unary_kernel, (_f(64, torch.bfloat16),
                                                  _f(64, torch.bfloat16), 64),
                                   dict(FN="sigmoid", BLOCK=256)),
    "where": lambda: (where_kernel, (_f(64), _f(64), _f(64), 64), dict(BLOCK=128)),
    "argmin-axis0-keep": lambda: (reduce_kernel, (_f((16, 32)), _f(32, torch.int32), 16, 32,
                                                  32), dict(KIND="argmin", AXIS=0, KEEP=True,
                                                            BM=16, BN=32)),
    "max-axis1": lambda: (reduce_kernel, (_f((16, 32)), _f(16), 16, 32, 32),
                          dict(KIND="max", AXIS=1, KEEP=False, BM=16, BN=32)),
    "reduce-dtypes-i8": lambda: (reduce_dtype_kernel, (_f(64, torch.int8),
                                                       _f(4, torch.int32), 60), dict(BLOCK=64)),
    "cast-f32-u8": lambda: (cast_kernel, (_f(64), _f(64, torch.uint8), 64), dict(BLOCK=64)),
    "cast-bool-bf16": lambda: (cast_kernel, (_f(64, torch.bool), _f(64, torch.bfloat16), 64),
                               dict(BLOCK=64)),
    "outer": lambda: (outer_kernel, (_f(32), _f(64), _f((32, 64)), 32, 64, 64),
                      dict(BM=16, BN=32)),
    "transpose-strided": lambda: (transpose_kernel, (_f((32, 32)), _f((32, 32)), 32, 32, 64,
                                                     2, 32), dict(BM=16, BN=16)),
    "loop-carried": lambda: (row_sum_loop_kernel, (_f((4, 64)), _f((4, 3)), 200, 208),
                             dict(BLOCK=64)),
    "loop-forms": lambda: (loop_forms_kernel, (_f(16, torch.int32), 0, 10, 3), dict(BLOCK=16)),
    "grid-3d": lambda: (grid_kernel, (_f(64, torch.int32),), {}),
    "pointer-loop": lambda: (pointer_loop_kernel, (_f((4, 32)), _f(64), 4, 32),
                             dict(BLOCK=32)),
    "scalar-forms": lambda: (scalar_forms_kernel, (_f(1), _f(8), 5, 0, 10), {}),
    "3d-tiles": lambda: (tile3d_kernel, (_f((8, 8), torch.int32),), dict(BLOCK=8)),
    "merge-consts": lambda: (merge_consts_kernel, (_f(2), 5), {}),
    "scalar-args": lambda: (scalar_args_kernel, (_f(3, torch.int32), 20, 3.25, 2 ** 33 + 5),
                            {}),
    "cdiv": lambda: (cdiv_kernel, (_f(3, torch.int32), 100), dict(BLOCK=64)),
    "full-zeros": lambda: (full_zeros_kernel, (_f(64), 0.5), dict(BLOCK=64)),
}


@pytest.mark.parametrize("case", list(SM90_CASES))
def test_compiles_for_sm90(case):
    kernel, args, consts = SM90_CASES[case]()
    ck = compile_gpu(kernel, *args, **consts)
    assert ck.metadata["arch"] == "sm_90a"


# ============================================================================ layouts
@kit.jit
def reduce_shapes_kernel(X, Out, M, N, KIND: kit.constexpr, AXIS: kit.constexpr,
                         BM: kit.constexpr, BN: kit.constexpr):
    rm = kit.arange(0, BM)
    rn = kit.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = kit.load(X + rm[:, None] * N + rn[None, :], mask=mask, other=0)
    if KIND == "sum":
        r = kit.sum(x, axis=AXIS)
    elif KIND == "max":
        r = kit.max(kit.where(mask, x, -1000), axis=AXIS)
    else:
        r = kit.argmin(kit.where(mask, x, 1000), axis=AXIS)
    if AXIS == 0:
        kit.store(Out + rn, r, mask=rn < N)
    else:
        kit.store(Out + rm, r, mask=rm < M)


RED_SHAPES = [(2, 128), (128, 2), (64, 8), (8, 64), (1, 32), (32, 1), (16, 16)]


@pytest.mark.parametrize("num_warps", [1, 4, 8])
@pytest.mark.parametrize("kind", ["sum", "max", "argmin"])
@pytest.mark.parametrize("BM,BN", RED_SHAPES, ids=[f"{a}x{b}" for a, b in RED_SHAPES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.int32], ids=["fp16", "i32"])
def test_reductions_over_tile_shapes_and_warps(BM, BN, kind, num_warps, dtype):
    """Tiles smaller and larger than the CTA, thin along either axis: reductions inside a
    thread, across lanes and across warps (and with lanes holding copies)."""
    M, N = max(1, BM - 1), BN  # one masked-off row when there are several
    x = rand((M, N), dtype, -50, 50) if not dtype.is_floating_point else rand((M, N), dtype)
    for axis in (0, 1):
        length = N if axis == 0 else M
        odt = torch.int32 if kind == "argmin" else (torch.float32 if kind == "sum" and
                                                   dtype.is_floating_point else dtype)
        out = poisoned(length, odt)
        reduce_shapes_kernel[(1,)](x, out, M, N, KIND=kind, AXIS=axis, BM=BM, BN=BN,
                                   num_warps=num_warps)
        a = x.cpu().double()
        if kind == "sum":
            ref = a.sum(axis)
        elif kind == "max":
            ref = a.amax(axis)
        else:
            ref = a.argmin(axis)
        if out.dtype.is_floating_point:  # fp16 sums accumulate in fp32, rounded once
            tol = 0 if kind != "sum" else (2e-3 if dtype == torch.float16 else None)
            close(out, ref, tol, what=f"{kind} axis={axis}")
        else:  # argmin: the first index of the minimum (fp16 has ties)
            same(out, ref.long(), f"{kind} axis={axis}")
