"""Result dtypes as Triton 3.6 gives them (python/triton/language/standard.py and
semantic.py's computation_type_impl), checked in the kernel with static_assert and against
float64 torch references in the interpreter and on the GPU: sums (fp16/bf16/fp8 keep their
dtype, narrow ints give int32 / uint32, `dtype=`), max/min (narrow floats give fp32, narrow
ints int32), fp8 arithmetic (one fp8 type with itself stays fp8), division of fp16/bf16
(fp32), integers with bf16 (fp32)."""

from __future__ import annotations

import pytest
import torch

import kitjit as kit

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _dev(gpu: bool) -> str:
    return "cuda" if gpu else "cpu"


@kit.jit
def sum_max_kernel(X, S, S64, MX, MN, n, stride, BLOCK: kit.constexpr, SUM_DT: kit.constexpr,
                   MAX_DT: kit.constexpr):
    r = kit.program_id(0)
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + r * stride + offs, mask=offs < n, other=0)
    s = kit.sum(x, axis=0)
    kit.static_assert(s.dtype == SUM_DT, "kit.sum's result dtype is Triton's")
    m = kit.max(x, axis=0)
    kit.static_assert(m.dtype == MAX_DT, "kit.max's result dtype is Triton's")
    xm = kit.where(offs < n, x, kit.max(x, axis=0))  # the padding 0 must not win the min
    mn = kit.min(xm, axis=0)
    kit.static_assert(mn.dtype == MAX_DT, "kit.min's result dtype is Triton's")
    kit.static_assert(kit.sum(x, axis=0, dtype=kit.float64).dtype == kit.float64)
    kit.store(S + r, s)
    kit.store(S64 + r, kit.sum(x, axis=0, dtype=kit.float64))
    kit.store(MX + r, m)
    kit.store(MN + r, mn)


CASES = [  # (input dtype, sum dtype, max/min dtype)
    (torch.float16, kit.float16, kit.float32),
    (torch.bfloat16, kit.bfloat16, kit.float32),
    (torch.float8_e4m3fn, kit.float8e4nv, kit.float32),
    (torch.float8_e5m2, kit.float8e5, kit.float32),
    (torch.int8, kit.int32, kit.int32),
    (torch.int16, kit.int32, kit.int32),
    (torch.uint8, kit.uint32, kit.int32),
    (torch.bool, kit.uint32, kit.int32),
    (torch.float32, kit.float32, kit.float32),
    (torch.int32, kit.int32, kit.int32),
]
_TORCH = {kit.float16: torch.float16, kit.bfloat16: torch.bfloat16, kit.float32: torch.float32,
          kit.float8e4nv: torch.float8_e4m3fn, kit.float8e5: torch.float8_e5m2,
          kit.int32: torch.int32, kit.uint32: torch.int32}  # (small uint32 sums: int32)


def _inputs(dt, rows, n, dev):
    g = torch.Generator().manual_seed(7)
    if dt == torch.bool:
        x = torch.rand(rows, n + 5, generator=g) > 0.3
    elif dt.is_floating_point:
        x = (torch.randn(rows, n + 5, generator=g) * 3).to(dt)
    else:
        info = torch.iinfo(dt)
        x = torch.randint(max(info.min, -100), min(info.max, 100) + 1, (rows, n + 5),
                          generator=g).to(dt)
    return x.to(dev)[:, 2:2 + n]  # non-contiguous rows, offset start


@pytest.mark.parametrize("dt,sdt,mdt", CASES, ids=[str(c[0]).split(".")[1] for c in CASES])
def test_reduction_dtypes(dt, sdt, mdt, gpu=False):
    dev = _dev(gpu)
    rows, n = 5, 300
    x = _inputs(dt, rows, n, dev)
    s = torch.full((rows,), -7, device=dev).to(_TORCH[sdt])
    s64 = torch.full((rows,), float("nan"), dtype=torch.float64, device=dev)
    mx = torch.full((rows,), -7, device=dev).to(_TORCH[mdt])
    mn = torch.full((rows,), -7, device=dev).to(_TORCH[mdt])
    sum_max_kernel[(rows,)](x, s, s64, mx, mn, n, x.stride(0), BLOCK=512, SUM_DT=sdt,
                            MAX_DT=mdt)
    xd = x.double().cpu()
    ref = xd.sum(1)
    torch.testing.assert_close(s64.cpu(), ref, rtol=1e-12, atol=0)
    if sdt.is_floating() and sdt.bits < 32:
        # accumulated in fp32, rounded once to the input's dtype (Triton adds in that dtype)
        want = ref.float().to(_TORCH[sdt]).double()
        got = s.cpu().double()
        ulp = (want.abs() * {16: 2.0 ** -10, 8: 2.0 ** -2}[sdt.bits]).clamp(min=1e-30)
        if sdt is kit.bfloat16:
            ulp = want.abs() * 2.0 ** -7
        assert ((got - want).abs() <= ulp).all(), (got, want)
    else:
        torch.testing.assert_close(s.cpu().double(), ref, rtol=1e-6, atol=0)
    torch.testing.assert_close(mx.cpu().double(), xd.max(1).values, rtol=0, atol=0)
    torch.testing.assert_close(mn.cpu().double(), xd.min(1).values, rtol=0, atol=0)


@kit.jit
def fp8_arith_kernel(A, B, C, Out, n, BLOCK: kit.constexpr, OP: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    a = kit.load(A + offs, mask=m)
    b = kit.load(B + offs, mask=m)
    c = kit.load(C + offs, mask=m)
    if OP == "add":
        r = a + b
    elif OP == "sub":
        r = a - b
    elif OP == "mul":
        r = a * b
    elif OP == "div":
        r = a / b
    elif OP == "max":
        r = kit.maximum(a, b)
    else:
        r = a * 2.0  # a literal takes the fp8 type
    kit.static_assert(r.dtype == a.dtype, "fp8 with the same fp8 type stays that type")
    kit.static_assert((a + c).dtype == kit.float16, "two fp8 types meet at fp16")
    kit.store(Out + offs, kit.where(a < b, r, r), mask=m)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "max", "lit"])
@pytest.mark.parametrize("dt", FP8, ids=["e4m3", "e5m2"])
def test_fp8_arithmetic(dt, op, gpu=False):
    dev = _dev(gpu)
    n = 1000
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(n, generator=g) * 4).to(dt)
    b = (torch.randn(n, generator=g) * 4).to(dt)
    b = torch.where(b.float().abs() < 0.25, torch.ones_like(b.float()).to(dt), b)
    c = (torch.randn(n, generator=g)).to(FP8[1] if dt == FP8[0] else FP8[0])
    out = torch.full((n,), float("nan")).to(dt).to(dev)
    fp8_arith_kernel[(kit.cdiv(n, 256),)](a.to(dev), b.to(dev), c.to(dev), out, n, BLOCK=256,
                                          OP=op)
    ad, bd = a.double(), b.double()
    exact = {"add": ad + bd, "sub": ad - bd, "mul": ad * bd, "div": ad / bd,
             "max": torch.maximum(ad, bd), "lit": ad * 2}[op]
    # computed in fp32, rounded once to the fp8 type (saturating, as cvt.rn.satfinite)
    lim = torch.finfo(dt).max
    want = exact.float().clamp(-lim, lim).to(dt)
    assert torch.equal(out.cpu().view(torch.uint8), want.view(torch.uint8)), op


@kit.jit
def promo_kernel(X, Y, I, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    x = kit.load(X + offs, mask=m)      # fp16
    y = kit.load(Y + offs, mask=m)      # bf16
    i = kit.load(I + offs, mask=m)      # int8
    q = x / x
    kit.static_assert(q.dtype == kit.float32, "fp16 / fp16 is fp32 in Triton")
    kit.static_assert((y / y).dtype == kit.float32, "bf16 / bf16 is fp32 in Triton")
    kit.static_assert((x % x).dtype == kit.float32, "fp16 % fp16 is fp32 in Triton")
    kit.static_assert((i + y).dtype == kit.float32, "an int tile with bf16 is fp32")
    kit.static_assert((y + y).dtype == kit.bfloat16)
    kit.static_assert((i + x).dtype == kit.float16)
    kit.static_assert((y * n).dtype == kit.float32, "bf16 with a run-time int scalar is fp32")
    kit.static_assert((x + y).dtype == kit.float16, "fp16 with bf16 is fp16 (Triton's rule 3)")
    kit.store(Out + offs, x / (y + 3.0) + i * y, mask=m)


def test_division_and_bf16_promotion(gpu=False):
    dev = _dev(gpu)
    n = 700
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, generator=g).half()
    y = torch.rand(n, generator=g).bfloat16()
    i = torch.randint(-50, 50, (n,), generator=g).to(torch.int8)
    out = torch.full((n,), float("nan"), device=dev)
    promo_kernel[(kit.cdiv(n, 128),)](x.to(dev), y.to(dev), i.to(dev), out, n, BLOCK=128)
    y3 = (y.double() + 3.0).to(torch.bfloat16).double()  # y + 3.0 is bf16 (the literal's)
    ref = x.double() / y3 + i.double() * y.double()
    torch.testing.assert_close(out.cpu().double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_parity_dtypes():
    for dt, sdt, mdt in CASES:
        test_reduction_dtypes(dt, sdt, mdt, gpu=True)
    for dt in FP8:
        for op in ("add", "sub", "mul", "div", "max", "lit"):
            test_fp8_arithmetic(dt, op, gpu=True)
    test_division_and_bf16_promotion(gpu=True)
