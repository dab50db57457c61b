"""Block pointers, tensor descriptors, pointer casts, bitcasts, fp8 and scalar constructors
(issue 11 items 9 and 10): interpreter runs against torch references on ragged sizes with
poisoned outputs, compile-to-SASS for sm_90a, and the same on a GPU (marked gpu)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch
from kitjit.frontend.errors import CompileError
from ptr_kernels import (
    bitcasts,
    bp_matmul,
    bp_pad,
    fp8_dot,
    fp8_io,
    fp8_roundtrip,
    gather_rows,
    rtne,
    rtz,
    scalars,
    td_scale,
)

import kitjit as kit

KERNELS = str(pathlib.Path(__file__).with_name("ptr_kernels.py"))
F8 = {"e4nv": (kit.float8e4nv, torch.float8_e4m3fn, 448.0),
      "e5": (kit.float8e5, torch.float8_e5m2, 57344.0)}


def _dev(gpu):
    return "cuda" if gpu else "cpu"


# ----------------------------------------------------------------------------- references
def _e4b15_table() -> np.ndarray:
    """The 256 values of fp8e4b15 (bias 15, 3 mantissa bits, no inf/NaN), from the format."""
    out = np.empty(256)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 15, c & 7
        v = (m / 8) * 2.0 ** -14 if e == 0 else (1 + m / 8) * 2.0 ** (e - 15)
        out[c] = -v if s else v
    return out


def _e4b15_ref(x: np.ndarray) -> np.ndarray:
    """Nearest e4b15 code of fp16(x), ties to the even code, saturating (NaN: +-1.875)."""
    tab = _e4b15_table()
    with np.errstate(over="ignore"):
        h = x.astype(np.float16).astype(np.float64)
    h = np.where(np.isnan(h), np.copysign(1.875, np.where(np.signbit(h), -1, 1)), h)
    h = np.clip(h, -1.875, 1.875)
    codes = np.empty(x.shape, np.uint8)
    for i, v in enumerate(h.reshape(-1)):
        d = np.abs(tab - v)
        best = np.flatnonzero(d == d.min())
        best = [c for c in best if (c >> 7) == (1 if np.signbit(v) else 0)] or list(best)
        codes.reshape(-1)[i] = min(best, key=lambda c: (c & 1, c))
    return codes


def _fp8_ref(x: torch.Tensor, name: str) -> torch.Tensor:
    """cvt.rn.satfinite: clamp to the largest finite value (infinities too), NaN -> 0x7F."""
    _, tdt, big = F8[name]
    q = x.float().clamp(-big, big).to(tdt).view(torch.uint8)
    return torch.where(x.isnan(), torch.tensor(0x7F, dtype=torch.uint8), q)


# ----------------------------------------------------------------------------- block ptrs
@pytest.mark.parametrize("M,N,K", [(37, 45, 50), (32, 32, 64)])
def test_block_pointer_matmul(M, N, K, gpu=False):
    dev = _dev(gpu)
    a = torch.randn(M, K, device=dev).half()
    bt = torch.randn(N, K, device=dev).half()
    b = bt.t()  # a transposed (column-major) operand: strides (1, K)
    c = torch.full((M, N), float("nan"), device=dev).half()
    grid = (triton_cdiv(M, 16), triton_cdiv(N, 32))
    bp_matmul[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BM=16, BN=32,
                    BK=16)
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, atol=2e-2, rtol=1e-2)


def triton_cdiv(a, b):
    return -(-a // b)


@pytest.mark.parametrize("pad", ["zero", "nan", ""])
def test_block_pointer_padding(pad, gpu=False):
    dev = _dev(gpu)
    M, N, BM, BN = 13, 21, 8, 16
    x = torch.randn(M, N, device=dev)
    y = torch.full((M + BM, N + BN), 7.0, device=dev)
    grid = (triton_cdiv(M, BM), triton_cdiv(N, BN))
    bp_pad[grid](x, y, M, N, x.stride(0), y.stride(0), BM=BM, BN=BN, PAD=pad, CHECK=(0, 1))
    gm, gn = grid[0] * BM, grid[1] * BN
    exp = torch.full((gm, gn), float("nan") if pad == "nan" else 0.0, device=dev)
    exp[:M, :N] = x
    torch.testing.assert_close(y[:gm, :gn], exp, equal_nan=True)
    assert (y[gm:, :] == 7).all() and (y[:, gn:] == 7).all()


def test_block_pointer_without_boundary_check_is_unmasked():
    """Undefined in Triton: kitjit makes the access, the interpreter reports it."""
    from kitjit.interpreter import OutOfBoundsError

    x = torch.randn(13, 21)
    y = torch.zeros(13 + 8, 21 + 16)
    with pytest.raises(OutOfBoundsError):
        bp_pad[(2, 2)](x, y, 13, 21, x.stride(0), y.stride(0), BM=8, BN=16, PAD="zero",
                       CHECK=(0,))


def test_tensor_descriptor_in_kernel(gpu=False):
    dev = _dev(gpu)
    M, N = 19, 40
    # rows 44 floats apart: strided, and a multiple of 16 bytes as Triton requires of
    # make_tensor_descriptor (on sm_90a it is a TMA map: a misaligned stride traps)
    x = torch.randn(M, N + 4, device=dev)[:, :N]
    y = torch.full((M, N), float("nan"), device=dev)
    td_scale[(triton_cdiv(M, 8), triton_cdiv(N, 16))](x, y, M, N, x.stride(0), y.stride(0),
                                                      BM=8, BN=16)
    torch.testing.assert_close(y, 2 * x)


# ----------------------------------------------------------------------------- casts
def test_pointers_loaded_from_memory(gpu=False):
    dev = _dev(gpu)
    pool = torch.randn(200, device=dev)
    starts, lens = [5, 60, 130], [17, 40, 3]
    addrs = torch.tensor([pool[s:].data_ptr() for s in starts], dtype=torch.int64, device=dev)
    n = torch.tensor(lens, dtype=torch.int32, device=dev)
    N = 64
    out = torch.full((3, N), float("nan"), device=dev)
    # in the interpreter the addresses resolve to `pool`, a live CPU tensor that is no
    # argument of the kernel (kitjit/interpreter/memory.py: _Memory._adopt)
    gather_rows[(3,)](addrs, out, n, N, BLOCK=64)
    for g, (s, ln) in enumerate(zip(starts, lens)):
        torch.testing.assert_close(out[g, :ln], pool[s:s + ln])
        assert (out[g, ln:] == -1).all()


def test_bitcast(gpu=False):
    dev = _dev(gpu)
    n = 300
    x = torch.randn(n, device=dev)
    x[:3] = torch.tensor([float("nan"), -0.0, float("inf")])
    u8 = torch.randint(0, 256, (n,), dtype=torch.uint8, device=dev)
    i = torch.full((n,), -7, dtype=torch.int32, device=dev)
    f = torch.full((n,), float("nan"), device=dev)
    bitcasts[(triton_cdiv(n, 128),)](x, i, u8, f, n, BLOCK=128)
    assert torch.equal(i.cpu(), x.cpu().view(torch.int32))
    exp = torch.from_numpy(_e4b15_table()[u8.cpu().numpy()]).float()
    torch.testing.assert_close(f.cpu(), exp)


def test_bitcast_needs_the_same_width():
    @kit.jit
    def bad(X, Y):
        kit.store(Y, kit.load(X).to(kit.int16, bitcast=True))

    with pytest.raises(CompileError, match="cannot bitcast fp32"):
        bad[(1,)](torch.zeros(1), torch.zeros(1, dtype=torch.int16))


def test_pointer_casts_refuse_other_types():
    @kit.jit
    def bad(X, Y):
        kit.store(Y, X.to(kit.int32))

    with pytest.raises(CompileError, match="converts to and from int64"):
        bad[(1,)](torch.zeros(1), torch.zeros(1, dtype=torch.int32))


@pytest.mark.parametrize("dst", [torch.float16, torch.bfloat16])
def test_fp_downcast_rounding_rtz(dst, gpu=False):
    dev = _dev(gpu)
    n = 500
    x = torch.randn(n, dtype=torch.float64) * torch.logspace(-8, 6, n, dtype=torch.float64)
    x = x.float()
    x[:4] = torch.tensor([70000.0, -1e30, float("inf"), float("nan")])
    y = torch.full((n,), float("nan"), dtype=dst, device=dev)
    rtz[(triton_cdiv(n, 128),)](x.to(dev), y, n, BLOCK=128)
    rn = x.to(dst)  # round to nearest, then one ulp back toward zero where it went away
    away = rn.double().abs() > x.double().abs()
    exp = torch.where(away, (rn.view(torch.int16) - away.to(torch.int16)).view(dst), rn)
    torch.testing.assert_close(y.cpu(), exp, equal_nan=True, atol=0, rtol=0)


@pytest.mark.parametrize("dst", [torch.float16, torch.bfloat16])
def test_fp_downcast_rounding_rtne(dst, gpu=False):
    """Spelled-out 'rtne' (one cvt.rn an element, kept where written) is the default
    conversion: overflow to inf, NaN, subnormals and ties as torch's own."""
    dev = _dev(gpu)
    n = 500
    x = torch.randn(n, dtype=torch.float64) * torch.logspace(-40, 6, n, dtype=torch.float64)
    x = x.float()
    x[:6] = torch.tensor([70000.0, -1e30, float("inf"), float("nan"), 1.0 + 2.0 ** -11,
                          -0.0])
    y = torch.full((n,), float("nan"), dtype=dst, device=dev)
    rtne[(triton_cdiv(n, 128),)](x.to(dev), y, n, BLOCK=128)
    torch.testing.assert_close(y.cpu(), x.to(dst), equal_nan=True, atol=0, rtol=0)
    assert torch.equal(y.cpu()[5:6].view(torch.int16), x[5:6].to(dst).view(torch.int16))


# ----------------------------------------------------------------------------- fp8
def _fp8_inputs(n, scale):
    x = torch.randn(n) * scale
    x[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e6, -0.0, 1e-9])
    return x


@pytest.mark.parametrize("name", ["e4nv", "e5"])
@pytest.mark.parametrize("src", [torch.float32, torch.float16, torch.bfloat16])
def test_fp8_conversions(name, src, gpu=False):
    dev = _dev(gpu)
    n = 333
    x = _fp8_inputs(n, 300.0 if name == "e4nv" else 5e4).to(src)
    kdt = F8[name][0]
    q = torch.full((n,), 0xAA, dtype=torch.uint8, device=dev)
    y = torch.full((n,), float("nan"), dtype=src, device=dev)
    fp8_roundtrip[(triton_cdiv(n, 128),)](x.to(dev), q, y, n, FP8=kdt, BLOCK=128)
    ref = _fp8_ref(x, name)
    assert torch.equal(q.cpu(), ref), (q.cpu()[q.cpu() != ref], ref[q.cpu() != ref])
    back = ref.view(F8[name][1]).to(src)
    torch.testing.assert_close(y.cpu(), back, equal_nan=True, atol=0, rtol=0)


def test_fp8e4b15_conversions(gpu=False):
    dev = _dev(gpu)
    n = 300
    x = _fp8_inputs(n, 1.0)
    q = torch.full((n,), 0xAA, dtype=torch.uint8, device=dev)
    y = torch.full((n,), float("nan"), device=dev)
    fp8_roundtrip[(triton_cdiv(n, 128),)](x.to(dev), q, y, n, FP8=kit.float8e4b15, BLOCK=128)
    ref = _e4b15_ref(x.numpy())
    np.testing.assert_array_equal(q.cpu().numpy(), ref)
    np.testing.assert_array_equal(y.cpu().numpy(), _e4b15_table()[ref].astype(np.float32))


@pytest.mark.parametrize("name", ["e4nv", "e5"])
def test_fp8_tensors_load(name, gpu=False):
    dev = _dev(gpu)
    n = 200
    x = (torch.randn(n) * 10).to(F8[name][1])
    y = torch.full((n,), float("nan"), device=dev)
    fp8_io[(2,)](x.to(dev), y, n, BLOCK=128)
    # fp8 * 1.5 is fp8 (Triton 3.6: the literal takes the tile's dtype), computed in fp32
    # and rounded once, then widened by the store
    torch.testing.assert_close(y.cpu(), (x.float() * 1.5).to(x.dtype).float(), atol=0, rtol=0)


@pytest.mark.parametrize("na,nb", [("e4nv", "e4nv"), ("e5", "e4nv")])
def test_fp8_dot(na, nb, gpu=False):
    dev = _dev(gpu)
    M, N, K = 20, 27, 29
    a = (torch.randn(M, K) * 4).to(F8[na][1])
    b = (torch.randn(K, N) * 4).to(F8[nb][1])
    c = torch.full((M, N), float("nan"), device=dev)
    fp8_dot[(1,)](a.to(dev), b.to(dev), c, M, N, K, BM=32, BN=32, BK=32)
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.cpu().double(), ref, atol=1e-3, rtol=1e-5)


# ----------------------------------------------------------------------------- scalars
@pytest.mark.parametrize("flag", [True, False])
def test_scalar_constructors_and_constexpr_where(flag, gpu=False):
    dev = _dev(gpu)
    n = 77
    x = torch.randn(n, device=dev) * 10
    y = torch.full((n,), float("nan"), device=dev)
    scalars[(1,)](x, y, n, FLAG=flag, BLOCK=128)
    base = x / np.float32(n) if flag else x.to(torch.int32).float()
    torch.testing.assert_close(y, base + x.max())


# ----------------------------------------------------------------------------- SASS
tools = pytest.importorskip("kitjit.tools")


def _compile(kernel, sig, consts):
    if tools.find_tool("cuobjdump") is None or tools.find_tool("nvdisasm") is None:
        pytest.skip("cuobjdump/nvdisasm not found")
    ck = kit.compile_aot(KERNELS, kernel, sig, consts, 4, "sm_90a")
    try:
        ops = tools.sass_opcodes(tools.disassemble(ck.asm["cubin"]))
    except tools.ToolError as e:
        pytest.skip(str(e))
    assert ck.metadata["spills"] == 0 and ck.n_spills == 0
    return ck.asm["ptx"], ops


def test_sass_block_pointer_matmul():
    ptx, ops = _compile("bp_matmul", ["*fp16:16", "*fp16:16", "*fp16:16"] + ["i32"] * 9,
                        {"BM": 64, "BN": 64, "BK": 32})
    assert any(o.startswith("HMMA") for o in ops)
    assert any(o.startswith("LDG") for o in ops)


def test_sass_fp8_conversions_and_dot():
    ptx, ops = _compile("fp8_roundtrip", ["*fp32:16", "*u8:16", "*fp32:16", "i32"],
                        {"FP8": kit.float8e4nv, "BLOCK": 256})
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and "cvt.rn.f16x2.e4m3x2" in ptx
    assert any(o.startswith("F2FP") for o in ops)
    ptx, ops = _compile("fp8_dot", ["*fp8e5:16", "*fp8e4nv:16", "*fp32:16", "i32", "i32",
                                    "i32"], {"BM": 32, "BN": 32, "BK": 32})
    assert any(o.startswith("HMMA") for o in ops), ops


def test_sass_pointer_casts_and_rtz():
    ptx, ops = _compile("gather_rows", ["*i64:16", "*fp32:16", "*i32:16", "i32"],
                        {"BLOCK": 64})
    assert any(o.startswith("LDG") for o in ops)
    ptx, ops = _compile("rtz", ["*fp32:16", "*fp16:16", "i32"], {"BLOCK": 256})
    assert "cvt.rz.f16.f32" in ptx
    for dt, name in (("fp16", "f16"), ("bf16", "bf16")):
        ptx, ops = _compile("rtne", ["*fp32:16", f"*{dt}:16", "i32"], {"BLOCK": 256})
        assert f"cvt.rn.{name}.f32 %" in ptx, "rtne: the pinned cvt.rn (inline asm)"
        assert any(o.startswith("F2F") for o in ops), ops


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_pointers_and_fp8():
    test_block_pointer_matmul(37, 45, 50, gpu=True)
    test_block_pointer_padding("nan", gpu=True)
    test_tensor_descriptor_in_kernel(gpu=True)
    test_pointers_loaded_from_memory(gpu=True)
    test_bitcast(gpu=True)
    for dst in (torch.float16, torch.bfloat16):
        test_fp_downcast_rounding_rtz(dst, gpu=True)
        test_fp_downcast_rounding_rtne(dst, gpu=True)
    for name in ("e4nv", "e5"):
        for src in (torch.float32, torch.float16, torch.bfloat16):
            test_fp8_conversions(name, src, gpu=True)
        test_fp8_tensors_load(name, gpu=True)
    test_fp8e4b15_conversions(gpu=True)
    test_fp8_dot("e5", "e4nv", gpu=True)
    test_scalar_constructors_and_constexpr_where(True, gpu=True)
