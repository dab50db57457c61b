"""The kitjit language's dtypes: casts between floats, ints and bools, and every tensor dtype
loaded, computed on and stored (also compiled for sm_90a)."""

from __future__ import annotations

import pytest
import torch
from lang_helpers import cdiv, close, compile_gpu, poisoned, rand, run_both_poisons, same

import kitjit as kit


# ============================================================================ casts
@kit.jit
def cast_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n)
    kit.store(Out + offs, x.to(Out.dtype.element_ty), mask=offs < n)


CASTS = [
    (torch.float32, torch.int32), (torch.float32, torch.bfloat16),
    (torch.float32, torch.float16), (torch.bfloat16, torch.float32),
    (torch.float16, torch.bfloat16), (torch.bfloat16, torch.float16),
    (torch.int32, torch.float32), (torch.int32, torch.int8), (torch.int8, torch.int32),
    (torch.uint8, torch.int32), (torch.int32, torch.bfloat16), (torch.float16, torch.int32),
    (torch.bool, torch.int32), (torch.bool, torch.float32), (torch.int32, torch.bool),
    (torch.float32, torch.bool), (torch.float32, torch.uint8), (torch.int32, torch.float16),
]


@pytest.mark.parametrize("src,dst", CASTS,
                         ids=[f"{a}-{b}".replace("torch.", "") for a, b in CASTS])
def test_casts(src, dst):
    n = 300
    if src.is_floating_point:
        x = rand(n, src) * 40
        if dst == torch.uint8:
            x = x.abs()  # negative floats to unsigned saturate on the GPU; C leaves it undefined
        x[::7] = 0
    elif src == torch.bool:
        x = rand(n, src)
    else:
        x = rand(n, src, 0 if src == torch.uint8 else -1000, 1000)
        x[::5] = 0

    def launch(o):
        cast_kernel[(cdiv(n, 128),)](x, o, n, BLOCK=128)

    if dst in (torch.bool, torch.uint8, torch.int8):
        out = run_both_poisons(launch, n, dst)
    else:
        out = poisoned(n, dst)
        launch(out)
    if dst.is_floating_point:
        close(out, x.double().cpu())
    elif dst == torch.bool:
        same(out, x != 0)
    elif src.is_floating_point:
        same(out, x.double().cpu().trunc().long())  # toward zero
    else:
        same(out, x.long().to(dst))  # ints wrap


# ============================================================================ tensor dtypes
@kit.jit
def copy_scale_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask)
    if X.dtype.element_ty == kit.int1:
        y = x == 0  # bools: not
    elif X.dtype.element_ty == kit.uint8:
        y = x + 3  # wraps at 256
    else:
        y = x * 3
    kit.static_assert(y.dtype == X.dtype.element_ty, "the dtype is kept")
    kit.store(Out + offs, y, mask=mask)


TENSOR_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.uint8,
                 torch.bool, torch.int8, torch.int16, torch.int64, torch.float64]


@pytest.mark.parametrize("dtype", TENSOR_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("n", [64, 99])
def test_tensor_dtypes(dtype, n):
    x = rand(n, dtype) if dtype != torch.int64 else rand(n, dtype, -2 ** 40, 2 ** 40)

    def launch(o):
        copy_scale_kernel[(cdiv(n, 32),)](x, o, n, BLOCK=32)

    if dtype in (torch.bool, torch.uint8, torch.int8):
        out = run_both_poisons(launch, n, dtype)
    else:
        out = poisoned(n, dtype)
        launch(out)
    if dtype == torch.bool:
        same(out, ~x)
    elif dtype == torch.uint8:
        same(out, ((x.long() + 3) % 256).to(dtype))
    elif dtype.is_floating_point:
        close(out, x.double().cpu() * 3)
    else:
        same(out, (x.long() * 3).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int32,
                                   torch.uint8, torch.bool],
                         ids=lambda d: str(d).replace("torch.", ""))
def test_tensor_dtypes_compile_for_sm90(dtype):
    x = rand(64, dtype)
    compile_gpu(copy_scale_kernel, x, torch.empty_like(x), 64, BLOCK=32)
