"""Shared tiles whose dims are not powers of two (FA4's 192-row Q tile, its 128x80 K/V
tiles): rows a multiple of 8, cols whole 32/64/128-byte swizzle chunks. They are copied by
TMA (one box of up to 256 rows) and read by kit.mma on its K side (a's cols, b's rows);
register tiles keep power-of-two dims, so the errors say where such a tile cannot go.

Checked three ways: the interpreter against float64 torch, the compile to sm_90a SASS
(UTMALDG, HGMMA, no spills) and, marked `gpu`, the same kernels on a Hopper GPU."""

from __future__ import annotations

import pathlib
import re

import pytest
import torch
from kitjit.frontend.errors import CompileError

import kitjit as kit
from kitjit.ir.layouts import SharedLayout, shared_layout, shared_shape_error
from kitjit.ir.types import bfloat16, float32
from kitjit.testing import rel_error
from kitjit.tools import ToolError, disassemble, find_tool

HERE = pathlib.Path(__file__)


@kit.jit
def kside_kernel(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
                 STAGES: kit.constexpr, TRANS_A: kit.constexpr, TRANS_B: kit.constexpr):
    """C = A @ B, k-steps of BK (any multiple of 16 that makes whole swizzle chunks: 80, 192)
    through a ring of STAGES. TRANS_A: A is given as Aᵀ (K, M) and its (BK, BM) tiles are
    read through `.T` (a BK-row TMA box); else A (M, K) in (BM, BK) tiles (BK columns).
    TRANS_B: B given as Bᵀ (N, K), tiles (BN, BK) read through `.T`; else B (K, N) in
    (BK, BN) tiles (a BK-row box)."""
    m0 = kit.program_id(0) * BM
    n0 = kit.program_id(1) * BN
    if TRANS_A:
        a = kit.shared((STAGES, BK, BM), A.dtype.element_ty)
    else:
        a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)
    if TRANS_B:
        b = kit.shared((STAGES, BN, BK), B.dtype.element_ty)
    else:
        b = kit.shared((STAGES, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(STAGES)
    n_k = kit.cdiv(K, BK)
    for s in kit.static_range(STAGES - 1):
        if s < n_k:
            kit.tma_load(a[s], A, (s * BK, m0) if TRANS_A else (m0, s * BK), ready[s])
            kit.tma_load(b[s], B, (n0, s * BK) if TRANS_B else (s * BK, n0), ready[s])
    acc = kit.zeros((BM, BN), kit.float32)
    for i in range(n_k):
        s = i % STAGES
        kit.mbarrier_wait(ready[s], i // STAGES % 2)
        if TRANS_A:
            if TRANS_B:
                acc = kit.mma(a[s].T, b[s].T, acc)
            else:
                acc = kit.mma(a[s].T, b[s], acc)
        elif TRANS_B:
            acc = kit.mma(a[s], b[s].T, acc)
        else:
            acc = kit.mma(a[s], b[s], acc)
        j = i + STAGES - 1
        if j < n_k:
            t = j % STAGES
            kit.tma_load(a[t], A, (j * BK, m0) if TRANS_A else (m0, j * BK), ready[t])
            kit.tma_load(b[t], B, (n0, j * BK) if TRANS_B else (j * BK, n0), ready[t])
    kit.tma_store(C, (m0, n0), acc.to(C.dtype.element_ty))


def randn(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def strided(t: torch.Tensor, pad: int = 8, device="cpu") -> torch.Tensor:
    """t as a view with rows `pad` elements longer than it (not contiguous; rows stay 16
    bytes apart, as TMA needs), on `device` (made there: `.to` would copy it contiguous)."""
    big = torch.full((t.shape[0], t.shape[1] + pad), float("nan"), dtype=t.dtype,
                     device=device)
    big[:, : t.shape[1]] = t
    return big[:, : t.shape[1]]


def run_kside(M, N, K, BM, BN, BK, STAGES, trans_a, trans_b, device="cpu", seed=0):
    dt = torch.bfloat16
    a, b = randn(M, K, seed=seed + 1), randn(K, N, seed=seed + 2)
    A = strided(a.t().contiguous(), device=device) if trans_a else strided(a, device=device)
    B = strided(b.t().contiguous(), device=device) if trans_b else strided(b, device=device)
    assert not A.is_contiguous() and not B.is_contiguous()
    c = torch.full((M, N), float("nan"), dtype=dt, device=device)   # poisoned
    grid = (kit.cdiv(M, BM), kit.cdiv(N, BN))
    kside_kernel[grid](A, B, c, M, N, K, BM=BM, BN=BN, BK=BK, STAGES=STAGES, TRANS_A=trans_a,
                       TRANS_B=trans_b, num_warps=BM // 16)
    assert not torch.isnan(c).any(), f"{int(torch.isnan(c).sum())} elements of C unwritten"
    return c.cpu(), a.double() @ b.double()


# (M, N, K, BM, BN, BK, STAGES): sizes not multiples of the tile, K ragged on the k-step
KSIDE = [
    (200, 136, 488, 64, 64, 192, 2),    # 192-row B boxes, 192-col A tiles (3 chunks of 64)
    (136, 200, 424, 128, 64, 192, 2),   # two warpgroups (128 rows), 2 row blocks of B
    (72, 136, 248, 64, 128, 80, 3),     # 80: A rows of 160 bytes (five 32-byte chunks)
]
TRANS = [(False, False), (False, True), (True, False), (True, True)]


@pytest.mark.parametrize("trans_a,trans_b", TRANS, ids=["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("M,N,K,BM,BN,BK,STAGES", KSIDE,
                         ids=[f"{m}x{n}x{k}-{bm}x{bn}x{bk}" for m, n, k, bm, bn, bk, _ in KSIDE])
def test_kside_interpreter(M, N, K, BM, BN, BK, STAGES, trans_a, trans_b):
    c, ref = run_kside(M, N, K, BM, BN, BK, STAGES, trans_a, trans_b)
    assert rel_error(c, ref) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or
                    torch.cuda.get_device_capability() < (9, 0),
                    reason="needs a Hopper GPU (TMA, WGMMA)")
@pytest.mark.parametrize("trans_a,trans_b", TRANS, ids=["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("M,N,K,BM,BN,BK,STAGES", KSIDE,
                         ids=[f"{m}x{n}x{k}-{bm}x{bn}x{bk}" for m, n, k, bm, bn, bk, _ in KSIDE])
def test_kside_gpu(M, N, K, BM, BN, BK, STAGES, trans_a, trans_b):
    c, ref = run_kside(M, N, K, BM, BN, BK, STAGES, trans_a, trans_b, device="cuda")
    assert rel_error(c, ref) < 1e-2


# ----------------------------------------------------------------------------- layouts
def test_shared_layout_of_other_dims():
    # power-of-two tiles: what they always had
    assert shared_layout((128, 64), bfloat16) == SharedLayout(128, 64)
    assert shared_layout((64, 16), bfloat16) == SharedLayout(32, 16)
    # rows: any multiple of 8 keeps the chunk of its row width
    assert shared_layout((192, 64), bfloat16) == SharedLayout(128, 64)
    assert shared_layout((80, 256), bfloat16) == SharedLayout(128, 64)
    # cols: the widest swizzle whose span divides the row (160 bytes: 32-byte chunks)
    assert shared_layout((128, 80), bfloat16) == SharedLayout(32, 16)
    assert shared_layout((64, 192), bfloat16) == SharedLayout(128, 64)
    assert shared_layout((64, 48), float32) == SharedLayout(64, 16)
    assert shared_shape_error(192, 64, 2) is None and shared_shape_error(80, 80, 2) is None
    assert "multiple of 8" in shared_shape_error(100, 64, 2)
    assert "32-byte" in shared_shape_error(64, 24, 2)
    assert "at least 8 rows" in shared_shape_error(4, 48, 2)


# ----------------------------------------------------------------------------- errors
@kit.jit
def misuse_kernel(A, C, R: kit.constexpr, W: kit.constexpr, WHAT: kit.constexpr):
    t = kit.shared((R, W), A.dtype.element_ty)
    ready = kit.mbarriers(1)
    kit.tma_load(t, A, (0, 0), ready[0])
    kit.mbarrier_wait(ready[0], 0)
    if WHAT == "load":
        x = kit.load(t)
        kit.store(C + kit.arange(0, 64)[:, None] * 64 + kit.arange(0, 64)[None, :], x)
    elif WHAT == "mma":
        acc = kit.mma(t, t.T, kit.zeros((64, 64), kit.float32))
        kit.tma_store(C, (0, 0), acc.to(C.dtype.element_ty))


ERRORS = [
    (100, 64, "", r"kit.shared of shape \[100, 64\] \(bf16\): rows must be a power of two or "
                  r"a multiple of 8"),
    (64, 24, "", r"whole 32-byte swizzle chunks"),
    (320, 64, "", r"a TMA box has at most 256 rows, and the shared tile has 320"),
    (192, 64, "load", r"kit.load from a shared tile of shape \[192, 64\]: register tiles have "
                      r"power-of-two dims"),
    (192, 64, "mma", r"kit.mma: the result is a register tile, whose dims are powers of two, "
                     r"got M=192, N=192"),
]


@pytest.mark.parametrize("R,W,what,msg", ERRORS, ids=[m[:24] for *_, m in ERRORS])
def test_clear_errors(R, W, what, msg):
    a = randn(512, 256)
    c = torch.zeros(256, 256, dtype=torch.bfloat16)
    with pytest.raises(CompileError, match=msg):
        misuse_kernel[(1,)](a, c, R=R, W=W, WHAT=what, num_warps=4)


def test_other_dims_refused_below_hopper():
    with pytest.raises(CompileError, match=r"on sm_80 shared tiles keep power-of-two rows"):
        kit.compile_aot(str(HERE), "kside_kernel", ["*bf16:16"] * 3 + ["i32:16"] * 3,
                        dict(BM=64, BN=64, BK=192, STAGES=2, TRANS_A=False, TRANS_B=False),
                        4, arch="sm_80")


# ----------------------------------------------------------------------------- SASS
needs_sass = pytest.mark.skipif(
    find_tool("cuobjdump") is None or find_tool("nvdisasm") is None,
    reason="cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump "
           "nvidia-cuda-nvdisasm)")
_INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([^;]*);", re.M)


def kside_sass(BM, BN, BK, STAGES, trans_a, trans_b):
    ck = kit.compile_aot(str(HERE), "kside_kernel", ["*bf16:16"] * 3 + ["i32:16"] * 3,
                         dict(BM=BM, BN=BN, BK=BK, STAGES=STAGES, TRANS_A=trans_a,
                              TRANS_B=trans_b), BM // 16, arch="sm_90a")
    try:
        text = disassemble(ck.asm["cubin"])
    except ToolError as e:  # a broken tool install is not a kitjit failure
        pytest.skip(str(e))
    return ck, [m.group(1).strip() for m in _INSN.finditer(text)]


@needs_sass
@pytest.mark.parametrize("trans_a,trans_b", TRANS, ids=["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("BM,BN,BK,STAGES", [(64, 64, 192, 2), (128, 64, 192, 2),
                                             (64, 128, 80, 3)],
                         ids=["64x64x192", "128x64x192", "64x128x80"])
@pytest.mark.slow_except("64x64x192-nn", "64x64x192-nt", "64x64x192-tn", "64x64x192-tt")
def test_kside_sass(BM, BN, BK, STAGES, trans_a, trans_b):
    ck, insns = kside_sass(BM, BN, BK, STAGES, trans_a, trans_b)
    hgmma = [i for i in insns if i.startswith("HGMMA.")]
    # one m64nBNk16 instruction per 16 of K (each warpgroup owns 64 rows)
    assert len(hgmma) == BK // 16, hgmma[:4]
    assert all(i.startswith(f"HGMMA.64x{BN}x16.F32.BF16") for i in hgmma), hgmma[:4]
    assert any(i.startswith("UTMALDG.2D") for i in insns), "no TMA loads"
    assert any(i.startswith("UTMASTG") for i in insns), "no TMA store"
    assert not any(i.startswith(("LDL", "STL")) for i in insns), "spills"
    assert ck.metadata["spills"] == 0
    # the boxes: a BK-row (or BK-col) tile in chunks of its swizzle span
    boxes = {t["param"]: (t["box"], t["swizzle"]) for t in ck.metadata["tma"]}
    a_lay = shared_layout((BK, BM) if trans_a else (BM, BK), bfloat16)
    b_lay = shared_layout((BN, BK) if trans_b else (BK, BN), bfloat16)
    assert boxes[0] == ([BK if trans_a else BM, a_lay.chunk], a_lay.swizzle)
    assert boxes[1] == ([BN if trans_b else BK, b_lay.chunk], b_lay.swizzle)
    stage = (BM * BK + BK * BN) * 2
    assert ck.metadata["shared"] >= STAGES * stage
