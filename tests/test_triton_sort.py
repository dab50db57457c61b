"""kit.sort / kit.topk (Triton's tl.sort / tl.topk) against Triton 3.6 itself.

tests/data/triton36_sort.json holds inputs and Triton 3.6.0's interpreter outputs as bit
patterns (tests/data/gen_triton36_sort.py wrote it): random rows with ties, NaN, signed
zeros and infinities, sorted ascending and descending and top-k'd (k from 1 to n), 1D to
3D, n from 1 to 1024, fp32/fp16/fp64/int8/int16/int32/int64/uint8, with Triton's result
dtype (top-k with k < n widens as tl.max). Triton's network does not sort such rows (a pair
with a NaN, or -0.0 against +0.0, ends as two copies of one element); kitjit's interpreter
(and with -m gpu the GPU) must give the same bits. bf16 against kitjit's own fp32 sort:
Triton's interpreter scrambles bf16.
"""

from __future__ import annotations

import os
from unittest import mock

import pytest
import torch
from lang_helpers import compile_gpu, poisoned
from triton_tables import load_table

import kitjit as kit
from kitjit.testing import has_gpu

TABLE = load_table("triton36_sort.json")
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@kit.jit
def sort_3d(X, Y, A: kit.constexpr, B: kit.constexpr, C: kit.constexpr, K: kit.constexpr,
            DESC: kit.constexpr):
    a = kit.arange(0, A)[:, None, None]
    b = kit.arange(0, B)[None, :, None]
    x = kit.load(X + a * (B * C) + b * C + kit.arange(0, C)[None, None, :])
    if K == 0:
        y = kit.sort(x, descending=DESC)
        KO: kit.constexpr = C
    else:
        y = kit.topk(x, K)
        KO: kit.constexpr = K
    kit.static_assert(y.dtype == Y.dtype.element_ty)
    kit.store(Y + a * (B * KO) + b * KO + kit.arange(0, KO)[None, None, :], y)


@kit.jit
def sort_2d(X, Y, R: kit.constexpr, N: kit.constexpr, K: kit.constexpr, DESC: kit.constexpr):
    r = kit.arange(0, R)[:, None]
    x = kit.load(X + r * N + kit.arange(0, N)[None, :])
    if K == 0:
        y = kit.sort(x, descending=DESC)
        KO: kit.constexpr = N
    else:
        y = kit.topk(x, K, dim=-1)
        KO: kit.constexpr = K
    kit.static_assert(y.dtype == Y.dtype.element_ty)
    kit.store(Y + r * KO + kit.arange(0, KO)[None, :], y)


@kit.jit
def sort_1d(X, Y, N: kit.constexpr, K: kit.constexpr, DESC: kit.constexpr):
    x = kit.load(X + kit.arange(0, N))
    if K == 0:
        y = kit.sort(x, dim=0, descending=DESC)
        KO: kit.constexpr = N
    else:
        y = kit.topk(x, K)
        KO: kit.constexpr = K
    kit.static_assert(y.dtype == Y.dtype.element_ty)
    kit.store(Y + kit.arange(0, KO), y)


def _tensor(bits: list[int], dtype: str, shape) -> torch.Tensor:
    dt = getattr(torch, dtype)
    size = torch.empty(0, dtype=dt).element_size()
    return torch.tensor(bits, dtype=torch.int64).to(BITS[size]).view(dt).reshape(shape)


def _case(name: str) -> tuple[torch.Tensor, torch.Tensor, bool, int]:
    c = TABLE[name]
    x = _tensor(c["x"], c["dtype"], c["shape"])
    y = _tensor(c["y"], c["out_dtype"], c["shape"][:-1] + [c["k"] or c["shape"][-1]])
    return x, y, c["descending"], c["k"]


def _run(x: torch.Tensor, desc: bool, k: int, out_dtype: torch.dtype,
         device: str) -> torch.Tensor:
    # CPU tensors run in the interpreter (in a gpu test too: its references)
    with mock.patch.dict(os.environ, {"KITJIT_INTERPRET": "1"} if device == "cpu" else {}):
        return _launch(x.to(device), desc, k, out_dtype)


def _launch(x: torch.Tensor, desc: bool, k: int, out_dtype: torch.dtype) -> torch.Tensor:
    n = x.shape[-1]
    y = poisoned(tuple(x.shape[:-1]) + (k or n,), out_dtype).to(x.device)
    if x.dim() == 3:
        sort_3d[(1,)](x, y, *x.shape, k, desc)
    elif x.dim() == 2:
        sort_2d[(1,)](x, y, x.shape[0], n, k, desc)
    else:
        sort_1d[(1,)](x, y, n, k, desc)
    return y.cpu()


def _same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype
    bits = BITS[got.element_size()]
    assert torch.equal(got.view(bits), want.view(bits)), f"{got}\n!=\n{want}"


def _check(name: str, device: str) -> None:
    x, want, desc, k = _case(name)
    _same_bits(_run(x, desc, k, want.dtype, device), want)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_sort_topk_as_tritons_interpreter(name):
    _check(name, "cpu")


def test_sort_topk_bf16_is_the_fp32_network():
    """bf16 (which Triton's interpreter mishandles here) moves the same elements as the
    exact fp32 upcast; top-k widens bf16 to fp32, as Triton's."""
    g = torch.Generator().manual_seed(3)
    x = (torch.randint(-6, 7, (2, 32), generator=g) * 0.5).to(torch.bfloat16)
    x[0, :5] = torch.tensor([-0.0, 0.0, float("inf"), float("-inf"), float("nan")])
    for desc in (False, True):
        want = _run(x.float(), desc, 0, torch.float32, "cpu").to(torch.bfloat16)
        _same_bits(_run(x, desc, 0, torch.bfloat16, "cpu"), want)
    _same_bits(_run(x, True, 4, torch.float32, "cpu"),
               _run(x.float(), True, 4, torch.float32, "cpu"))


def _signed_zeros(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """-0.0 against +0.0 in both orders: the sort's pair ends as two copies of its lower
    element (neither is `>` the other); top-1's max takes +0.0 (the GPU's max.f32; Triton's
    interpreter, numpy's nanmax, gives either zero)."""
    x = torch.tensor([[-0.0, 0.0], [0.0, -0.0]])
    return (_run(x, False, 0, torch.float32, device), _run(x, True, 1, torch.float32, device))


def test_sort_topk_signed_zeros():
    s, t = _signed_zeros("cpu")
    _same_bits(s, torch.tensor([[-0.0, -0.0], [0.0, 0.0]]))
    _same_bits(t, torch.tensor([[0.0], [0.0]]))


def test_sort_topk_compile_for_sm90a():
    """n = 256 and 1024 over 4 warps: lane bits by shuffles, warp bits through shared
    memory, no local memory; fewer instructions than the old network (one compare and one
    select a step)."""
    from kitjit.tools import ToolError, disassemble, find_tool, sass_opcodes

    x = torch.empty(1024)
    cks = [compile_gpu(sort_1d, x, x, N=256, K=0, DESC=False),
           compile_gpu(sort_1d, x, x, N=1024, K=0, DESC=True),
           compile_gpu(sort_1d, x, x, N=1024, K=16, DESC=True)]
    if find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not found")
    for ck, most in zip(cks, (600, 1700, 1000)):
        try:
            ops = sass_opcodes(disassemble(ck.asm["cubin"]))
        except ToolError as e:
            pytest.skip(str(e))
        assert any(o.startswith("SHFL.BFLY") for o in ops)
        assert not any(o.startswith(("STL", "LDL")) for o in ops)
        assert sum(ops.values()) < most, sum(ops.values())


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
def test_sort_topk_gpu_as_tritons_interpreter():
    for name in sorted(TABLE):
        _check(name, "cuda")
    for got, want in zip(_signed_zeros("cuda"), _signed_zeros("cpu")):
        _same_bits(got, want)
    x = (torch.randint(-6, 7, (2, 32)) * 0.5).to(torch.bfloat16)
    x[0, :5] = torch.tensor([-0.0, 0.0, float("inf"), float("-inf"), float("nan")])
    for desc, k, dt in ((False, 0, torch.bfloat16), (True, 4, torch.float32)):
        _same_bits(_run(x, desc, k, dt, "cuda"), _run(x, desc, k, dt, "cpu"))
