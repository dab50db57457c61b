"""Launching kitjit kernels: grids of 1 to 3 dimensions, grid callables, empty grids, and the
arguments' specializations (ints equal to 1, None, bools, floats, int64)."""

from __future__ import annotations

import pytest
import torch
from lang_helpers import INT_SENTINEL, cdiv, close, compile_gpu, poisoned, rand, same, spec_of
from test_lang_arith import binop_kernel

import kitjit as kit


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
