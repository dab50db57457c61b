"""Debugging and hints: kit.static_print, kit.device_print / print, kit.device_assert,
kit.debug_barrier, kit.gdc_wait / kit.gdc_launch_dependents, and the hints
kit.multiple_of / max_contiguous / max_constancy / assume (identity in the interpreter,
facts for wide accesses on the GPU). Interpreter runs, PTX for sm_90a, GPU runs (gpu)."""

from __future__ import annotations

import pytest
import torch
from lang_helpers import close, compile_gpu, poisoned, rand

import kitjit as kit
from kitjit.interpreter.errors import DeviceAssertError


@kit.jit
def print_kernel(X, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n, other=0.0)
    kit.static_print("BLOCK is", BLOCK, x)
    kit.device_print("x", x)
    print("n", n)
    kit.debug_barrier()


@kit.jit
def assert_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n, other=1.0)
    kit.device_assert(x > 0.0, "x must be positive")
    kit.assume(n > 0)
    kit.gdc_wait()
    kit.store(Out + offs, x, mask=offs < n)
    kit.gdc_launch_dependents()


@kit.jit
def hinted_copy_kernel(X, Out, stride, BLOCK: kit.constexpr):
    row = kit.multiple_of(kit.program_id(0) * stride, 16)
    offs = kit.max_contiguous(row + kit.arange(0, BLOCK), BLOCK)
    x = kit.load(kit.multiple_of(X, 16) + offs)
    kit.store(kit.multiple_of(Out, 16) + offs, x)


def test_prints(capsys):
    x = torch.tensor([1.5, -2.0, 3.25, 0.125])
    print_kernel[(2,)](x, 3, BLOCK=4)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("BLOCK is 4 a fp32 tile of shape [4]")
    assert "pid (0, 0, 0) idx (2) x 3.250000" in out
    assert "pid (1, 0, 0) idx (3) x 0.000000" in out
    assert "pid (1, 0, 0) idx () n 3" in out
    assert sum(1 for ln in out if ln.startswith("pid")) == 2 * (4 + 1)


def test_device_assert_interpreter():
    x, out = rand(16, lo=0.5, hi=2.0), poisoned(16, torch.float32)
    assert_kernel[(1,)](x, out, 13, BLOCK=16)
    close(out[:13], x[:13].double())
    x[5] = -1.0
    x[9] = -3.0
    with pytest.raises(DeviceAssertError, match=r"x must be positive\n.*program \(0, 0, 0\), "
                       r"at 2 element\(s\): \(5,\), \(9,\)"):
        assert_kernel[(1,)](x, out, 13, BLOCK=16)
    with pytest.raises(DeviceAssertError, match="kit.assume does not hold"):
        assert_kernel[(1,)](x, out, 0, BLOCK=16)


def test_hints_interpreter():
    x, out = rand(64), poisoned(64, torch.float32)
    hinted_copy_kernel[(4,)](x, out, 16, BLOCK=16)
    close(out, x.double())


def test_debug_ops_in_ptx():
    x, out = rand(16, lo=0.5, hi=2.0), poisoned(16, torch.float32)
    ptx = compile_gpu(assert_kernel, x, out, 13, BLOCK=16).asm["ptx"]
    assert "__assertfail" in ptx and "griddepcontrol.wait" in ptx
    assert "griddepcontrol.launch_dependents" in ptx
    ptx = compile_gpu(print_kernel, x, 13, BLOCK=16).asm["ptx"]
    assert "vprintf" in ptx and "bar.sync" in ptx


def test_multiple_of_gives_wide_accesses():
    """stride is not known to divide by 16 (17 is passed), so without the hints the copy is
    scalar; with them it is 128-bit."""
    x, out = rand(64), poisoned(64, torch.float32)
    ptx = compile_gpu(hinted_copy_kernel, x, out, 17, BLOCK=16).asm["ptx"]
    assert "ld.global.v4" in ptx and "st.global.v4" in ptx


@pytest.mark.gpu
def test_debug_gpu():
    x = torch.rand(16, device="cuda") + 0.5
    out = torch.full((16,), float("nan"), device="cuda")
    assert_kernel[(1,)](x, out, 13, BLOCK=16)
    torch.cuda.synchronize()
    close(out[:13].cpu(), x[:13].cpu().double())
    out = torch.full((64,), float("nan"), device="cuda")
    x = torch.randn(64, device="cuda")
    hinted_copy_kernel[(4,)](x, out, 16, BLOCK=16)
    close(out.cpu(), x.cpu().double())
