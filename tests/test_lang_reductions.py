"""The kitjit language's reductions (sum, max, min, argmax, argmin): axes, keep_dims,
accumulator dtypes, ties, and tile shapes smaller and larger than the CTA for 1 to 8 warps."""

from __future__ import annotations

import pytest
import torch
from lang_helpers import close, compile_gpu, poisoned, rand, same

import kitjit as kit


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
