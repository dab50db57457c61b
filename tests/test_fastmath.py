"""Float contraction and flush-to-zero exp: what the backend emits and what the interpreter
computes. `a * b + c` may become one FFMA (LLVM 'contract', like nvcc's --fmad=true);
`kit.exp2(x, ftz=True)` is the bare MUFU.EX2, flushing results below 2**-126 to zero
(without it ptxas wraps the instruction in a range check and two multiplies)."""

from __future__ import annotations

import pytest
import torch
from kitjit.frontend.errors import CompileError

import kitjit as kit
from kitjit.testing import has_gpu

TINY = 2.0 ** -126


@kit.jit
def exp2_kernel(X, Y, n, FTZ: kit.constexpr, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n)
    kit.store(Y + offs, kit.exp2(x, ftz=FTZ), mask=offs < n)


@kit.jit
def fma_kernel(A, B, C, Y, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    a, b, c = kit.load(A + offs, mask=m), kit.load(B + offs, mask=m), kit.load(C + offs, mask=m)
    kit.store(Y + offs, a * b + c, mask=m)


def _inputs(device):
    x = torch.cat([torch.linspace(-140.0, 10.0, 997), torch.tensor([-126.0, -126.5, -149.0])])
    return x.to(device)


def _run(ftz, device):
    x = _inputs(device)
    y = torch.full_like(x, float("nan"))
    exp2_kernel[(kit.cdiv(x.numel(), 256),)](x, y, x.numel(), FTZ=ftz, BLOCK=256)
    return x.cpu().double(), y.cpu().double()


def _check_exp2(ftz, device):
    x, y = _run(ftz, device)
    ref = torch.exp2(x)
    normal = ref >= TINY
    assert not y.isnan().any()
    assert torch.allclose(y[normal], ref[normal], rtol=1e-6, atol=0)
    if ftz:
        assert (y[~normal] == 0).all()
    return y[~normal]


@pytest.mark.parametrize("ftz", [False, True])
def test_interp_exp2_ftz(ftz):
    tiny = _check_exp2(ftz, "cpu")       # CPU tensors: the interpreter
    if not ftz:
        assert (tiny > 0).any()          # subnormal results kept (where fp32 has them)


def _ptx(fn, sig, consts):
    ck = fn.compile([(t, 16) for t in sig], consts, 4, "sm_90a")
    return ck.asm["ptx"]


def test_ptx_exp2_ftz():
    sig = ["*fp32", "*fp32", "i32"]
    assert "ex2.approx.ftz.f32" in _ptx(exp2_kernel, sig, (True, 256))
    plain = _ptx(exp2_kernel, sig, (False, 256))
    assert "ex2.approx.f32" in plain and "ftz" not in plain


def test_ptx_mul_add_contracts():
    ptx = _ptx(fma_kernel, ["*fp32"] * 4 + ["i32"], (256,))
    assert "fma.rn.f32" in ptx and "mul.rn.f32" not in ptx


def test_ftz_must_be_constexpr():
    @kit.jit
    def bad(X, n, BLOCK: kit.constexpr):
        offs = kit.arange(0, BLOCK)
        kit.store(X + offs, kit.exp2(kit.load(X + offs), ftz=n > 0))

    with pytest.raises(CompileError, match="ftz"):
        bad[(1,)](torch.zeros(16), 5, BLOCK=16)


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
@pytest.mark.parametrize("ftz", [False, True])
def test_gpu_exp2_ftz(ftz):
    _check_exp2(ftz, "cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_gpu_fma():
    n = 5000
    a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
    y = torch.full_like(a, float("nan"))
    fma_kernel[(kit.cdiv(n, 256),)](a, b, c, y, n, BLOCK=256)
    ref = a.double() * b.double() + c.double()
    assert torch.allclose(y.double(), ref, rtol=1e-6, atol=1e-6)
