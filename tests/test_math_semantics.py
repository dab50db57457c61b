"""kit.sin / cos / log / log2 / exp at large arguments: both paths have Triton's semantics.

Found by the differential fuzzer (issue 19): `kit.cos` of integers up to 255 (int16 values
wrapped to uint8, converted to float) differed between the interpreter and the GPU beyond
the documented bound in 19 of 128 lanes. The GPU lowered kit.sin/cos to `sin.approx.f32` /
`cos.approx.f32`, whose range reduction (a multiply by 1/(2 pi) in fp32) loses ~|x| * 2**-24
absolutely: 2**-16 at x = 255, not the 2**-20.5 the docstring promised. Triton's tl.sin /
tl.cos / tl.log / tl.log2 are libdevice's sinf / cosf / logf / log2f (Triton 3.6's sm_90 PTX
has no approximate instruction for them), 1-2 ulp at any argument; kitjit now calls the
same functions, and the interpreter rounds the exact value once. tl.exp is ex2.approx of
x * log2(e) rounded to fp32 in both: its error grows with |x| (2 + |x| ulp), and the
interpreter now rounds that same product, so the two paths agree within 2 ulp.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import kitjit as kit


@kit.jit
def math_kernel(X, Out, n, FN: kit.constexpr, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask, other=1.0)
    if FN == "sin":
        y = kit.sin(x)
    elif FN == "cos":
        y = kit.cos(x)
    elif FN == "log":
        y = kit.log(x)
    elif FN == "log2":
        y = kit.log2(x)
    else:
        y = kit.exp(x)
    kit.store(Out + offs, y, mask=mask)


@kit.jit
def cos_of_wrapped_ints_kernel(X, Out, n, BLOCK: kit.constexpr):
    """The fuzzer's find: int16 inputs wrapped to uint8 (-1 -> 255), then kit.cos."""
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask, other=0)
    kit.store(Out + offs, kit.cos(x.to(kit.uint8)), mask=mask)


def _args(fn: str) -> torch.Tensor:
    """Arguments where the approximations are far off: large |x| for sin/cos, near 1 for
    the logs (a tiny result), the range up to overflow for exp; ragged length 300."""
    g = torch.Generator().manual_seed(0)
    if fn in ("sin", "cos"):
        x = torch.cat([torch.arange(0, 256.0), torch.tensor([1e3, -3e4, 1e6, 1.7e7, 1e20,
                                                              -3.4e38, 0.0, -0.0])])
    elif fn in ("log", "log2"):
        x = torch.cat([1 + torch.randn(200, generator=g).abs() * 1e-3,
                       torch.tensor([1.0, 2.0, 0.5, 1e-30, 3e38])])
    else:
        x = torch.cat([torch.linspace(-100.0, 88.0, 250), torch.tensor([0.0, 1e-7, -87.0])])
    rest = torch.randn(300 - x.numel(), generator=g) * 30
    rest = rest.abs() + 1e-3 if fn in ("log", "log2") else rest.clamp(-87.0, 88.0)
    return torch.cat([x.float(), rest.float()])


def _ulps(got: torch.Tensor, x: torch.Tensor, fn: str) -> np.ndarray:
    """|got - exact| in ulp of the fp32 result (the exact value from float64)."""
    ref = getattr(torch, fn)(x.double()).numpy()
    r32 = ref.astype(np.float32)
    ulp = np.spacing(np.abs(r32)).astype(np.float64)
    return np.abs(got.double().numpy() - ref) / ulp


_BOUND = {"sin": 2.5, "cos": 2.5, "log": 1.5, "log2": 1.5}


@pytest.mark.parametrize("fn", ["sin", "cos", "log", "log2", "exp"])
def test_interpreter_math_at_large_arguments(fn):
    x = _args(fn)
    out = torch.full_like(x, float("nan"))
    math_kernel[(3,)](x, out, x.numel(), FN=fn, BLOCK=128)
    err = _ulps(out, x, fn)
    if fn == "exp":  # the fp32 product x * log2(e): ~|x| ulp, as on the GPU and in Triton
        assert (err <= 2.5 + 1.5 * np.abs(x.double().numpy())).all(), err.max()
    else:
        assert (err <= _BOUND[fn]).all(), (fn, float(err.max()), x[int(err.argmax())])


def test_interpreter_exp_rounds_the_product_as_the_gpu_does():
    """exp(x) is 2**fl32(x * fl32(log2 e)) rounded: at x = 80 that is ~18 ulp from e**80
    (bit for bit the GPU's but for ex2.approx's own 2 ulp)."""
    x = torch.tensor([80.0, -80.0, 50.5, 1.0], dtype=torch.float32)
    out = torch.full_like(x, float("nan"))
    math_kernel[(1,)](x, out, 4, FN="exp", BLOCK=16)
    t = (x * torch.tensor(1.4426950408889634, dtype=torch.float32)).double()
    want = torch.exp2(t).float()
    assert torch.equal(out, want)


def test_cos_of_ints_up_to_255():
    x = torch.arange(-128, 172, dtype=torch.int16)  # -1 wraps to 255, -128 to 128
    out = torch.full((300,), float("nan"))
    cos_of_wrapped_ints_kernel[(3,)](x, out, 300, BLOCK=128)
    want = torch.cos(x.to(torch.uint8).double())
    assert (out.double() - want).abs().max() <= 2 * 2.0 ** -24


@pytest.mark.parametrize("fn", ["sin", "cos", "log", "log2"])
def test_sm90_calls_libdevice_not_the_approximation(fn):
    """The PTX holds libdevice's code (inlined), no sin/cos/lg2.approx; exp stays ex2.approx
    of the fp32 product, as Triton's."""
    ck = math_kernel.compile([("*fp32", 16), ("*fp32", 16), ("i32", 1)], (fn, 128), 4,
                             "sm_90a")
    ptx = ck.asm["ptx"]
    assert not re.search(r"\b(sin|cos|lg2)\.approx", ptx), fn
    ex = math_kernel.compile([("*fp32", 16), ("*fp32", 16), ("i32", 1)], ("exp", 128), 4,
                             "sm_90a")
    assert "ex2.approx.f32" in ex.asm["ptx"]


@pytest.mark.gpu
@pytest.mark.parametrize("fn", ["sin", "cos", "log", "log2", "exp"])
def test_gpu_math_agrees_with_the_interpreter(fn, monkeypatch):
    x = _args(fn)
    out = torch.full_like(x, float("nan"), device="cuda")
    math_kernel[(3,)](x.cuda(), out, x.numel(), FN=fn, BLOCK=128)
    torch.cuda.synchronize()
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    ref = torch.full_like(x, float("nan"))
    math_kernel[(3,)](x, ref, x.numel(), FN=fn, BLOCK=128)
    err = _ulps(out.cpu(), x, fn)
    if fn != "exp":
        assert (err <= _BOUND[fn]).all(), (fn, float(err.max()), x[int(err.argmax())])
    r = ref.double().numpy()
    ulp = np.spacing(np.abs(r.astype(np.float32))).astype(np.float64)
    diff = np.abs(out.cpu().double().numpy() - r) / np.where(ulp > 0, ulp, 1.0)
    assert (np.isinf(r) == np.isinf(out.cpu().numpy())).all()
    fin = np.isfinite(r)
    assert (diff[fin] <= (2.5 if fn != "exp" else 3.0)).all(), (fn, float(diff[fin].max()))


@pytest.mark.gpu
def test_gpu_cos_of_ints_up_to_255():
    x = torch.arange(-128, 172, dtype=torch.int16)
    out = torch.full((300,), float("nan"), device="cuda")
    cos_of_wrapped_ints_kernel[(3,)](x.cuda(), out, 300, BLOCK=128)
    want = torch.cos(x.to(torch.uint8).double())
    assert (out.cpu().double() - want).abs().max() <= 2 * 2.0 ** -24
