"""kit.bitonic_merge (Triton's tl.bitonic_merge) against Triton 3.6 itself.

tests/data/triton36_bitonic_merge.json holds inputs and Triton 3.6.0's interpreter outputs
as bit patterns (tests/data/gen_triton36_bitonic_merge.py wrote it): random rows with ties,
NaN, signed zeros and infinities, some bitonic (sorted by the merge), most not (the network's
own answer), ascending and descending, 1D to 3D, fp32/fp16/fp64/int32/int64/uint8, n from 1
to 256 (bf16 against kitjit's fp32 merge: Triton's interpreter mishandles it). kitjit's
interpreter (and with -m gpu the GPU) must give the same bits; the kernel compiles for
sm_90a without spills, its partners exchanged by warp shuffles.
"""

from __future__ import annotations

import pytest
import torch
from kitjit.frontend.errors import CompileError
from lang_helpers import compile_gpu, poisoned
from triton_tables import load_table

import kitjit as kit
from kitjit.testing import has_gpu

TABLE = load_table("triton36_bitonic_merge.json")
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@kit.jit
def merge_2d(X, Y, R: kit.constexpr, N: kit.constexpr, DESC: kit.constexpr):
    offs = kit.arange(0, R)[:, None] * N + kit.arange(0, N)[None, :]
    kit.store(Y + offs, kit.bitonic_merge(kit.load(X + offs), descending=DESC))


@kit.jit
def merge_3d(X, Y, A: kit.constexpr, B: kit.constexpr, C: kit.constexpr,
             DESC: kit.constexpr):
    offs = (kit.arange(0, A)[:, None, None] * (B * C) + kit.arange(0, B)[None, :, None] * C
            + kit.arange(0, C)[None, None, :])
    kit.store(Y + offs, kit.bitonic_merge(kit.load(X + offs), descending=DESC))


@kit.jit
def merge_1d(X, Y, N: kit.constexpr, DESC: kit.constexpr):
    offs = kit.arange(0, N)
    kit.store(Y + offs, kit.bitonic_merge(kit.load(X + offs), dim=0, descending=DESC))


def _case(name: str) -> tuple[torch.Tensor, torch.Tensor, bool]:
    c = TABLE[name]
    dt = getattr(torch, c["dtype"])
    size = torch.empty(0, dtype=dt).element_size()

    def tensor(bits):
        return torch.tensor(bits, dtype=torch.int64).to(BITS[size]).view(dt).reshape(c["shape"])
    return tensor(c["x"]), tensor(c["y"]), c["descending"]


def _run(x: torch.Tensor, desc: bool, device: str) -> torch.Tensor:
    x = x.to(device)
    y = poisoned(tuple(x.shape), x.dtype).to(device)
    if x.dim() == 3:
        merge_3d[(1,)](x, y, *x.shape, desc)
    elif x.dim() == 2:
        merge_2d[(1,)](x, y, x.shape[0], x.shape[1], desc)
    else:
        merge_1d[(1,)](x, y, x.shape[0], desc)
    return y.cpu()


def _same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    bits = BITS[got.element_size()]
    assert torch.equal(got.view(bits), want.view(bits)), f"{got}\n!=\n{want}"


@pytest.mark.parametrize("name", sorted(TABLE))
def test_bitonic_merge_as_tritons_interpreter(name):
    x, want, desc = _case(name)
    _same_bits(_run(x, desc, "cpu"), want)


def test_bitonic_merge_sorts_bitonic_rows():
    """A bitonic row (up then down) comes out sorted; the merge keeps the multiset."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 32, generator=g)
    x = torch.cat([x[:, :16].sort(1).values, x[:, 16:].sort(1, descending=True).values], 1)
    for desc in (False, True):
        y = _run(x, desc, "cpu")
        assert torch.equal(y, x.sort(1, descending=desc).values)


def test_bitonic_merge_bf16_is_the_fp32_network():
    """bf16 (which Triton's interpreter mishandles here) moves the same elements as the
    exact fp32 upcast: ties, signed zeros and infinities included."""
    g = torch.Generator().manual_seed(7)
    x = (torch.randint(-6, 7, (4, 32), generator=g) * 0.5).to(torch.bfloat16)
    x[0, :4] = torch.tensor([-0.0, 0.0, float("inf"), float("-inf")])
    for desc in (False, True):
        want = _run(x.float(), desc, "cpu").to(torch.bfloat16)
        _same_bits(_run(x, desc, "cpu"), want)


def test_bitonic_merge_only_the_last_dim():
    x = torch.randn(4, 8)
    y = torch.empty_like(x)

    @kit.jit
    def merge_dim0(X, Y):
        offs = kit.arange(0, 4)[:, None] * 8 + kit.arange(0, 8)[None, :]
        kit.store(Y + offs, kit.bitonic_merge(kit.load(X + offs), dim=0))

    with pytest.raises(CompileError, match="only the last dim"):
        merge_dim0[(1,)](x, y)


def test_bitonic_merge_compiles_for_sm90a():
    from kitjit.tools import ToolError, disassemble, find_tool, sass_opcodes

    x = torch.empty(16, 64)
    cks = [compile_gpu(merge_2d, x, x, R=16, N=64, DESC=True),
           compile_gpu(merge_1d, x, x, N=64, DESC=False)]
    if find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not found")
    for ck in cks:
        try:
            ops = sass_opcodes(disassemble(ck.asm["cubin"]))
        except ToolError as e:
            pytest.skip(str(e))
        assert "SHFL" in {o.split(".")[0] for o in ops}
        assert not any(o.startswith(("STL", "LDL")) for o in ops)


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("name", sorted(TABLE))
def test_bitonic_merge_gpu_as_tritons_interpreter(name):
    x, want, desc = _case(name)
    _same_bits(_run(x, desc, "cuda"), want)
