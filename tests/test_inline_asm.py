"""kit.inline_asm_elementwise (Triton's tl.inline_asm_elementwise): PTX run per `pack` of a
thread's elements. The CPU checks compile for sm_90a (the asm reaches the SASS, several
outputs, packed narrow inputs) and the interpreter's refusal; the GPU test runs Triton's
documented example (uint8 + float32 in, int32 + float32 out, pack=4) against torch."""

from __future__ import annotations

import pytest
import torch
from kitjit.frontend.errors import CompileError
from lang_helpers import compile_gpu

import kitjit as kit
from kitjit.testing import has_gpu


@kit.jit
def unpack_max(A, B, C, D, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    a = kit.load(A + offs, mask=m)   # uint8
    b = kit.load(B + offs, mask=m)   # float32
    # four uint8 arrive in one 32-bit register ($8); four int32 and four float32 leave
    (c, d) = kit.inline_asm_elementwise(
        asm="""
        {
            .reg .b8 tmp<4>;
            mov.b32 {tmp0, tmp1, tmp2, tmp3}, $8;
            cvt.u32.u8 $0, tmp0;
            cvt.u32.u8 $1, tmp1;
            cvt.u32.u8 $2, tmp2;
            cvt.u32.u8 $3, tmp3;
        }
        cvt.rn.f32.s32 $4, $0;
        cvt.rn.f32.s32 $5, $1;
        cvt.rn.f32.s32 $6, $2;
        cvt.rn.f32.s32 $7, $3;
        max.f32 $4, $4, $9;
        max.f32 $5, $5, $10;
        max.f32 $6, $6, $11;
        max.f32 $7, $7, $12;
        """,
        constraints="=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r",
        args=[a, b], dtype=(kit.int32, kit.float32), is_pure=True, pack=4)
    kit.store(C + offs, c, mask=m)
    kit.store(D + offs, d, mask=m)


@kit.jit
def fast_tanh(X, Y, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    x = kit.load(X + offs, mask=m)
    y = kit.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=kit.float32,
                                   is_pure=True, pack=1)
    kit.store(Y + offs, y, mask=m)


def _args(n, dev):
    g = torch.Generator().manual_seed(3)
    a = torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8).to(dev)
    b = (torch.randn(n, generator=g) * 200).to(dev)
    c = torch.full((n,), -7, dtype=torch.int32, device=dev)
    d = torch.full((n,), float("nan"), device=dev)
    return a, b, c, d


def test_sm90_sass_has_the_asm():
    from test_scan import _sass

    a, b, c, d = _args(1000, "cpu")
    ck = compile_gpu(unpack_max, a, b, c, d, 1000, BLOCK=512)
    assert "cvt.u32.u8" in ck.asm["ptx"] and "max.f32" in ck.asm["ptx"]
    ops = _sass(ck)
    assert ck.metadata["spills"] == 0
    assert any(o.startswith("FMNMX") for o in ops), ops
    x = torch.zeros(1000)
    ck = compile_gpu(fast_tanh, x, x, 1000, BLOCK=256)
    assert "tanh.approx.f32" in ck.asm["ptx"]
    assert any(o.startswith("MUFU.TANH") for o in _sass(ck))


def test_interpreter_refuses_it_at_the_call():
    x = torch.randn(100)
    with pytest.raises(CompileError, match="runs PTX") as e:
        fast_tanh[(1,)](x, torch.empty(100), 100, BLOCK=128)
    assert "test_inline_asm.py" in str(e.value)


def test_bad_arguments_are_errors_at_the_line():
    @kit.jit
    def bad(X, BLOCK: kit.constexpr):
        x = kit.load(X + kit.arange(0, BLOCK))
        kit.store(X + kit.arange(0, BLOCK),
                  kit.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=(),
                                             is_pure=True, pack=1))
    with pytest.raises(CompileError, match="at least one result dtype"):
        bad[(1,)](torch.zeros(16), BLOCK=16)


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_gpu_tritons_example():
    n = 1000
    a, b, c, d = _args(n, "cuda")
    unpack_max[(kit.cdiv(n, 512),)](a, b, c, d, n, BLOCK=512)
    assert torch.equal(c.cpu(), a.cpu().int())
    assert torch.equal(d.cpu(), torch.maximum(a.cpu().float(), b.cpu()))
    x = torch.randn(n, device="cuda") * 3
    y = torch.full_like(x, float("nan"))
    fast_tanh[(kit.cdiv(n, 256),)](x, y, n, BLOCK=256)
    torch.testing.assert_close(y, torch.tanh(x), atol=1e-3, rtol=1e-3)
