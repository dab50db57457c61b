"""The CPU interpreter against float64 torch references.

Kernels are compiled with the frontend (plus layout inference, as the runtime does) and run
with `kitjit.interpreter.run`. Outputs are poisoned first and made longer than the kernel's
range, so the tests see both that every element is written and that masked-off lanes are
left alone.
"""

from __future__ import annotations

import inspect
import operator
import time

import numpy as np
import pytest
import torch
from kitjit.frontend.codegen import ParsedFunction, build_kernel_ir
from kitjit.frontend.layout_pass import infer_layouts

import kitjit.language as kit
from kitjit.interpreter import OutOfBoundsError, round_bf16, run
from kitjit.ir import ops as O
from kitjit.ir.core import Function, Loc, Op, Value
from kitjit.ir.types import (
    PointerDType,
    TileType,
    bfloat16,
    float16,
    float32,
    float64,
    from_torch,
    int1,
    int8,
    int32,
    int64,
    uint8,
)

POISON = float("nan")


class JF:
    """Stand-in for a JITFunction: what build_kernel_ir needs."""

    def __init__(self, f):
        self.parsed = ParsedFunction(f)
        self.__name__ = f.__name__


def arg_spec(x):
    if isinstance(x, torch.Tensor):
        return TileType(PointerDType(from_torch(x.dtype)))
    if isinstance(x, bool):
        return TileType(from_torch(torch.bool))
    if isinstance(x, int):
        return TileType(int32 if -(2 ** 31) <= x < 2 ** 31 else int64)
    if isinstance(x, float):
        return TileType(float32)
    raise TypeError(x)


def compile_ir(kernel, args, consts, layouts=True) -> Function:
    params = list(inspect.signature(kernel).parameters)
    specs = dict(zip(params, map(arg_spec, args)))
    specs.update({k: ("const", v) for k, v in consts.items()})
    fn = build_kernel_ir(JF(kernel), specs, 4)
    if layouts:
        infer_layouts(fn)
    return fn


def launch(kernel, grid, *args, **consts) -> Function:
    """kernel[grid](*args, **consts), interpreted."""
    fn = compile_ir(kernel, args, consts)
    run(fn, tuple(grid) + (1,) * (3 - len(grid)), list(args))
    return fn


def cdiv(a, b):
    return -(-a // b)


def poisoned(n, dtype, extra=7):
    """An output of n elements (plus a poisoned tail that must stay untouched)."""
    if dtype.is_floating_point:
        return torch.full((n + extra,), POISON, dtype=dtype)
    return torch.full((n + extra,), -77, dtype=dtype)


def check_tail(out, n):
    tail = out[n:]
    if out.dtype.is_floating_point:
        assert torch.isnan(tail).all(), "a masked-off lane was written"
    else:
        assert (tail == -77).all(), "a masked-off lane was written"


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    x = torch.where(x == 0, 0.5, x)  # never zeros
    return x.to(dtype)


def assert_close(out, ref, dtype, scale=None):
    """Relative error within the dtype's tolerance; `scale` (the size of the terms that were
    summed) replaces |ref| where a result is a cancellation of larger terms."""
    assert not torch.isnan(out).any(), "an element was not written"
    out, ref = out.double(), ref.double()
    if dtype is torch.float32:
        tol = 1e-5
    elif dtype is torch.float16:
        tol = 2e-3
    else:
        tol = 1e-2
    den = ref.abs() if scale is None else torch.maximum(ref.abs(), scale.double())
    err = (out - ref).abs() / den.clamp_min(1e-3)
    assert err.max().item() <= tol, f"max rel error {err.max().item()} > {tol}"


# ----------------------------------------------------------------------------- kernels
def add_kernel(X, Y, Z, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    kit.store(Z + offs, kit.load(X + offs, mask=m) + kit.load(Y + offs, mask=m), mask=m)


def softmax_kernel(X, Y, n_cols, BLOCK: kit.constexpr):
    row = kit.program_id(0)
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + row * n_cols + offs, mask=offs < n_cols, other=-float("inf"))
    x = x.to(kit.float32)
    e = kit.exp(x - kit.max(x, axis=0))
    kit.store(Y + row * n_cols + offs, (e / kit.sum(e, axis=0)).to(Y.dtype.element_ty),
              mask=offs < n_cols)


def affine2d_kernel(A, B, C, M, N, stride_am, stride_an, stride_cm,
                    BM: kit.constexpr, BN: kit.constexpr):
    rm = kit.program_id(0) * BM + kit.arange(0, BM)
    rn = kit.program_id(1) * BN + kit.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    a = kit.load(A + rm[:, None] * stride_am + rn[None, :] * stride_an, mask=mask, other=0.0)
    b = kit.load(B + rn, mask=rn < N, other=0.0)
    c = a * 2.0 + b[None, :] - rm[:, None].to(kit.float32)
    kit.store(C + rm[:, None] * stride_cm + rn[None, :], c, mask=mask)


def rowsum_kernel(X, Y, n_cols, BLOCK: kit.constexpr):
    row = kit.program_id(0)
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    sq = 0.0
    for start in range(0, n_cols, BLOCK):
        x = kit.load(X + row * n_cols + start + offs, mask=start + offs < n_cols, other=0.0)
        acc += x
        sq += kit.sum(x * x, axis=0)
    kit.store(Y + row * 2, kit.sum(acc, axis=0))
    kit.store(Y + row * 2 + 1, sq)


def countdown_kernel(Y, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.int32)
    for i in range(n, 0, -3):
        acc = acc * 2 + i
    kit.store(Y + offs, acc)


def branch_kernel(X, Y, n, flag, scale, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n, other=0.0)
    if flag > 0:
        y = x * scale
    else:
        y = x - 1.0
    kit.store(Y + offs, y, mask=offs < n)


def reduce_kernel(X, S, MX, MN, AMX, AMN, n_rows, n_cols, BR: kit.constexpr,
                  BC: kit.constexpr, AXIS: kit.constexpr):
    r = kit.arange(0, BR)
    c = kit.arange(0, BC)
    mask = (r[:, None] < n_rows) & (c[None, :] < n_cols)
    x = kit.load(X + r[:, None] * n_cols + c[None, :], mask=mask, other=0.0)
    xs = kit.where(mask, x, 0.0)
    xmax = kit.where(mask, x, -float("inf"))
    xmin = kit.where(mask, x, float("inf"))
    o = kit.arange(0, BC if AXIS == 0 else BR)
    kit.store(S + o, kit.sum(xs, axis=AXIS))
    kit.store(MX + o, kit.max(xmax, axis=AXIS))
    kit.store(MN + o, kit.min(xmin, axis=AXIS))
    kit.store(AMX + o, kit.argmax(xmax, axis=AXIS))
    kit.store(AMN + o, kit.argmin(xmin, axis=AXIS))


def reduce_all_kernel(X, OUT, BLOCK: kit.constexpr):
    x = kit.load(X + kit.arange(0, BLOCK)[:, None] * BLOCK + kit.arange(0, BLOCK)[None, :])
    kit.store(OUT, kit.sum(x))
    kit.store(OUT + 1, kit.max(x))
    kit.store(OUT + 2, kit.min(x))


def intops_kernel(A, B, Q, R, SL, SR, AND, OR, XOR, INV, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    a = kit.load(A + offs, mask=m, other=1)
    b = kit.load(B + offs, mask=m, other=1)
    s = b & 7
    kit.store(Q + offs, a // b, mask=m)
    kit.store(R + offs, a % b, mask=m)
    kit.store(SL + offs, a << s, mask=m)
    kit.store(SR + offs, a >> s, mask=m)
    kit.store(AND + offs, a & b, mask=m)
    kit.store(OR + offs, a | b, mask=m)
    kit.store(XOR + offs, a ^ b, mask=m)
    kit.store(INV + offs, ~a, mask=m)


def cast_kernel(X, BF, HF, I32, I8, B, BACK, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    x = kit.load(X + offs, mask=m)
    kit.store(BF + offs, x.to(kit.bfloat16), mask=m)
    kit.store(HF + offs, x.to(kit.float16), mask=m)
    i = x.to(kit.int32)
    kit.store(I32 + offs, i, mask=m)
    kit.store(I8 + offs, i.to(kit.int8), mask=m)
    kit.store(B + offs, i.to(kit.bool_), mask=m)
    back = x.to(kit.bfloat16).to(kit.float32) + i.to(kit.float32) * 0.0 + \
        (i != 0).to(kit.float32)
    kit.store(BACK + offs, back, mask=m)


def bf16_math_kernel(X, Y, Z, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    m = offs < n
    x = kit.load(X + offs, mask=m, other=1.0)
    kit.store(Y + offs, x * x + x, mask=m)
    kit.store(Z + offs, kit.sqrt(kit.abs(x)) + kit.exp(x).to(kit.bfloat16), mask=m)


def dot_kernel(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr):
    rm = kit.program_id(0) * BM + kit.arange(0, BM)
    rn = kit.program_id(1) * BN + kit.arange(0, BN)
    rk = kit.arange(0, BK)
    acc = kit.zeros((BM, BN), kit.float32)
    for k in range(0, K, BK):
        a = kit.load(A + rm[:, None] * K + (k + rk)[None, :],
                     mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = kit.load(B + (k + rk)[:, None] * N + rn[None, :],
                     mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = kit.dot(a, b, acc)
    kit.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def oob_kernel(X, Y, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    x = kit.load(X + offs)  # OOB-LOAD: no mask
    kit.store(Y + offs, x, mask=offs < n)


def oob_store_kernel(X, Y, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n, other=0.0)
    kit.store(Y + offs + 3, x, mask=offs < n)  # OOB-STORE: off by 3


def scalar_kernel(X, Y, G):
    pid = kit.program_id(0)
    v = kit.load(X + pid)
    kit.store(Y + pid, v * 3 + pid)
    kit.store(G + pid * 3, kit.num_programs(0) * 100 + kit.program_id(1) * 10 +
              kit.program_id(2), mask=pid == 0)


def inplace_kernel(X, Y, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    kit.store(X + offs, kit.load(X + offs, mask=m) + kit.load(Y + offs, mask=m), mask=m)


def unsigned_kernel(A, R, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    m = offs < n
    a = kit.load(A + offs, mask=m)
    kit.store(R + offs, (a >> 3) + (a // 7) + (a % 5), mask=m)


def bool_kernel(A, B, OUT, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    m = offs < n
    a = kit.load(A + offs, mask=m, other=False)
    b = kit.load(B + offs, mask=m, other=False)
    kit.store(OUT + offs, (a & ~b) | (b ^ a) & a, mask=m)


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [1, 1000, 1024, 3 * 256 + 1])
def test_vector_add(dtype, n):
    x, y = randn(n, dtype=dtype, seed=1), randn(n, dtype=dtype, seed=2)
    z = poisoned(n, dtype)
    launch(add_kernel, (cdiv(n, 256),), x, y, z, n, BLOCK=256)
    ref = x.double() + y.double()
    if dtype is not torch.float32:
        # the kernel adds in the dtype: exact sum rounded once to the dtype
        assert torch.equal(z[:n], ref.to(dtype)), "not the correctly rounded sum"
    assert_close(z[:n], ref, dtype)
    check_tail(z, n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n_cols", [1000, 1024, 17])
def test_softmax(dtype, n_cols):
    rows = 37
    x = (randn(rows, n_cols, seed=3) * 3).to(dtype)
    y = torch.full((rows, n_cols), POISON, dtype=dtype)
    launch(softmax_kernel, (rows,), x, y, n_cols, BLOCK=1024)
    assert_close(y, torch.softmax(x.double(), dim=1), dtype)


@pytest.mark.parametrize("M,N", [(64, 64), (50, 70), (1, 33)])
def test_2d_broadcast_masks_strides(M, N):
    a = randn(N, M, seed=4).t()  # non-contiguous view: strides (1, M)
    b = randn(N, seed=5)
    c = torch.full((M + 3, N), POISON)
    launch(affine2d_kernel, (cdiv(M, 32), cdiv(N, 32)), a, b, c, M, N, a.stride(0),
           a.stride(1), c.stride(0), BM=32, BN=32)
    rows = torch.arange(M, dtype=torch.float64)[:, None]
    ref = a.double() * 2 + b.double()[None, :] - rows
    assert_close(c[:M], ref, torch.float32, scale=a.abs() * 2 + b.abs()[None, :] + rows)
    assert torch.isnan(c[M:]).all()


@pytest.mark.parametrize("n_cols", [1, 100, 128, 300])
def test_loop_carried_accumulation(n_cols):
    rows = 5
    x = randn(rows, n_cols, seed=6)
    y = torch.full((rows * 2 + 1,), POISON)
    launch(rowsum_kernel, (rows,), x, y, n_cols, BLOCK=64)
    ref = torch.stack([x.double().sum(1), (x.double() ** 2).sum(1)], 1).reshape(-1)
    assert_close(y[:-1], ref, torch.float32)
    assert torch.isnan(y[-1])


@pytest.mark.parametrize("n", [10, 9, 0, -2])
def test_loop_negative_step(n):
    y = torch.full((8,), -1, dtype=torch.int32)
    launch(countdown_kernel, (1,), y, n, BLOCK=8)
    acc = 0
    for i in range(n, 0, -3):
        acc = acc * 2 + i
    assert (y == acc).all()


@pytest.mark.parametrize("flag", [1, 0, -5])
def test_if_on_runtime_scalar(flag):
    n = 300
    x = randn(n, seed=7)
    y = poisoned(n, torch.float32)
    launch(branch_kernel, (cdiv(n, 128),), x, y, n, flag, 2.5, BLOCK=128)
    ref = x.double() * 2.5 if flag > 0 else x.double() - 1
    assert_close(y[:n], ref, torch.float32)
    check_tail(y, n)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("rows,cols", [(16, 32), (13, 29)])
def test_reductions(axis, rows, cols):
    g = torch.Generator().manual_seed(8)
    # small integers: many ties, so argmax/argmin must pick the first extreme element
    x = torch.randint(-3, 4, (rows, cols), generator=g).float()
    x[x == 0] = 0.5
    out_n = 32 if axis == 0 else 16
    outs = [torch.full((out_n,), POISON) for _ in range(3)] + \
        [torch.full((out_n,), -1, dtype=torch.int32) for _ in range(2)]
    launch(reduce_kernel, (1,), x, *outs, rows, cols, BR=16, BC=32, AXIS=axis)
    s, mx, mn, amx, amn = outs
    k = cols if axis == 0 else rows
    xd = x.double()
    assert_close(s[:k], xd.sum(axis), torch.float32)
    assert torch.equal(mx[:k].double(), xd.amax(axis))
    assert torch.equal(mn[:k].double(), xd.amin(axis))
    xn = x.numpy()
    assert (amx[:k].numpy() == np.argmax(xn, axis=axis)).all()  # numpy: first occurrence
    assert (amn[:k].numpy() == np.argmin(xn, axis=axis)).all()
    first = [int(np.flatnonzero(r == r.max())[0]) for r in (xn.T if axis == 0 else xn)]
    assert amx[:k].tolist() == first


def test_argmax_first_of_ties():
    x = torch.tensor([[1.0, 5.0, 5.0, 2.0] * 8] * 16)
    outs = [torch.full((32,), POISON) for _ in range(3)] + \
        [torch.full((32,), -1, dtype=torch.int32) for _ in range(2)]
    launch(reduce_kernel, (1,), x, *outs, 16, 32, BR=16, BC=32, AXIS=1)
    assert (outs[3][:16] == 1).all() and (outs[4][:16] == 0).all()
    launch(reduce_kernel, (1,), x, *outs, 16, 32, BR=16, BC=32, AXIS=0)
    assert (outs[3] == 0).all() and (outs[4] == 0).all()


def test_reduce_all_axes_to_scalar():
    x = randn(32, 32, seed=9)
    out = torch.full((4,), POISON)
    launch(reduce_all_kernel, (1,), x, out, BLOCK=32)
    assert_close(out[:1], x.double().sum().reshape(1), torch.float32)
    assert out[1] == x.max() and out[2] == x.min() and torch.isnan(out[3])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.int64])
def test_integer_ops_c_semantics(dtype):
    n = 1000
    g = torch.Generator().manual_seed(10)
    hi = 100 if dtype is torch.int8 else 100000
    a = torch.randint(-hi, hi, (n,), generator=g).to(dtype)
    b = torch.randint(-9, 10, (n,), generator=g).to(dtype)
    b[b == 0] = 3
    a[:4] = torch.tensor([-7, 7, -7, 7], dtype=dtype)
    b[:4] = torch.tensor([2, -2, -2, 2], dtype=dtype)
    outs = [poisoned(n, dtype) for _ in range(8)]
    launch(intops_kernel, (cdiv(n, 128),), a, b, *outs, n, BLOCK=128)
    q, r, sl, sr, an, o, x, inv = outs
    A, B = a.long(), b.long()
    s = B & 7
    assert q[:4].tolist() == [-3, -3, 3, 3] and r[:4].tolist() == [-1, 1, -1, 1]
    assert torch.equal(q[:n], torch.div(a, b, rounding_mode="trunc"))
    assert torch.equal(r[:n], torch.fmod(a, b))
    assert torch.equal(sl[:n], (A << s).to(dtype))  # wraps to the dtype
    assert torch.equal(sr[:n], (A >> s).to(dtype))  # arithmetic shift
    assert torch.equal(an[:n], a & b) and torch.equal(o[:n], a | b)
    assert torch.equal(x[:n], a ^ b) and torch.equal(inv[:n], ~a)
    for t in outs:
        check_tail(t, n)


def test_integer_division_by_zero_does_not_crash():
    n = 64
    a = torch.arange(1, n + 1, dtype=torch.int32)
    b = torch.zeros(n, dtype=torch.int32)
    b[::2] = 3
    outs = [poisoned(n, torch.int32) for _ in range(8)]
    launch(intops_kernel, (1,), a, b, *outs, n, BLOCK=64)
    assert torch.equal(outs[0][:n:2], a[::2] // 3)
    assert torch.equal(outs[1][:n:2], a[::2] % 3)


def test_unsigned_ops():
    n = 200
    a = torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(11),
                      dtype=torch.uint8)
    out = poisoned(n, torch.uint8)
    out[n:] = 77
    launch(unsigned_kernel, (1,), a, out, n, BLOCK=256)
    A = a.long()
    assert torch.equal(out[:n], ((A >> 3) + A // 7 + A % 5).to(torch.uint8))  # logical >>
    assert (out[n:] == 77).all()


def test_bool_logic_and_memory():
    n = 100
    g = torch.Generator().manual_seed(12)
    a = torch.rand(n, generator=g) < 0.5
    b = torch.rand(n, generator=g) < 0.5
    out = torch.ones(n + 5, dtype=torch.bool)
    launch(bool_kernel, (1,), a, b, out, n, BLOCK=128)
    assert torch.equal(out[:n], (a & ~b) | (b ^ a) & a)
    assert out[n:].all()
    assert set(out.view(torch.uint8).tolist()) <= {0, 1}


def test_casts():
    n = 1000
    x = randn(n, seed=13) * 60
    # exact bf16 ties: RNE must go to even; and some values that truncate toward zero
    ties = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 256.5, -2.7, 2.7, 127.9,
                         -128.9, 3.0e38, -1e-30], dtype=torch.float32)
    x[: len(ties)] = ties
    bf, hf = poisoned(n, torch.bfloat16), poisoned(n, torch.float16)
    i32, i8 = poisoned(n, torch.int32), poisoned(n, torch.int8)
    b = torch.zeros(n + 7, dtype=torch.bool)
    back = poisoned(n, torch.float32)
    launch(cast_kernel, (cdiv(n, 256),), x, bf, hf, i32, i8, b, back, n, BLOCK=256)
    assert torch.equal(bf[:n], x.to(torch.bfloat16))  # torch rounds to nearest even
    assert bf[0].item() == 1.0 and bf[1].item() == 1 + 2 ** -6
    assert torch.equal(hf[:n], x.to(torch.float16))
    # truncation toward zero, saturating like cvt.rzi
    xi = np.clip(np.trunc(x.double().numpy()), -(2 ** 31), 2 ** 31 - 1).astype(np.int32)
    assert (i32[:n].numpy() == xi).all()
    assert i32[:10].tolist() == [1, 1, -1, 256, -2, 2, 127, -128, 2 ** 31 - 1, 0]
    assert torch.equal(i8[:n], i32[:n].to(torch.int8))  # int -> int wraps
    assert torch.equal(b[:n], i32[:n] != 0) and not b[n:].any()
    ref = x.to(torch.bfloat16).double() + (i32[:n] != 0).double()
    assert_close(back[:n], ref, torch.float32)


def test_int_to_bf16_rounds_once():
    # 2**24 + 2**16 + 1 lies just above a bf16 tie: rounding through fp32 would hit the tie
    # exactly (and round to even, down); correct rounding goes up.
    v = np.array([2 ** 24 + 2 ** 16 + 1, 2 ** 24 + 2 ** 16, -(2 ** 24 + 2 ** 16 + 1)],
                 dtype=np.int64)
    r = round_bf16(v)
    assert r.tolist() == [2 ** 24 + 2 ** 17, 2 ** 24, -(2 ** 24 + 2 ** 17)]
    f = round_bf16(np.array([np.nan, np.inf, -np.inf, 3.4e38], np.float32))
    assert np.isnan(f[0]) and f[1] == np.inf and f[2] == -np.inf and f[3] == np.inf


def test_bf16_arithmetic_rounds_every_result():
    n = 100
    x = (randn(n, seed=14) * 2).to(torch.bfloat16)
    y, z = poisoned(n, torch.bfloat16), poisoned(n, torch.bfloat16)
    launch(bf16_math_kernel, (1,), x, y, z, n, BLOCK=128)
    xf = x.float()
    sq = (xf * xf).to(torch.bfloat16).float()  # the product is rounded before the add
    assert torch.equal(y[:n], (sq + xf).to(torch.bfloat16))
    ref = x.double().abs().sqrt() + x.double().exp()
    assert_close(z[:n], ref, torch.bfloat16)
    check_tail(y, n)


@pytest.mark.parametrize("M,N,K", [(32, 32, 48), (30, 20, 48), (64, 32, 16)])
def test_dot(M, N, K):
    a = randn(M, K, seed=15, dtype=torch.bfloat16)
    b = randn(K, N, seed=16, dtype=torch.bfloat16)
    c = torch.full((M * N + 5,), POISON)
    launch(dot_kernel, (cdiv(M, 32), cdiv(N, 32)), a, b, c, M, N, K, BM=32, BN=32, BK=32)
    ref = a.double() @ b.double()
    out = c[: M * N].reshape(M, N)
    assert not torch.isnan(out).any()
    assert ((out.double() - ref).abs() <= 1e-4 * (1 + ref.abs())).all()
    assert torch.isnan(c[M * N:]).all()


def _line_of(fn, marker):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(lines) if marker in s)


def test_out_of_bounds_load_names_the_line():
    n = 100
    x, y = randn(n, seed=17), poisoned(n, torch.float32)
    with pytest.raises(IndexError) as ei:
        launch(oob_kernel, (cdiv(n, 64),), x, y, n, BLOCK=64)
    msg = str(ei.value)
    assert f"{__file__}:{_line_of(oob_kernel, 'OOB-LOAD')}:" in msg
    assert "kit.load(X + offs)" in msg  # the source text
    assert "program (1, 0, 0)" in msg
    assert "'X' + element 100" in msg and "28 of 64 lanes" in msg
    assert isinstance(ei.value, OutOfBoundsError)


def test_out_of_bounds_store_names_the_line():
    n = 100
    x, y = randn(n, seed=17), torch.full((n + 1,), POISON)
    with pytest.raises(IndexError) as ei:
        launch(oob_store_kernel, (cdiv(n, 64),), x, y, n, BLOCK=64)
    msg = str(ei.value)
    assert f"{__file__}:{_line_of(oob_store_kernel, 'OOB-STORE')}:" in msg
    assert "store" in msg and "'Y' + element 101" in msg


def test_out_of_bounds_in_loop_names_the_iteration():
    x = randn(4 * 64, seed=18)
    y = poisoned(1, torch.float32)
    with pytest.raises(IndexError, match=r"start = 256 \(range\(0, 320, 64\)\)"):
        launch(oob_loop_kernel, (1,), x, y, 320, BLOCK=64)


def oob_loop_kernel(X, Y, n_cols, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    for start in range(0, n_cols, BLOCK):
        acc += kit.load(X + start + offs)
    kit.store(Y + offs, acc, mask=offs < 1)


def test_masked_lanes_outside_memory_are_never_touched():
    # the masked-off pointers are wildly out of range: they must not be checked or read
    n = 10
    x, y = randn(n, seed=19), poisoned(n, torch.float32)
    launch(add_kernel, (1,), x, x, y, n, BLOCK=1024)
    assert torch.equal(y[:n], x * 2)
    check_tail(y, n)


def test_scalar_loads_stores_and_3d_grid():
    x = randn(6, seed=20)
    y = torch.full((6 + 1,), POISON)
    g = torch.full((3 * 6 * 2 * 2 + 1,), -1, dtype=torch.int32)
    launch(scalar_kernel, (6, 2, 2), x, y, g)
    pid = torch.arange(6, dtype=torch.float64)
    assert_close(y[:6], x.double() * 3 + pid, torch.float32)
    assert torch.isnan(y[6])
    # pid 0 of each (y, z) writes G[0]; the last program to run is (0, 1, 1)
    assert g[0].item() == 600 + 11 and (g[1:] == -1).all()


def test_aliasing_arguments_and_views():
    base = randn(300, seed=21)
    x = base.clone()
    view = x[100:250]  # storage offset 100
    launch(inplace_kernel, (2,), view, view, 150, BLOCK=128)
    ref = base.clone()
    ref[100:250] *= 2
    assert torch.equal(x, ref)


def test_run_without_layouts_and_arg_errors():
    n = 50
    x, y = randn(n, seed=22), randn(n, seed=23)
    z = poisoned(n, torch.float32)
    fn = compile_ir(add_kernel, [x, y, z, n], {"BLOCK": 64}, layouts=False)
    run(fn, (1, 1, 1), [x, y, z, n])
    assert torch.equal(z[:n], x + y)
    with pytest.raises(TypeError, match="run-time arguments"):
        run(fn, (1, 1, 1), [x, y, z])
    with pytest.raises(TypeError, match="torch tensor"):
        run(fn, (1, 1, 1), [x, 3, z, n])


def test_unknown_op_is_named():
    fn = Function("k", [Value(TileType(int32), "a")])
    op = Op("frobnicate", [fn.args[0]], [Value(TileType(int32))],
            loc=Loc("kern.py", 12, 0, None, "k"))
    fn.body.append(op)
    with pytest.raises(NotImplementedError, match="frobnicate.*kern.py:12"):
        run(fn, (1, 1, 1), [1])


def _op_value(name, dtype, *xs, **attrs):
    """Evaluate one elementwise op directly on numpy values."""
    from kitjit import interpreter as interp

    vals = [Value(TileType(dtype, np.shape(x))) for x in xs]
    rdt = int1 if name == "cmp" else dtype
    op = Op(name, vals, [Value(TileType(rdt, np.shape(xs[0])))], attrs)
    return interp._pure(op, interp._Ctx((1, 1, 1)))(*xs)


@pytest.mark.parametrize("name", sorted(O.BINARY))
def test_every_binary_op(name):
    for dt in (int8, int32, int64, uint8, float16, float32, float64):
        if dt.is_floating() and name in ("and", "or", "xor", "shl", "shr"):
            continue
        if dt.is_int() and name == "div":
            continue
        nd = dt.np_dtype
        a = np.array([-7, 7, -7, 7, 5, 100, -3, 1], dtype=np.int64)
        b = np.array([2, -2, -2, 2, 3, 3, 1, 0 if dt.is_int() else 4], dtype=np.int64)
        if dt.is_int_unsigned():
            a, b = np.abs(a), np.abs(b)
        if name in ("shl", "shr"):
            b = np.abs(b) % 8
        with np.errstate(all="ignore"):
            r = _op_value(name, dt, a.astype(nd), b.astype(nd))
        assert r.dtype == np.dtype(nd), (name, dt)
        for x, y, z in zip(a[:7].tolist(), b[:7].tolist(), r[:7].tolist()):
            if name == "floordiv":
                want = int(x / y) if dt.is_int() else float(np.floor(x / y))
            elif name == "mod":
                want = int(np.fmod(x, y))
            else:
                want = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
                        "div": operator.truediv, "and": operator.and_, "or": operator.or_,
                        "xor": operator.xor, "shl": operator.lshift, "shr": operator.rshift,
                        "minimum": min, "maximum": max}[name](x, y)
            if dt.is_int():
                want = int(np.array(want).astype(nd))  # wraparound
            assert z == pytest.approx(want, rel=1e-3), (name, dt, x, y)


@pytest.mark.parametrize("name", sorted(O.UNARY))
def test_every_unary_op(name):
    if name == "not":
        assert _op_value("not", int1, np.array([True, False])).tolist() == [False, True]
        return
    if name == "invert":
        assert _op_value("invert", int32, np.array([0, 5], np.int32)).tolist() == [-1, -6]
        assert _op_value("invert", uint8, np.array([0, 5], np.uint8)).tolist() == [255, 250]
        return
    x = np.array([0.3, 1.7, 2.5, 0.01, 4.0])
    if name in ("neg", "abs", "floor", "ceil"):
        x = np.concatenate([x, -x])
    ref = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "exp2": np.exp2, "log": np.log,
           "log2": np.log2, "sqrt": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v),
           "sin": np.sin, "cos": np.cos, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
           "floor": np.floor, "ceil": np.ceil}[name](x)
    for dt, tol in ((float32, 1e-6), (float16, 1e-3), (bfloat16, 8e-3), (float64, 1e-12)):
        xv = round_bf16(x) if dt is bfloat16 else x.astype(dt.np_dtype)
        r = _op_value(name, dt, xv)
        assert r.dtype == np.dtype(dt.np_dtype), (name, dt)
        if dt is bfloat16:
            assert np.array_equal(r, round_bf16(r)), "a bf16 result is not a bf16 value"
            refd = {"neg": np.negative, "abs": np.abs}.get(name)
            if refd is not None:
                assert np.array_equal(r, refd(xv))
                continue
            ref_dt = ref
        else:
            ref_dt = ref
        assert np.allclose(r.astype(np.float64), ref_dt, rtol=tol, atol=tol), (name, dt)
    if name in ("neg", "abs"):
        v = np.array([-5, 3, -128], np.int8)
        want = {"neg": [5, -3, -128], "abs": [5, 3, -128]}[name]  # wraps like the GPU
        assert _op_value(name, int8, v).tolist() == want


def test_speed_a_few_hundred_programs():
    rows, n_cols = 400, 1000
    x = randn(rows, n_cols, seed=24, dtype=torch.bfloat16)
    y = torch.full((rows, n_cols), POISON, dtype=torch.bfloat16)
    fn = compile_ir(softmax_kernel, [x, y, n_cols], {"BLOCK": 1024})
    t = time.perf_counter()
    run(fn, (rows, 1, 1), [x, y, n_cols])
    assert time.perf_counter() - t < 2.0
    assert_close(y, torch.softmax(x.double(), dim=1), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_tensors_round_trip_and_stay_aliased():
    n = 1000
    x = torch.randn(2 * n, device="cuda")
    y = torch.randn(n, device="cuda")
    z = torch.full((n + 5,), POISON, device="cuda")
    launch(add_kernel, (cdiv(n, 256),), x[n:], y, z, n, BLOCK=256)
    assert torch.equal(z[:n], x[n:] + y) and torch.isnan(z[n:]).all()
    base = torch.randn(300, device="cuda")
    w = base.clone()
    launch(inplace_kernel, (2,), w[100:250], w[100:250], 150, BLOCK=128)
    ref = base.clone()
    ref[100:250] *= 2
    assert torch.equal(w, ref)

