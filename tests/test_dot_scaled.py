"""`kit.dot_scaled`, Triton 3.6's microscaled product, against a float64 torch reference.

The reference decodes every format from its definition (e2m1 from its bit fields, fp8 through
torch's float8 dtypes, e8m0 as 2**(s-127), 255 NaN), then applies the one rounding Triton's
sm_90 lowering adds: value * scale rounded to the compute type (bf16, or fp16 when a side is
"fp16"), with Triton's scale bits (s = 0 is 0.0). Products of 16-bit values are exact in fp32,
so kitjit and the reference differ by fp32 accumulation order only: the bound is
K * 2**-24 * (|A| @ |B|) per element. NaN and inf must be where the reference has them.

Triton's own interpreter cannot serve as the second reference: Triton 3.6.0's
InterpreterBuilder has no `create_dot_scaled` (TRITON_INTERPRET=1 fails with an
AttributeError), so the pairs Triton accepts and refuses were read from triton.compile for
sm_90 (23 of the 25 pairs; bf16 with fp16 fails in its compiler), and the decoders were
checked against Triton's triton/tools/mxfp.py (MXFP4Tensor, MXScaleTensor): E2M1 below is its
table.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from kitjit.frontend.errors import CompileError

import kitjit as kit
from kitjit.tools import ToolError, disassemble, find_tool, sass_opcodes

FORMATS = ["e2m1", "e4m3", "e5m2", "bf16", "fp16"]
PAIRS = [p for p in itertools.product(FORMATS, FORMATS) if set(p) != {"bf16", "fp16"}]
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]   # codes 0..7; bit 3 is the sign
UNSCALED = ("bf16", "fp16")                        # the side given scale None in the tests


@kit.jit
def _scaled_mm(A, AS, B, BS, C, Acc, M, N, K,
               FA: kit.constexpr, FB: kit.constexpr, KPA: kit.constexpr, KPB: kit.constexpr,
               HAS_SA: kit.constexpr, HAS_SB: kit.constexpr, HAS_ACC: kit.constexpr,
               FAST: kit.constexpr, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr):
    """C = Acc + dot_scaled over K blocks; ragged M, N, K masked. A is [M/PM, K/PK] with e2m1
    pairs packed along K (PK = 2) or M (PM = 2), B likewise [K/PK, N/PN]; scales are
    [M, K/32] and [N, K/32]; masked scale entries load as 0 (value 0 for bf16)."""
    PAK: kit.constexpr = 2 if FA == "e2m1" and KPA else 1
    PAM: kit.constexpr = 2 if FA == "e2m1" and not KPA else 1
    PBK: kit.constexpr = 2 if FB == "e2m1" and KPB else 1
    PBN: kit.constexpr = 2 if FB == "e2m1" and not KPB else 1
    pm, pn = kit.program_id(0), kit.program_id(1)
    rm = pm * BM + kit.arange(0, BM)
    rn = pn * BN + kit.arange(0, BN)
    am = pm * (BM // PAM) + kit.arange(0, BM // PAM)
    bn = pn * (BN // PBN) + kit.arange(0, BN // PBN)
    cmask = (rm[:, None] < M) & (rn[None, :] < N)
    if HAS_ACC:
        acc = kit.load(Acc + rm[:, None] * N + rn[None, :], mask=cmask, other=0.0)
    else:
        acc = kit.zeros((BM, BN), kit.float32)
    for k0 in range(0, K, BK):
        ak = k0 // PAK + kit.arange(0, BK // PAK)
        bk = k0 // PBK + kit.arange(0, BK // PBK)
        a = kit.load(A + am[:, None] * (K // PAK) + ak[None, :],
                     mask=(am[:, None] < M // PAM) & (ak[None, :] < K // PAK), other=0)
        b = kit.load(B + bk[:, None] * (N // PBN) + bn[None, :],
                     mask=(bk[:, None] < K // PBK) & (bn[None, :] < N // PBN), other=0)
        sk = k0 // 32 + kit.arange(0, BK // 32)
        if HAS_SA:
            sa = kit.load(AS + rm[:, None] * (K // 32) + sk[None, :],
                          mask=(rm[:, None] < M) & (sk[None, :] < K // 32), other=0)
        else:
            sa = None
        if HAS_SB:
            sb = kit.load(BS + rn[:, None] * (K // 32) + sk[None, :],
                          mask=(rn[:, None] < N) & (sk[None, :] < K // 32), other=0)
        else:
            sb = None
        acc = kit.dot_scaled(a, sa, FA, b, sb, FB, acc, fast_math=FAST, lhs_k_pack=KPA,
                             rhs_k_pack=KPB)
    kit.store(C + rm[:, None] * N + rn[None, :], acc, mask=cmask)


# ------------------------------------------------------------------ data and reference
def _codes(fmt: str, shape: tuple, g: torch.Generator) -> torch.Tensor:
    """Random storage of `fmt` (finite values only: NaN/inf data is tested on its own)."""
    if fmt in ("bf16", "fp16"):
        dt = torch.bfloat16 if fmt == "bf16" else torch.float16
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dt)
    u = torch.randint(0, 256, shape, generator=g, dtype=torch.int32)
    if fmt == "e4m3":
        u = torch.where((u & 0x7F) == 0x7F, u ^ 1, u)              # not NaN
    elif fmt == "e5m2":
        u = torch.where((u & 0x7C) == 0x7C, u & ~0x40, u)          # exponent < 31
    return u.to(torch.uint8)


def _decode(fmt: str, x: torch.Tensor, packed_dim: int) -> torch.Tensor:
    """float64 values of storage x; e2m1 unpacked along packed_dim (low nibble first)."""
    if fmt in ("bf16", "fp16"):
        return x.double()
    if fmt == "e4m3":
        return x.view(torch.float8_e4m3fn).double()
    if fmt == "e5m2":
        return x.view(torch.float8_e5m2).double()
    pair = torch.stack([x & 0xF, x >> 4], dim=packed_dim + 1)
    shape = list(x.shape)
    shape[packed_dim] *= 2
    code = pair.reshape(shape).long()
    mag = torch.tensor(E2M1, dtype=torch.float64)[code & 7]
    return torch.where(code & 8 != 0, -mag, mag)


def _scaled(v: torch.Tensor, s: torch.Tensor | None, ctype, rhs: bool, fast: bool):
    """v (float64, [R, K] or [K, R] for the rhs) in the compute type, times its scale as
    Triton's sm_90 lowering rounds it."""
    v = v.to(ctype)
    if s is None:
        return v.double()
    sc = torch.pow(2.0, s.double() - 127)
    sc = torch.where(s == 0, 0.0, torch.where(s == 255, float("inf"), sc)).to(ctype)
    sc = sc.repeat_interleave(32, dim=1)
    nan = (s == 255).repeat_interleave(32, dim=1)
    if rhs:
        sc, nan = sc.T, nan.T
    out = (v.double() * sc.double()).to(ctype).double()
    return out if fast else torch.where(nan, float("nan"), out)


def _reference(fa, fb, a, sa, b, sb, kpa, kpb, acc, fast):
    ctype = torch.float16 if "fp16" in (fa, fb) else torch.bfloat16
    A = _scaled(_decode(fa, a, 1 if kpa else 0), sa, ctype, False, fast)
    B = _scaled(_decode(fb, b, 0 if kpb else 1), sb, ctype, True, fast)
    ref = A @ B + (acc.double() if acc is not None else 0.0)
    bound = A.abs() @ B.abs() + (acc.double().abs() if acc is not None else 0.0)
    return ref, bound


def _inputs(fa, fb, M, N, K, kpa=True, kpb=True, seed=0):
    """Random operands and scales; scales keep fp8 values inside fp16's range where fp16 is
    the compute type (overflow is tested on its own)."""
    g = torch.Generator().manual_seed(seed)
    scale_lo, scale_hi = (117, 128) if "fp16" in (fa, fb) else (118, 136)
    ashape = (M // (1 if kpa or fa != "e2m1" else 2), K // (2 if kpa and fa == "e2m1" else 1))
    bshape = (K // (2 if kpb and fb == "e2m1" else 1), N // (1 if kpb or fb != "e2m1" else 2))
    a, b = _codes(fa, ashape, g), _codes(fb, bshape, g)
    sa = None if fa in UNSCALED else \
        torch.randint(scale_lo, scale_hi, (M, K // 32), generator=g).to(torch.uint8)
    sb = None if fb in UNSCALED else \
        torch.randint(scale_lo, scale_hi, (N, K // 32), generator=g).to(torch.uint8)
    return a, sa, b, sb


def _run(fa, fb, a, sa, b, sb, M, N, K, kpa=True, kpb=True, acc=None, fast=False,
         BM=32, BN=32, BK=64, device="cpu"):
    dev = [t.to(device) if t is not None else None for t in (a, sa, b, sb, acc)]
    a, sa, b, sb, acc = dev
    c = torch.full((M, N), float("nan"), device=device)
    grid = (-(-M // BM), -(-N // BN))
    dummy = torch.zeros(1, dtype=torch.uint8, device=device)
    _scaled_mm[grid](a, sa if sa is not None else dummy, b, sb if sb is not None else dummy,
                     c, acc if acc is not None else c, M, N, K, FA=fa, FB=fb, KPA=kpa,
                     KPB=kpb, HAS_SA=sa is not None, HAS_SB=sb is not None,
                     HAS_ACC=acc is not None, FAST=fast, BM=BM, BN=BN, BK=BK)
    return c.cpu()


def _check(got, ref, bound, K):
    """Equal NaN/inf positions; elsewhere within fp32 accumulation-order error."""
    assert torch.equal(got.isnan(), ref.isnan()), "NaN positions differ"
    fin = ref.isfinite()
    assert torch.equal(got[~fin & ~ref.isnan()].double(), ref[~fin & ~ref.isnan()])
    err = (got.double() - ref).abs()[fin]
    assert (err <= K * 2.0 ** -24 * bound[fin] + 1e-30).all(), err.max()


# ------------------------------------------------------------------ interpreter (CPU)
@pytest.mark.parametrize("fa,fb", PAIRS)
def test_pairs_ragged_interpreter(fa, fb):
    """Every pair Triton compiles for sm_90; M, N not multiples of the 32-tile and K = 96
    (one and a half 64-blocks), with an acc."""
    M, N, K = 40, 24, 96
    a, sa, b, sb = _inputs(fa, fb, M, N, K, seed=hash((fa, fb)) % 1000)
    acc = torch.randn(M, N, generator=torch.Generator().manual_seed(1))
    got = _run(fa, fb, a, sa, b, sb, M, N, K, acc=acc)
    ref, bound = _reference(fa, fb, a, sa, b, sb, True, True, acc, False)
    _check(got, ref, bound, K)


@pytest.mark.parametrize("fa,fb,kpa,kpb", [("e2m1", "e2m1", False, False),
                                           ("e2m1", "bf16", False, True),
                                           ("e4m3", "e2m1", True, False)])
def test_e2m1_packed_along_m_or_n(fa, fb, kpa, kpb):
    """lhs_k_pack / rhs_k_pack=False: the pairs run along M (lhs) or N (rhs)."""
    M, N, K = 64, 32, 64
    a, sa, b, sb = _inputs(fa, fb, M, N, K, kpa, kpb, seed=7)
    got = _run(fa, fb, a, sa, b, sb, M, N, K, kpa, kpb)
    ref, bound = _reference(fa, fb, a, sa, b, sb, kpa, kpb, None, False)
    _check(got, ref, bound, K)


@pytest.mark.parametrize("fast", [False, True])
def test_nan_and_edge_scales(fast):
    """Scale 255 makes its 32 values NaN (fast_math: value * inf instead, NaN only for a zero
    value); scale 0 is 0.0 (Triton's bits); scales past fp16's range overflow to inf /
    underflow in the fp16 compute type."""
    M, N, K = 32, 32, 64
    for fa, fb in [("e4m3", "e2m1"), ("e5m2", "fp16")]:
        a, sa, b, sb = _inputs(fa, fb, M, N, K, seed=3)
        sa[3, 0], sa[3, 1], sa[5, 0], sa[6, 0], sa[7, 1] = 127, 255, 0, 150, 90
        a[3, 32:] = 0x38 if fa == "e4m3" else 0x3C           # 1.0: value * inf is +inf ...
        if fb == "e2m1":
            b[16:, 0] = 0x22                                  # ... and so is C[3, 0]
        else:
            b[32:, 0] = 1.0
        if sb is not None:
            sb[4, 0] = 255
        got = _run(fa, fb, a, sa, b, sb, M, N, K, fast=fast)
        ref, bound = _reference(fa, fb, a, sa, b, sb, True, True, None, fast)
        assert not ref[3].isfinite().any() and (ref[3].isnan().all() or fast)
        assert ref[3, 0] == float("inf") if fast else ref[3, 0].isnan()
        assert not ref[8, 5:].isnan().any()
        _check(got, ref, bound, K)


def test_nan_and_inf_data():
    """fp8 NaN / inf codes and fp16 inf propagate as in the reference."""
    M, N, K = 32, 16, 32
    a, sa, b, sb = _inputs("e5m2", "fp16", M, N, K, seed=5)
    a[0, 0], a[1, 1], a[2, 2] = 0x7C, 0xFE, 0xFC        # +inf, NaN, -inf
    b[3, 4] = float("inf")
    got = _run("e5m2", "fp16", a, sa, b, sb, M, N, K, BN=16, BK=32)
    ref, bound = _reference("e5m2", "fp16", a, sa, b, sb, True, True, None, False)
    assert ref.isinf().any() and ref.isnan().any()
    _check(got, ref, bound, K)


def test_fp8_dtype_storage():
    """fp8 operands may come as the float8 dtype instead of uint8 bits."""
    M, N, K = 32, 32, 64
    a, sa, b, sb = _inputs("e4m3", "e5m2", M, N, K, seed=9)
    got = _run("e4m3", "e5m2", a.view(torch.float8_e4m3fn), sa, b.view(torch.float8_e5m2), sb,
               M, N, K)
    ref, bound = _reference("e4m3", "e5m2", a, sa, b, sb, True, True, None, False)
    _check(got, ref, bound, K)


@kit.jit
def _bad(A, U, H, C, WHICH: kit.constexpr):
    r16, r32 = kit.arange(0, 16), kit.arange(0, 32)
    u = kit.load(U + r32[:, None] * 32 + r32[None, :])                  # uint8 [32, 32]
    h = kit.load(H + r32[:, None] * 32 + r32[None, :])                  # fp16 [32, 32]
    s = kit.load(U + r32[:, None] + r16[None, :] * 0)                   # uint8 [32, 16]
    s1 = kit.load(U + r32[:, None] + kit.arange(0, 1)[None, :])         # uint8 [32, 1]
    if WHICH == "pair":
        y = kit.dot_scaled(h.to(kit.bfloat16), None, "bf16", h, None, "fp16")
    elif WHICH == "format":
        y = kit.dot_scaled(u, s1, "e3m2", u, s1, "e4m3")
    elif WHICH == "kpack":
        y = kit.dot_scaled(u, s1, "e4m3", u, s1, "e4m3", lhs_k_pack=False)
    elif WHICH == "dtype":
        y = kit.dot_scaled(h, None, "e4m3", u, s1, "e4m3")
    elif WHICH == "scale":
        y = kit.dot_scaled(u, s, "e4m3", u, s1, "e4m3")
    elif WHICH == "k":
        y = kit.dot_scaled(u, s1, "e2m1", u, s1, "e4m3")
    elif WHICH == "acc":
        y = kit.dot_scaled(u, s1, "e4m3", u, s1, "e4m3", kit.zeros((32, 16), kit.float32))
    else:
        y = kit.dot_scaled(u, s1, "e4m3", u, s1, "e4m3", out_dtype=kit.float16)
    kit.store(C + r32[:, None] * 32 + r32[None, :], y)


@pytest.mark.parametrize("which,msg", [
    ("pair", "bf16 with fp16 is not supported"), ("format", "lhs_format must be one of"),
    ("kpack", "lhs_k_pack=False is only for e2m1"), ("dtype", "takes a .* tile, got fp16"),
    ("scale", r"lhs_scale must be a tile of shape \[32, 1\]"),
    ("k", "holds K = 64 .* K = 32"), ("out", "out_dtype must be kit.float32"),
    ("acc", r"acc must be an fp32 tile of shape \[32, 32\]")])
def test_errors_at_the_user_line(which, msg):
    """What Triton refuses (bf16 x fp16 on Hopper, unknown formats, k_pack=False off e2m1,
    non-float32 out_dtype) and shape mismatches: a CompileError at the kit.dot_scaled line."""
    u = torch.randint(0, 255, (1024,), dtype=torch.uint8)
    h = torch.randn(1024, dtype=torch.float16)
    c = torch.full((1024,), float("nan"))
    with pytest.raises(CompileError, match=msg) as e:
        _bad[(1,)](u, u, h, c, WHICH=which)
    assert "kit.dot_scaled(" in str(e.value)


# ------------------------------------------------------------------ SASS (no GPU needed)
_SASS = pytest.mark.skipif(find_tool("cuobjdump") is None or find_tool("nvdisasm") is None,
                           reason="cuobjdump/nvdisasm not found")


@_SASS
@pytest.mark.parametrize("fa,fb", [("e4m3", "e4m3"), ("e2m1", "bf16")])
def test_sass_sm90a(fa, fb):
    """Compiles for sm_90a: tensor-core products (HMMA), no spills."""
    specs = [("*u8", 16), ("*u8", 16), ("*bf16" if fb == "bf16" else "*u8", 16), ("*u8", 16),
             ("*fp32", 16), ("*fp32", 16), ("i32", 16), ("i32", 16), ("i32", 16)]
    consts = (fa, fb, True, True, fa not in UNSCALED, fb not in UNSCALED, False, False, 64, 64, 64)
    ck = _scaled_mm.compile(specs, consts, 4, "sm_90a")
    try:
        ops = sass_opcodes(disassemble(ck.asm["cubin"]))
    except ToolError as e:
        pytest.skip(str(e))
    assert sum(n for o, n in ops.items() if o.startswith("HMMA")) >= 64 * 64 * 64 // 2048 // 4
    assert ck.metadata["spills"] == 0, ck.metadata
    assert not any(o.startswith(("STL", "LDL")) for o in ops), ops


# ------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("fa,fb,kpa,kpb", [(fa, fb, True, True) for fa, fb in PAIRS] +
                         [("e2m1", "e2m1", False, False), ("e4m3", "e2m1", True, False)])
def test_gpu_matches_interpreter(fa, fb, kpa, kpb, monkeypatch):
    """The same kernels on the GPU agree with the interpreter (fp32 accumulation order
    aside) and with the reference, NaN scales and ragged edges included."""
    M, N, K = 72, 40, 96
    a, sa, b, sb = _inputs(fa, fb, M, N, K, kpa, kpb, seed=11)
    if sa is not None:
        sa[3, 1], sa[5, 0] = 255, 0
    acc = torch.randn(M, N, generator=torch.Generator().manual_seed(2))
    got = _run(fa, fb, a, sa, b, sb, M, N, K, kpa, kpb, acc=acc, device="cuda")
    ref, bound = _reference(fa, fb, a, sa, b, sb, kpa, kpb, acc, False)
    _check(got, ref, bound, K)
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    want = _run(fa, fb, a, sa, b, sb, M, N, K, kpa, kpb, acc=acc)
    _check(got, want.double(), bound, 2 * K)


@pytest.mark.gpu
def test_gpu_matches_triton_dot_scaled():
    """Where the real Triton is installed: kit.dot_scaled and tl.dot_scaled on the same
    inputs agree (benchmarks/dot_scaled_vs_triton.py, which prints the table)."""
    pytest.importorskip("triton")
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "dot_scaled_vs_triton.py"
    spec = importlib.util.spec_from_file_location("dot_scaled_vs_triton", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main() == 0
