"""What the kitjit language tests (tests/test_lang_*.py) share: inputs, poisoned outputs,
float64 comparisons, and compiling a kernel for sm_90a without a GPU.

Those tests run small kernels, one feature at a time, in the CPU interpreter through the real
launch path (`kernel[grid](...)`), checked against torch in float64. Rules every check
follows: fresh random inputs, outputs poisoned before the launch (NaN for floats, a sentinel
for ints, both values for bools) so an unwritten element fails, sizes that are and are not
multiples of the block, and fp32 within 1e-5 / fp16 and bf16 within 1e-2 of a float64
reference. A representative subset is also compiled for sm_90a (PTX and cubin, no GPU
needed) through `JITFunction.compile`, so the GPU backend sees the same kernels.
test_gpu.py runs every one of those tests again on the GPU by setting DEVICE here.
"""

from __future__ import annotations

import math

import pytest
import torch

from kitjit.ir.types import from_torch
from kitjit.testing import check

# Where the tensors live. The CPU run uses the interpreter; test_gpu.py sets "cuda" and runs
# these same tests on the GPU (references are always computed on the CPU in float64).
DEVICE = "cpu"
TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float64: 1e-12}
INT_SENTINEL = -1234567
FLOATS = pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                                 ids=["fp32", "fp16", "bf16"])


def poisoned(shape, dtype, value=None) -> torch.Tensor:
    if isinstance(shape, int):
        shape = (shape,)
    if value is None:
        if dtype.is_floating_point:
            value = float("nan")
        elif dtype == torch.bool:
            value = True
        elif dtype == torch.uint8:
            value = 0xA5
        elif dtype == torch.int8:
            value = -99
        elif dtype == torch.int16:
            value = -12345
        else:
            value = INT_SENTINEL
    return torch.full(shape, value, dtype=dtype, device=DEVICE)


def rand(shape, dtype=torch.float32, lo=None, hi=None) -> torch.Tensor:
    """Fresh random values, never all zeros: randn for floats, randint for ints."""
    if isinstance(shape, int):
        shape = (shape,)
    if dtype == torch.bool:
        return (torch.rand(shape) < 0.5).to(DEVICE)
    if dtype.is_floating_point:
        x = torch.randn(shape, dtype=torch.float64)
        if lo is not None:
            x = lo + (hi - lo) * torch.rand(shape, dtype=torch.float64)
        return x.to(dtype).to(DEVICE)
    info = torch.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return torch.randint(lo, hi + 1, shape, dtype=torch.int64).to(dtype).to(DEVICE)


def close(out: torch.Tensor, ref: torch.Tensor, tol: float | None = None, what="result"):
    """Float output vs a float64 reference; NaN (an unwritten element) never passes."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    tol = TOL[out.dtype] if tol is None else tol
    assert not torch.isnan(out).any(), f"{what}: {int(torch.isnan(out).sum())} NaN elements"
    err = check(out.cpu(), ref.double().cpu(), tol, what)
    assert math.isfinite(err)
    return err


def same(out: torch.Tensor, ref: torch.Tensor, what="result"):
    """Exact comparison for ints and bools (after a poisoned launch)."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    out = out.cpu()
    ref = ref.cpu().to(out.dtype)
    if not torch.equal(out, ref):
        bad = (out != ref).nonzero()
        raise AssertionError(f"{what}: {bad.shape[0]} of {out.numel()} elements differ, first "
                             f"at {bad[0].tolist()}: got {out[tuple(bad[0])]}, "
                             f"want {ref[tuple(bad[0])]}")


def run_both_poisons(make_launch, shape, dtype):
    """For bool/small-int outputs, where no sentinel is impossible: run with two different
    poisons; an unwritten element shows up as a difference."""
    outs = []
    for v in ((True, False) if dtype == torch.bool else (0x5A, 0x25)):
        out = poisoned(shape, dtype, v)
        make_launch(out)
        outs.append(out)
    assert torch.equal(outs[0], outs[1]), "some elements were not written"
    return outs[0]


def spec_of(a):
    """The specialization the runtime gives a launch argument (what JITFunction.compile
    takes): tensors are typed pointers (16 if 16-byte aligned), ints equal to 1 and None are
    folded in as constants."""
    if isinstance(a, torch.Tensor):
        return (f"*{from_torch(a.dtype).name}", 16 if a.data_ptr() % 16 == 0 else 1)
    if a is None:
        return ("const", None)
    if isinstance(a, bool):
        return ("i1", 1)
    if isinstance(a, int):
        if a == 1:
            return ("const", 1)
        return ("i32" if -2 ** 31 <= a < 2 ** 31 else "i64", 16 if a % 16 == 0 else 1)
    if isinstance(a, float):
        return ("fp32", 1)
    raise TypeError(type(a))


def compile_gpu(jf, *args, num_warps=4, arch="sm_90a", **consts):
    """Compile `jf` for the specialization a launch with these args would get, for sm_90a,
    without a GPU; returns the CompiledKernel after checking its stages."""
    specs = [spec_of(a) for a in args]
    assert len(specs) == len(jf.runtime_params), "give every run-time argument"
    const_vals = tuple(consts[c] for c in jf.constexprs)
    ck = jf.compile(specs, const_vals, num_warps, arch)
    assert f".target {arch}" in ck.asm["ptx"]
    assert f".entry {jf.__name__}(" in ck.asm["ptx"]
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    assert ck.metadata["spills"] == 0
    return ck


def cdiv(a, b):
    return -(-a // b)
