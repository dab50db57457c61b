"""The last triton.language names: tl.condition (a `while` condition with a hint), tl.const
(pointer-to-const parameters), tl.target_info (the compile's GPU), Triton's type classes
(block_type and `x.type`, base_type, base_value, constexpr_type, slice, void, pi32_t) and
slicing a compile-time tuple in a kernel (`x.shape[:-1]`). Interpreter against float64 torch
on poisoned outputs; the target answers compiled for sm_90a and sm_80 (no GPU needed).

Triton's interpreter is not the reference here: it loops forever on `while tl.condition(c)`
(the wrapper object is always true) and stores through a tl.const pointer without a word;
Triton's compiler unwraps the condition and refuses the store, as kitjit does."""

from __future__ import annotations

import pytest
import torch
from kitjit.frontend.errors import CompileError
from lang_helpers import compile_gpu, poisoned

import kitjit as kit
import kitjit.language as tl
from kitjit.language import core, target_info
from kitjit.testing import has_gpu


@kit.jit
def prefix_sums(X, Y, n, BLOCK: tl.constexpr):
    """Y[j] = X[0] + ... + X[j] for j < n, one element per `while` trip."""
    i = 0
    acc = 0.0
    while tl.condition(i < n, disable_licm=True):
        acc += tl.load(X + i).to(tl.float32)
        tl.store(Y + i, acc)
        i += 1


def test_while_condition_loops_as_a_plain_while():
    for n in (1, 7, 16):
        x = torch.randn(16)
        y = poisoned(16, torch.float32)
        prefix_sums[(1,)](x, y, n, BLOCK=16)
        want = x.double().cumsum(0)[:n]
        torch.testing.assert_close(y[:n].double(), want, rtol=1e-5, atol=1e-5)
        assert y[n:].isnan().all()  # the loop stops at n


@kit.jit
def scale_const(X: tl.const, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=m) * 2.0, mask=m)


@kit.jit
def store_through_const(X: tl.const, Y, BLOCK: tl.constexpr):
    p = X + 1
    tl.store(p - 1 + tl.arange(0, BLOCK), tl.load(Y + tl.arange(0, BLOCK)))


@kit.jit
def atomic_through_const(X: tl.const, Y):
    tl.atomic_add(X, tl.load(Y))


def test_const_pointer_loads():
    for n in (64, 50):
        x = torch.randn(n)
        y = poisoned(n, torch.float32)
        scale_const[(kit.cdiv(n, 32),)](x, y, n, BLOCK=32)
        torch.testing.assert_close(y.double(), x.double() * 2)
    assert [p.is_const for p in scale_const.params] == [True, False, False, False]
    compile_gpu(scale_const, torch.empty(64), torch.empty(64), 64, BLOCK=32)


@pytest.mark.parametrize("kernel,what,line", [
    (store_through_const, "kit.store", "tl.store(p - 1"),
    (atomic_through_const, "kit.atomic_add", "tl.atomic_add(X"),
])
def test_writing_through_a_const_pointer_is_an_error_at_the_line(kernel, what, line):
    x = torch.zeros(16)
    args = (x, x, 16) if kernel is store_through_const else (x, x)
    with pytest.raises(CompileError) as ei:
        kernel[(1,)](*args)
    msg = str(ei.value)
    assert f"{what} through a pointer to const: 'X' is annotated kit.const" in msg
    assert line in msg
    assert (x == 0).all()


def test_pointer_type_const_is_not_supported_yet():
    assert tl.pointer_type(tl.float32) is tl.pointer_type(tl.float32, 1, False)
    with pytest.raises(TypeError, match="const=True.*not supported yet"):
        tl.pointer_type(tl.float32, const=True)


@kit.jit
def target_code(Y):
    if tl.target_info.cuda_capability_geq(9, 0):
        v = 90
    elif target_info.cuda_capability_geq(8):
        v = 80
    else:
        v = -1
    tl.store(Y, v + 1000 * tl.target_info.is_cuda() + 10000 * tl.target_info.is_hip())


def test_target_info_answers_for_the_compile_target():
    for arch, want in (("sm_90a", 1090), ("sm_90", 1090), ("sm_80", 1080), ("sm_89", 1080)):
        ptx = compile_gpu(target_code, torch.empty(1, dtype=torch.int32), arch=arch).asm["ptx"]
        assert f"mov.u32 \t%r1, {want};" in ptx or f", {want};" in ptx, (arch, ptx)
    with target_info.compiling_for("sm_90a"):
        assert target_info.current_target() == ("cuda", 90, 32)
        assert target_info.is_cuda() and not target_info.is_hip()
        assert target_info.cuda_capability_geq(8, 9) and not target_info.cuda_capability_geq(10)
        assert not target_info.is_hip_cdna3() and not target_info.is_hip_cdna4()


def test_target_info_in_the_interpreter_is_the_drivers_gpu():
    y = poisoned(1, torch.int32)
    target_code[(1,)](y)
    t = target_info.current_target()
    want = -1 if t is None else 1000 + (90 if t.arch >= 90 else 80 if t.arch >= 80 else -1)
    assert y.item() == want


@kit.jit
def type_queries(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(X + offs)
    s = tl.sum(x, 0)
    tl.static_assert(x.type.is_block() and isinstance(x.type, tl.block_type))
    tl.static_assert(x.type == tl.block_type(tl.float32, [N]))
    tl.static_assert(x.type.shape == (N,) and x.type.scalar == tl.float32)
    tl.static_assert(x.type.element_ty == tl.float32 and x.type.numel == N)
    tl.static_assert(not s.type.is_block() and s.type == tl.float32)
    tl.static_assert(isinstance(s.type, core.base_type))
    tl.static_assert(isinstance(x, core.base_value) and isinstance(N, core.base_value))
    tl.static_assert(X.dtype != tl.pi32_t)
    two = tl.reshape(x, x.shape[:-1] + (N // 2, 2))  # a slice of a compile-time tuple
    tl.static_assert(two.shape[1:] == (2,) and two.shape[::-1][0] == 2)
    tl.store(Y + offs, tl.reshape(two, [N]) + s)


def test_type_classes_in_a_kernel():
    for n in (8, 32):
        x = torch.randn(n)
        y = poisoned(n, torch.float32)
        type_queries[(1,)](x, y, N=n)
        torch.testing.assert_close(y.double(), x.double() + x.double().sum(), rtol=1e-5,
                                   atol=1e-5)


def test_type_classes_on_the_host():
    b = tl.block_type(tl.float16, [16, 32])
    assert b.shape == (16, 32) and b.numel == 512 and b.nbytes == 1024 and b.is_block()
    assert b.with_element_ty(tl.float32) == tl.block_type(tl.float32, (16, 32)) != b
    assert isinstance(b, core.base_type) and isinstance(tl.float32, core.base_type)
    assert not isinstance(3, core.base_type)
    with pytest.raises(ValueError, match="power of 2"):
        tl.block_type(tl.float32, [12])
    with pytest.raises(TypeError, match="0d"):
        tl.block_type(tl.float32, [])
    assert tl.constexpr_type(4) == tl.constexpr_type(4) != tl.constexpr_type(5)
    t = core.tuple_type([tl.int32, b])
    assert list(t) == [tl.int32, b] and t[1] is b
    s = tl.slice(0, 4, 1)
    assert (s.start, s.stop, s.step) == (0, 4, 1) and s.type == core.slice_type()
    assert tl.void.is_void() and not tl.float32.is_void()
    assert tl.pi32_t is tl.pointer_type(tl.int32) and tl.pi32_t.element_ty is tl.int32
    assert core.get_primitive_bitwidth("bf16") == 16 and core.validate_block_shape([4, 8]) == 32
    assert core.is_negative_zero(-0.0) and not core.is_negative_zero(0.0)
    assert core.is_builtin(tl.load) and not core.is_builtin(print)
    from kitjit.runtime.jit import JITCallable

    assert core.JITCallable is JITCallable


def test_void_and_run_time_slices_are_errors_at_the_line():
    @kit.jit
    def to_void(X, N: tl.constexpr):
        tl.store(X + tl.arange(0, N), tl.load(X + tl.arange(0, N)).to(tl.void))

    @kit.jit
    def run_time_slice(X, n):
        s = (1, 2, 3)[:n]
        tl.store(X, len(s))

    x = torch.zeros(8)
    with pytest.raises(CompileError, match="cannot hold kit.void"):
        to_void[(1,)](x, N=8)
    with pytest.raises(CompileError, match="cannot be sliced with a run-time value"):
        run_time_slice[(1,)](x, 5)


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
def test_the_names_on_the_gpu():
    """The same kernels on the GPU: the while loop, const loads, the target's answers (the
    GPU's own capability) and the type queries."""
    x = torch.randn(16, device="cuda")
    y = poisoned(16, torch.float32).cuda()
    prefix_sums[(1,)](x, y, 7, BLOCK=16)
    torch.testing.assert_close(y[:7].double().cpu(), x.double().cumsum(0)[:7].cpu())
    assert y[7:].isnan().all()
    z = poisoned(16, torch.float32).cuda()
    scale_const[(1,)](x, z, 16, BLOCK=16)
    torch.testing.assert_close(z, x * 2)
    t = poisoned(1, torch.int32).cuda()
    target_code[(1,)](t)
    major, minor = torch.cuda.get_device_capability()
    cc = 10 * major + minor
    assert t.item() == 1000 + (90 if cc >= 90 else 80 if cc >= 80 else -1)
    w = poisoned(16, torch.float32).cuda()
    type_queries[(1,)](x, w, N=16)
    torch.testing.assert_close(w.double(), x.double() + x.double().sum(), rtol=1e-5,
                               atol=1e-5)
