"""What a launch checks, and when (docs/reliability.md, "Launch validation").

A launch computes a key from cheap facts (each tensor's device, dtype and 16-byte alignment;
each int's ==1 / %16 / int32-int64 class; the constexprs and launch options) and a hit
launches at once. Everything the compiled code was specialized on is in the key, so a
launch whose facts differ misses and is checked and compiled anew; what can only be wrong
for a new key (unsupported dtypes, tensors off the GPU or on the meta device, mixed devices,
ints beyond int64) is checked on the miss, before anything runs. Shapes, strides and sizes
are the caller's contract (the kernel indexes with what it is given), as in Triton.

The GPU path runs here on kitjit.testing.FakeDriver (no GPU needed); FakeCuda tensors are
CPU tensors that say they live on cuda:0.
"""

from __future__ import annotations

import pytest
import torch
from test_launch import FakeCuda

import kitjit as kit
from kitjit.testing import FakeDriver


@kit.jit
def copy_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    kit.store(Out + offs, kit.load(X + offs, mask=mask), mask=mask)


@pytest.fixture(autouse=True)
def _fresh_cache():
    copy_kernel.cache.clear()
    yield
    copy_kernel.cache.clear()


def _cuda(*ts):
    return [FakeCuda(t, 0) for t in ts]


# ------------------------------------------------------------------ the meta device
def test_meta_tensor_is_a_clear_error_in_the_interpreter():
    """A meta tensor reached the interpreter's memory model and failed there with
    NotImplementedError ("Cannot copy out of meta tensor") from inside kitjit."""
    out = torch.full((16,), float("nan"))
    with pytest.raises(ValueError, match=r"argument 'X' of copy_kernel is a tensor on the "
                                         r"meta device"):
        copy_kernel[(1,)](torch.empty(16, device="meta"), out, 16, BLOCK=16)
    assert torch.isnan(out).all()


def test_meta_tensor_is_a_clear_error_on_the_gpu_path():
    with FakeDriver() as fake:
        (out,) = _cuda(torch.empty(16))
        with pytest.raises(ValueError, match=r"argument 'X' of copy_kernel is a tensor on "
                                             r"the meta device.*CUDA tensor"):
            copy_kernel[(1,)](torch.empty(16, device="meta"), out, 16, BLOCK=16)
    assert not fake.compiles and not fake.launches


def test_meta_tensor_after_a_cached_launch_still_misses_and_raises():
    """A meta tensor's data pointer is 0 (16-byte aligned), but its device is -1: its key
    is never one a GPU launch cached, so it cannot reach a cached launcher."""
    with FakeDriver() as fake:
        x, out = _cuda(torch.empty(16), torch.empty(16))
        copy_kernel[(1,)](x, out, 16, BLOCK=16)
        with pytest.raises(ValueError, match="meta device"):
            copy_kernel[(1,)](torch.empty(16, device="meta"), out, 16, BLOCK=16)
    assert len(fake.compiles) == 1 and len(fake.launches) == 1


# ------------------------------------------------------------------ hits and misses
def test_a_hit_launches_without_another_compile():
    with FakeDriver() as fake:
        for n in (16, 32):
            x, out = _cuda(torch.empty(64), torch.empty(64))
            copy_kernel[(1,)](x, out, n, BLOCK=16)
    assert len(fake.compiles) == 1 and len(fake.launches) == 2


@pytest.mark.parametrize("change", ["misaligned", "int-not-16", "int-one", "int64", "dtype",
                                    "constexpr", "num_warps"])
def test_what_the_compile_assumed_is_in_the_key(change):
    """Alignment, divisibility, the value 1, int64, dtypes, constexprs, launch options:
    a launch that differs in one of them misses and compiles its own specialization."""
    with FakeDriver() as fake:
        base = torch.empty(64)
        x, out = _cuda(base, torch.empty(64))
        copy_kernel[(1,)](x, out, 32, BLOCK=16)
        args, kw = [x, out, 32], {"BLOCK": 16}
        if change == "misaligned":
            args[0] = FakeCuda(base[1:], 0)
        elif change == "int-not-16":
            args[2] = 33
        elif change == "int-one":
            args[2] = 1
        elif change == "int64":
            args[2] = 2 ** 33
        elif change == "dtype":
            args[0] = FakeCuda(torch.empty(64, dtype=torch.float16), 0)
        elif change == "constexpr":
            kw["BLOCK"] = 32
        else:
            kw["num_warps"] = 8
        copy_kernel[(1,)](*args, **kw)
    assert len(fake.compiles) == 2, fake.compiles
    first, second = fake.compiles  # (FakeDriver records no num_warps: equal for that one)
    assert first != second or change == "num_warps"


def test_cpu_tensor_after_a_cached_gpu_launch_raises():
    with FakeDriver() as fake:
        x, out = _cuda(torch.empty(16), torch.empty(16))
        copy_kernel[(1,)](x, out, 16, BLOCK=16)
        with pytest.raises(ValueError, match="is on cpu.*cuda"):
            copy_kernel[(1,)](torch.empty(16), out, 16, BLOCK=16)
    assert len(fake.launches) == 1


def test_int_beyond_int64_after_a_cached_launch_raises():
    with FakeDriver() as fake:
        x, out = _cuda(torch.empty(16), torch.empty(16))
        copy_kernel[(1,)](x, out, 16, BLOCK=16)
        with pytest.raises(ValueError, match="outside the range of int64"):
            copy_kernel[(1,)](x, out, 2 ** 64, BLOCK=16)
    assert len(fake.launches) == 1


def test_shapes_and_strides_are_the_callers_contract():
    """A non-contiguous view with the same dtype and alignment hits the cached launcher and
    gets its data pointer: the kernel indexes it as written (as Triton does). The
    interpreter reports reads past the end of an argument at the user's line."""
    with FakeDriver() as fake:
        base = torch.empty(8, 8)
        x, out = _cuda(base, torch.empty(64))
        copy_kernel[(1,)](x, out, 64, BLOCK=16)
        view = FakeCuda(base.t(), 0)
        copy_kernel[(1,)](view, out, 64, BLOCK=16)
    assert len(fake.compiles) == 1
    assert fake.launches[1]["values"][0] == base.data_ptr()
