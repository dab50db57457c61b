"""NaN through min/max: the interpreter gives what the GPU gives.

The GPU lowers `kit.maximum` / `kit.minimum` and the `kit.max` / `kit.min` reductions to
LLVM maxnum/minnum (PTX max.f32/min.f32), which return the other operand when one is NaN,
as Triton does by default (propagate_nan=NONE): NaN comes out only where both (or a whole
row) are NaN. The interpreter used numpy's NaN-propagating maximum: the same kernel gave
different answers on the two paths.
"""

from __future__ import annotations

import pytest
import torch

import kitjit as kit


@kit.jit
def minmax_kernel(X, Y, MX, MN, RMAX, RMIN, BLOCK: kit.constexpr):
    row = kit.program_id(0)
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + row * BLOCK + offs)
    y = kit.load(Y + row * BLOCK + offs)
    kit.store(MX + row * BLOCK + offs, kit.maximum(x, y))
    kit.store(MN + row * BLOCK + offs, kit.minimum(x, y))
    kit.store(RMAX + row, kit.max(x, axis=0))
    kit.store(RMIN + row, kit.min(x, axis=0))


def _inputs(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 32, generator=g)
    y = torch.randn(3, 32, generator=g)
    x[0, 3] = y[0, 5] = float("nan")
    x[0, 7] = y[0, 7] = float("nan")        # both NaN: NaN
    x[1] = float("nan")                      # a whole row NaN: its max/min are NaN
    x[2, 0], y[2, 1] = float("inf"), float("-inf")
    return x.to(device), y.to(device)


def _check(device):
    x, y = _inputs(device)
    out = [torch.full_like(x, 7.0) for _ in range(2)] + \
          [torch.full((3,), 7.0, device=device) for _ in range(2)]
    minmax_kernel[(3,)](x, y, *out, BLOCK=32)
    mx, mn, rmax, rmin = (o.cpu() for o in out)
    xc, yc = x.cpu(), y.cpu()
    assert torch.equal(mx.nan_to_num(123.0), torch.fmax(xc, yc).nan_to_num(123.0))
    assert torch.equal(mn.nan_to_num(123.0), torch.fmin(xc, yc).nan_to_num(123.0))
    ref_max = torch.stack([r[~r.isnan()].max() if (~r.isnan()).any() else r[0] for r in xc])
    ref_min = torch.stack([r[~r.isnan()].min() if (~r.isnan()).any() else r[0] for r in xc])
    assert torch.equal(rmax.nan_to_num(123.0), ref_max.nan_to_num(123.0))
    assert torch.equal(rmin.nan_to_num(123.0), ref_min.nan_to_num(123.0))


def test_interpreter_min_max_skip_nan_like_the_gpu(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    _check("cpu")


@pytest.mark.gpu
def test_gpu_min_max_skip_nan():
    _check("cuda")


@kit.jit
def argmaxmin_kernel(X, AMX, AMN, BLOCK: kit.constexpr):
    row = kit.program_id(0)
    x = kit.load(X + row * BLOCK + kit.arange(0, BLOCK))
    kit.store(AMX + row, kit.argmax(x, axis=0))
    kit.store(AMN + row, kit.argmin(x, axis=0))


def _check_arg(device):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 64, generator=g)
    x[0, 9] = x[0, 40] = float("nan")   # the first NaN wins, for argmax and argmin alike
    x[1] = float("nan")
    x[2, 5] = x[2, 50] = 9.0             # ties: the first index
    x[2, 7] = x[2, 60] = -9.0
    x = x.to(device)
    amx = torch.full((4,), -1, dtype=torch.int32, device=device)
    amn = torch.full((4,), -1, dtype=torch.int32, device=device)
    argmaxmin_kernel[(4,)](x, amx, amn, BLOCK=64)
    xc = x.cpu()
    assert amx.cpu().tolist() == torch.argmax(xc, dim=1).tolist() == [9, 0, 5,
                                                                      int(xc[3].argmax())]
    assert amn.cpu().tolist() == torch.argmin(xc, dim=1).tolist()


def test_interpreter_argmax_argmin_nan_and_ties():
    _check_arg("cpu")


@pytest.mark.gpu
def test_gpu_argmax_argmin_nan_and_ties():
    _check_arg("cuda")


@kit.jit
def to_int8_kernel(X, Y8, YU8, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs)
    kit.store(Y8 + offs, x.to(kit.int8))
    kit.store(YU8 + offs, x.to(kit.uint8))


def _check_int8(device):
    vals = [0.0, 1.9, -1.9, 127.4, 127.9, 128.0, 200.5, 255.9, 300.0, -128.9, -129.0, -1e9,
            1e9, float("inf"), float("-inf"), float("nan")]
    x = torch.tensor(vals + [3.5] * (32 - len(vals)))
    y8 = torch.full((32,), 99, dtype=torch.int8, device=device)
    yu8 = torch.full((32,), 99, dtype=torch.uint8, device=device)
    to_int8_kernel[(1,)](x.to(device), y8, yu8, BLOCK=32)
    # Triton's GPU code: cvt.rzi to 16 bits (saturating, NaN -> 0), then the low byte
    want8 = torch.where(x.isnan(), 0, x.clamp(-32768, 32767).trunc()).to(torch.int16)
    wantu8 = torch.where(x.isnan(), 0, x.clamp(0, 65535).trunc()).to(torch.int32)
    want8, wantu8 = want8.to(torch.int8), (wantu8 % 256).to(torch.uint8)
    assert y8.cpu().tolist() == want8.tolist()
    assert yu8.cpu().tolist() == wantu8.tolist()


def test_interpreter_float_to_int8_as_triton_gpu():
    """Out-of-range float -> int8/uint8 is what Triton's GPU code computes (cvt.rzi.s16/u16,
    then the low byte: 200.5 -> int8 is -56, 1e9 is -1, NaN 0), on both paths: the same on
    the interpreter and the GPU (the differential fuzzer once found them apart), and the
    same as Triton (tests/test_triton_semantics_casts.py)."""
    _check_int8("cpu")
    ck = kit.compile_aot(__file__, "to_int8_kernel", ["*fp32:16", "*i8:16", "*u8:16"],
                         {"BLOCK": 32}, 4, "sm_90a")
    assert "fptosi.sat" in ck.asm["llir"] and "fptoui.sat" in ck.asm["llir"]


@pytest.mark.gpu
def test_gpu_float_to_int8_as_triton_gpu():
    _check_int8("cuda")


@kit.jit
def neg_to_u32_kernel(X, Y, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs)
    kit.store(Y + offs, (-x).to(kit.float32).to(kit.uint32).to(kit.float32))


def _check_u32(device):
    x = torch.arange(-16, 16, dtype=torch.int32)
    y = torch.full((32,), float("nan"), device=device)
    neg_to_u32_kernel[(1,)](x.to(device), y, BLOCK=32)
    want = (-x).clamp(min=0).float()  # negative floats saturate to 0 in uint32
    assert torch.equal(y.cpu(), want)


def test_interpreter_negative_float_to_uint32_is_zero():
    """fptoui(sitofp(x)) was folded to x by LLVM (out of range is poison there), so the GPU
    gave 4294967291 for -5.0 -> uint32 where the interpreter gives 0 (saturation); found by
    the differential fuzzer."""
    _check_u32("cpu")
    ck = kit.compile_aot(__file__, "neg_to_u32_kernel", ["*i32:16", "*fp32:16"], {"BLOCK": 32},
                         4, "sm_90a")
    assert "fptoui.sat" in ck.asm["llir"]


@pytest.mark.gpu
def test_gpu_negative_float_to_uint32_is_zero():
    _check_u32("cuda")
