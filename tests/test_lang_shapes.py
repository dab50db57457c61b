"""The kitjit language's tile shapes: broadcasting, strided 2-D loads, kit.full / zeros /
broadcast_to, kit.cdiv, 3-D tiles and kit.dot (fp16 / bf16, ragged, with and without a K loop)."""

from __future__ import annotations

import pytest
import torch
from lang_helpers import cdiv, close, compile_gpu, poisoned, rand, same

import kitjit as kit


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
