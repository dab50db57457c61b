"""Level 2 below sm_90 (Ampere / Ada: sm_80, sm_86, sm_89): kit.shared, kit.tma_load on
cp.async, kit.mma on ldmatrix + mma.sync (backend/lower/ampere.py, frontend/ampere.py).

No Ampere GPU is needed:
- the address formulas the lowering emits are run on integers here to simulate cp.async
  filling a swizzled tile and ldmatrix reading it back, and every fragment register is
  checked against the mma.sync operand it must hold (every warp grid, both operand
  orientations, every swizzle);
- the kernels are compiled for sm_80 and sm_89 and their SASS checked (HMMA, LDGSTS, LDSM,
  no spills);
- the attention and GEMM kernels run in the interpreter against float64 references at ragged
  sizes (the interpreter runs the tile IR, the same for every target);
- GPU tests (`-m gpu`) run the sm_80 code path on whatever GPU there is (an H100: the
  `arch="sm_80"` launch option loads compute_80 PTX that the driver assembles).
"""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest
import torch
from kitjit.backend.lower.ampere import (
    Arith,
    copy_piece,
    copy_plan,
    ldsm_a,
    ldsm_a_const,
    ldsm_b,
    ldsm_b_const,
    smem_offset,
    split_const,
    warp_only,
)

import kitjit as kit
from kitjit.ir.layouts import Mma, shared_layout
from kitjit.ir.types import bfloat16
from kitjit.testing import has_gpu

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
AR = Arith()


# ------------------------------------------------------------------ CPU simulation
def fill(tile: np.ndarray, lay, threads: int) -> np.ndarray:
    """Shared memory (16-bit words) after `threads` threads cp.async `tile` as the lowering
    addresses it: each piece must land once, where the direct formula says."""
    R, C = tile.shape
    upr = C * 2 // 16
    smem = np.full(R * C, -1, np.int64)
    w, h = copy_plan(threads, R, upr)
    for tid in range(threads):
        r, u = copy_piece(AR, tid, w)
        base = smem_offset(AR, lay, R, C * 2, r, u)
        for j in range(0, upr, w):
            for i in range(0, R, h):
                if r + i >= R:
                    continue
                x, add = split_const(lay, R, C * 2, i, j)
                off = (base ^ x) + add
                assert off == smem_offset(AR, lay, R, C * 2, r + i, u + j)
                assert (smem[off // 2: off // 2 + 8] == -1).all(), "a piece landed twice"
                smem[off // 2: off // 2 + 8] = tile[r + i, (u + j) * 8: (u + j) * 8 + 8]
    assert (smem >= 0).all(), "a piece was never copied"
    return smem


def ldsm(smem: np.ndarray, addrs: list[int], n: int, trans: bool) -> list[list[tuple]]:
    """ldmatrix.x`n` (.trans): per lane, the n registers as (low, high) element pairs."""
    mats = []
    for j in range(n):
        rows = []
        for i in range(8):
            a = addrs[8 * j + i]
            assert a % 16 == 0, "ldmatrix rows are 16-byte aligned"
            rows.append(smem[a // 2: a // 2 + 8])
        mats.append(np.array(rows))
    out = []
    for lane in range(32):
        g, t = lane // 4, lane % 4
        out.append([(m[2 * t, g], m[2 * t + 1, g]) if trans else (m[g, 2 * t], m[g, 2 * t + 1])
                    for m in mats])
    return out


def thread_origin(lin, lane: int, warp: int) -> tuple[int, int]:
    c = [0, 0]
    for k, bvec in enumerate(lin.lane):
        if lane >> k & 1:
            c = [x ^ y for x, y in zip(c, bvec)]
    for k, bvec in enumerate(lin.warp):
        if warp >> k & 1:
            c = [x ^ y for x, y in zip(c, bvec)]
    return c[0], c[1]


def simulate_mma(M, N, K, wm, wn, a_tr, b_tr, rng, n_contig=False):
    """Every fragment of acc = A @ B as sm80_mma loads it, against the operands
    (`n_contig`: the warps' n-tiles adjacent, `Mma.n_contig`)."""
    A = rng.integers(0, 60000, (M, K))
    B = rng.integers(0, 60000, (K, N))
    a_st, b_st = (A.T.copy() if a_tr else A), (B.T.copy() if b_tr else B)  # stored tiles
    la = shared_layout(a_st.shape, bfloat16)
    lb = shared_layout(b_st.shape, bfloat16)
    sa, sb = fill(a_st, la, 128), fill(b_st, lb, 32)
    a_rows, a_rb = a_st.shape[0], a_st.shape[1] * 2
    b_rows, b_rb = b_st.shape[0], b_st.shape[1] * 2
    mma = Mma(wm, wn, n_contig)
    lc = mma.to_linear((M, N))
    ic = lc.reg_index()
    wl = warp_only(lc)
    ms, ns = list(range(0, M, 16 * wm)), mma.n_tiles(N)
    step = ns[1] - ns[0] if len(ns) > 1 else 0
    for warp in range(wm * wn):
        wrow, wcol = thread_origin(wl, 0, warp)
        a_ptr = [smem_offset(AR, la, a_rows, a_rb, *ldsm_a(AR, lane, wrow, a_tr))
                 for lane in range(32)]
        pairs = ({step} if len(ns) > 1 else set()) | ({0} if len(ns) % 2 else set())
        b_ptr = {p: [smem_offset(AR, lb, b_rows, b_rb, *ldsm_b(AR, lane, wcol, p, b_tr))
                     for lane in range(32)] for p in pairs}
        for k0 in range(0, K, 16):
            for mi in ms:
                x, add = split_const(la, a_rows, a_rb, *ldsm_a_const(mi, k0, a_tr))
                regs = ldsm(sa, [(p ^ x) + add for p in a_ptr], 4, a_tr)
                for lane in range(32):
                    g, t = lane // 4, lane % 4
                    for j, (lo, hi) in enumerate(regs[lane]):
                        r, c = wrow + mi + g + 8 * (j & 1), k0 + 2 * t + 8 * (j >> 1)
                        assert (lo, hi) == (A[r, c], A[r, c + 1]), (warp, lane, mi, k0, j)
            for j in range(0, len(ns), 2):
                pair = step if j + 1 < len(ns) else 0
                x, add = split_const(lb, b_rows, b_rb, *ldsm_b_const(ns[j], k0, b_tr))
                regs = ldsm(sb, [(p ^ x) + add for p in b_ptr[pair]], 4 if pair else 2,
                            not b_tr)
                for lane in range(32):
                    g, t = lane // 4, lane % 4
                    for q, (lo, hi) in enumerate(regs[lane] if pair or lane < 16 else []):
                        n = wcol + ns[j] + (pair if q >= 2 else 0) + g
                        k = k0 + 2 * t + 8 * (q & 1)
                        assert (lo, hi) == (B[k, n], B[k + 1, n]), (warp, lane, j, k0, q)
        for lane in range(32):  # the accumulator registers sm80_mma writes per (mi, nj)
            g, t = lane // 4, lane % 4
            r0, c0 = thread_origin(lc, lane, warp)
            rc = lc.reg_coords()
            for mi in ms:
                for nj in ns:
                    for i, (dr, dc) in enumerate(((0, 0), (0, 1), (8, 0), (8, 1))):
                        cr, cc = rc[ic[(mi + dr, nj + dc)]]
                        assert (r0 ^ cr, c0 ^ cc) == (wrow + mi + g + 8 * (i >= 2),
                                                      wcol + nj + 2 * t + (i & 1))


@pytest.mark.parametrize("M,N,K,wm,wn", [
    (128, 64, 64, 4, 1),     # attention S = Q K^T: warps over rows
    (128, 256, 64, 2, 4),    # the GEMM's 64x64 warp tiles
    (64, 64, 32, 2, 2),      # 64-byte swizzle
    (32, 8, 16, 2, 1),       # 32-byte swizzle, one n-tile (an x2 load)
    (64, 16, 32, 1, 2),      # one n-tile per warp (x2)
    (64, 64, 128, 1, 4),     # two column chunks along K
])
@pytest.mark.parametrize("a_tr,b_tr", [(False, False), (False, True), (True, False)])
def test_fragments_match_mma_operands(M, N, K, wm, wn, a_tr, b_tr):
    simulate_mma(M, N, K, wm, wn, a_tr, b_tr, np.random.default_rng(M * N + K))


@pytest.mark.parametrize("M,N,K,wm,wn", [(256, 128, 64, 4, 2), (64, 64, 32, 2, 2),
                                         (64, 16, 32, 1, 2), (128, 256, 64, 2, 4)])
@pytest.mark.parametrize("b_tr", [False, True])
def test_fragments_match_with_contiguous_warp_columns(M, N, K, wm, wn, b_tr):
    """frontend/ampere.py's _WARP_COLS_CONTIGUOUS: each warp's n-tiles adjacent."""
    simulate_mma(M, N, K, wm, wn, False, b_tr, np.random.default_rng(M + N + K), True)


@pytest.mark.parametrize("threads", [32, 128, 384])
@pytest.mark.parametrize("R,C", [(64, 256), (128, 128), (16, 64), (8, 32), (64, 8)])
def test_copies_cover_the_box_once(threads, R, C):
    tile = np.random.default_rng(R + C).integers(0, 60000, (R, C))
    lay = shared_layout((R, C), bfloat16)
    if copy_plan(threads, R, C * 2 // 16) is None:
        pytest.skip("not a plan the lowering takes (it raises a LoweringError)")
    smem = fill(tile, lay, threads)
    for r in range(R):
        for u in range(C // 8):
            off = smem_offset(AR, lay, R, C * 2, r, u)
            assert (smem[off // 2: off // 2 + 8] == tile[r, u * 8: u * 8 + 8]).all()


def test_swizzle_is_tma_pattern():
    """128-byte rows: unit u of row r at u ^ (r % 8), TMA's SWIZZLE_128B (so one tile layout
    serves both targets); 64-byte rows: u ^ (r / 2 % 4)."""
    lay = shared_layout((64, 64), bfloat16)
    assert [smem_offset(AR, lay, 64, 128, r, 3) for r in range(9)] == \
        [r * 128 + ((3 ^ (r % 8)) << 4) for r in range(9)]
    lay = shared_layout((64, 32), bfloat16)
    assert [smem_offset(AR, lay, 64, 64, r, 1) for r in range(8)] == \
        [r * 64 + ((1 ^ (r // 2 % 4)) << 4) for r in range(8)]


# ------------------------------------------------------------------ kernels of this file
@kit.jit
def mma_store_kernel(A, B, C, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
                     TRANS_B: kit.constexpr):
    """C = A @ B through shared tiles, kit.mma and kit.tma_store (B given as [N, K] when
    TRANS_B): the level-2 ops one by one, ragged edges on every side."""
    m0, n0 = kit.program_id(0) * BM, kit.program_id(1) * BN
    a = kit.shared((BM, BK), A.dtype.element_ty)
    b = kit.shared((BN, BK) if TRANS_B else (BK, BN), B.dtype.element_ty)
    bar = kit.mbarriers(1)
    acc = kit.zeros((BM, BN), kit.float32)
    for i in range(kit.cdiv(K, BK)):
        kit.tma_load(a, A, (m0, i * BK), bar[0])
        kit.tma_load(b, B, (n0, i * BK) if TRANS_B else (i * BK, n0), bar[0])
        kit.mbarrier_wait(bar[0], i % 2)
        acc = kit.mma(a, b.T if TRANS_B else b, acc)
    kit.tma_store(C, (m0, n0), acc.to(C.dtype.element_ty))


@kit.jit
def narrow_rows_kernel(A, C, BM: kit.constexpr):
    a = kit.shared((BM, 4), A.dtype.element_ty)       # rows of 8 bytes: no 16-byte pieces
    bar = kit.mbarriers(1)
    kit.tma_load(a, A, (0, 0), bar[0])
    kit.mbarrier_wait(bar[0], 0)


@kit.jit
def mixed_barrier_kernel(A, C, BM: kit.constexpr):
    a = kit.shared((BM, 64), A.dtype.element_ty)
    bar = kit.mbarriers(1, arrivals=2)
    kit.tma_load(a, A, (0, 0), bar[0])
    kit.mbarrier_arrive(bar[0])
    kit.mbarrier_wait(bar[0], 0)


@kit.jit
def roles_kernel(A, C, BM: kit.constexpr):
    """A producer warpgroup copies, a consumer warpgroup reads and hands the stage back
    (kit.mbarrier_arrive: once per warpgroup on Hopper, once per warp on Ampere), with
    Hopper's register budgets (kit.setmaxnreg: a no-op on Ampere)."""
    a = kit.shared((2, BM, 64), A.dtype.element_ty)
    ready = kit.mbarriers(2)
    empty = kit.mbarriers(2, arrivals=1)
    if kit.warpgroup_id() == 0:
        kit.setmaxnreg(40)     # a no-op on sm_80 (no register reallocation there)
        for j in range(4):
            kit.mbarrier_wait(empty[j % 2], j // 2 % 2 ^ 1)
            kit.tma_load(a[j % 2], A, (j * BM, 0), ready[j % 2])
    else:
        kit.setmaxnreg(232)
        for j in range(4):
            kit.mbarrier_wait(ready[j % 2], j // 2 % 2)
            acc = kit.mma(a[j % 2], a[j % 2].T, kit.zeros((BM, BM), kit.float32))
            kit.mbarrier_arrive(empty[j % 2])
            rm, rn = kit.arange(0, BM), kit.arange(0, BM)
            kit.store(C + j * BM * BM + rm[:, None] * BM + rn[None, :], acc)


def test_roles_arrival_counts_on_sm80():
    """Copies arrive per producer thread (128), kit.mbarrier_arrive per consumer warp (4);
    kit.setmaxnreg emits nothing."""
    ck = kit.compile_aot(str(pathlib.Path(__file__)), "roles_kernel", ["*bf16:16", "*fp32:16"],
                         {"BM": 64}, 8, "sm_80")
    ptx = ck.asm["ptx"]
    assert "bar.warp.sync" in ptx and "cp.async.mbarrier.arrive.noinc" in ptx
    assert "setmaxnreg" not in ptx and ".minnctapersm" not in ptx   # a no-op on sm_80
    tir = ck.asm["tir"]
    assert "sm80_init=128" in tir and "sm80_init=4" in tir, tir[:2000]


def test_roles_kernel_runs_in_interpreter(monkeypatch):
    """Roles as coroutines (tests/test_ampere.py's GPU twin below runs the sm_80 path)."""
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    _run_roles(None)


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")
def test_roles_kernel_runs_on_gpu_sm80_path():
    _run_roles("sm_80")


def _run_roles(arch):
    dev = "cuda" if arch else "cpu"
    a = torch.randn(256, 64, generator=torch.Generator().manual_seed(9)).to(dev,
                                                                            torch.bfloat16)
    c = torch.full((4, 64, 64), float("nan"), device=dev)
    roles_kernel[(1,)](a, c, BM=64, num_warps=8, arch=arch)
    ref = torch.stack([a[j * 64:(j + 1) * 64].double() @ a[j * 64:(j + 1) * 64].double().T
                       for j in range(4)])
    _check(c, ref, 1e-5)


def _mma_store(a, b, trans_b, arch=None, BM=64, BN=64, BK=32, num_warps=4):
    M, K = a.shape
    N = b.shape[0] if trans_b else b.shape[1]
    c = torch.full((M, N), float("nan"), dtype=a.dtype, device=a.device)
    mma_store_kernel[(kit.cdiv(M, BM), kit.cdiv(N, BN))](a, b, c, K, BM=BM, BN=BN, BK=BK,
                                                         TRANS_B=trans_b, num_warps=num_warps,
                                                         arch=arch)
    return c


# ------------------------------------------------------------------ the interpreter
def _attn_case(B, H, S, SK, D, g, dev="cpu"):
    gen = torch.Generator().manual_seed(S * D + SK)
    q = torch.randn(B, H, S, D, generator=gen).to(dev, torch.bfloat16)
    k, v = (torch.randn(B, H // g, SK, D, generator=gen).to(dev, torch.bfloat16)
            for _ in "kv")
    return q, k, v


def _fa2(q, k, v, causal, arch=None, **cfg):
    """fa2_kernel with outputs poisoned with NaN (as the example's wrapper, which allocates
    them empty)."""
    from examples.attention_ampere import default_config, fa2_kernel

    B, H, S, D = q.shape
    cfg = dict(default_config(D, causal), **cfg)
    o = torch.full((B, H, S, D), float("nan"), dtype=q.dtype, device=q.device)
    lse = torch.full((B, H, S), float("nan"), dtype=torch.float32, device=q.device)
    fa2_kernel[(kit.cdiv(S, cfg["BM"]), B * H)](
        *(t.contiguous().view(-1, D) for t in (q, k, v)), o, lse, S, k.shape[2], H,
        H // k.shape[1], 1.4426950408889634 / math.sqrt(D), D=D, CAUSAL=causal, arch=arch,
        **cfg)
    return o, lse


def _check(got, want, tol, what=""):
    assert not torch.isnan(got).any(), f"{what}: NaN in the output"
    err = ((got.double() - want).norm() / want.norm()).item()
    assert err < tol, f"{what}: relative error {err:.2e}"


@pytest.mark.parametrize("S,SK,D,causal,g", [(130, 130, 64, True, 2), (70, 200, 64, False, 1)])
def test_fa2_example_in_interpreter(S, SK, D, causal, g, monkeypatch):
    from examples.attention_ampere import reference

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    q, k, v = _attn_case(1, 2, S, SK, D, g)
    o, lse = _fa2(q, k, v, causal, BM=64, BN=64, arch="sm_80")
    ro, rl = reference(q, k, v, causal)
    _check(o, ro, 1e-2, "O")
    _check(lse, rl, 1e-4, "LSE")


@pytest.mark.parametrize("trans_b", [False, True])
def test_mma_and_tma_store_in_interpreter(trans_b, monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(100, 72, generator=gen).to(torch.bfloat16)
    b = torch.randn(72, 88, generator=gen).to(torch.bfloat16)
    bb = b.t().contiguous() if trans_b else b
    _check(_mma_store(a, bb, trans_b), a.double() @ b.double(), 1e-2)


def test_matmul_example_sm80_path_in_interpreter(monkeypatch):
    from examples.matmul import matmul

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(150, 96, generator=gen).to(torch.bfloat16)
    b = torch.randn(96, 136, generator=gen).to(torch.bfloat16)
    _check(matmul(a, b, arch="sm_80"), a.double() @ b.double(), 1e-2)


def test_matmul_ampere_in_interpreter(monkeypatch):
    from examples.matmul_ampere import matmul

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(150, 200, generator=gen).to(torch.bfloat16)
    b = torch.randn(200, 136, generator=gen).to(torch.bfloat16)
    _check(matmul(a, b, arch="sm_80", STAGES=4), a.double() @ b.double(), 1e-2)


# ------------------------------------------------------------------ compile for sm_80 / sm_89
needs_sass = pytest.mark.skipif(
    __import__("kitjit.tools", fromlist=["find_tool"]).find_tool("cuobjdump") is None,
    reason="cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump "
           "nvidia-cuda-nvdisasm)")
ATTN_SIG = ["*bf16:16"] * 4 + ["*fp32:16", "i32:16", "i32:16", "i32", "i32", "fp32"]
GEMM_SIG = ["*bf16:16"] * 3 + ["*fp32:16", "*i32:16", "i32:16", "i32:16", "i32:16"]


def _sass(path, kernel, sig, consts, num_warps, arch):
    from tests.test_sass import compile_example

    return compile_example(path, kernel, sig, consts, num_warps, arch)


def _level2_ops(c):
    assert c.has("HMMA.16816.F32.BF16"), f"no mma.sync: {c.summary()}"
    assert c.has("LDGSTS"), f"no cp.async: {c.summary()}"
    assert c.has("LDSM.16.M88.4"), f"no ldmatrix: {c.summary()}"
    assert not c.has("HGMMA") and not c.has("UTMALDG"), "Hopper instructions on Ampere"


@needs_sass
@pytest.mark.parametrize("arch,D,causal,limit", [("sm_89", 64, True, 0),
                                                 ("sm_80", 128, False, 128)])
def test_fa2_sass(arch, D, causal, limit):
    """D 64 (64-key blocks): no spills. D 128 (FA2's 128x64 tile): a few words at most
    (FA2's own kernel for that tile spills 172 bytes on sm_80: flash-attention issue 1630)."""
    c = _sass(EXAMPLES / "attention_ampere.py", "fa2_kernel", ATTN_SIG,
              {"BM": 128, "BN": 64, "D": D, "CAUSAL": causal, "STAGES": 2}, 4, arch)
    _level2_ops(c)
    assert c.has("LDSM.16.MT88.4"), "V should load with ldmatrix.trans"
    assert c.has("MUFU.EX2")
    assert c.ck.metadata["spills"] <= limit, c.ck.metadata
    if not limit:
        assert not c.has("STL") and not c.has("LDL")


@needs_sass
def test_matmul_example_sass():
    """The Hopper GEMM text on sm_80 (sm_89 is the same lowering: test_fa2_sass compiles
    for it)."""
    from examples.matmul import AMPERE_CONFIG

    cfg = dict(AMPERE_CONFIG)
    nw = cfg.pop("num_warps")
    c = _sass(EXAMPLES / "matmul.py", "matmul_kernel", GEMM_SIG, dict(cfg, GROUP=8), nw,
              "sm_80")
    _level2_ops(c)
    assert c.has("LDSM.16.MT88.4"), "B [K, N] should load with ldmatrix.trans"
    assert c.ck.metadata["spills"] == 0 and not c.has("STL") and not c.has("LDL")


@pytest.fixture(scope="module")
def gemm_sass():
    """examples/matmul_ampere.py's kernel for sm_80, compiled once for the tests below."""
    if __import__("kitjit.tools", fromlist=["find_tool"]).find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump/nvdisasm not found")
    from examples.matmul_ampere import CONFIGS

    cfg = dict(CONFIGS[0])   # 256x128x64 on 8 warps: what an H100 on this code path takes
    nw = cfg.pop("num_warps")
    return cfg, _sass(EXAMPLES / "matmul_ampere.py", "matmul_ampere_kernel",
                      GEMM_SIG[:3] + GEMM_SIG[5:], dict(cfg, GROUP=8), nw, "sm_80")


def test_matmul_ampere_sass_has_no_barrier_in_its_loop(gemm_sass):
    """sync=False: the loop's refills need no bar.sync (only the prologue's and the
    barriers' init have one)."""
    cfg, c = gemm_sass
    _level2_ops(c)
    assert c.count("BAR.SYNC") <= cfg["STAGES"] // 2 + 1, c.summary()
    assert c.ck.metadata["spills"] == 0


def test_copies_inside_the_tensor_skip_the_clamping(gemm_sass):
    """Every kit.tma_load has two bodies: plain cp.async at constant offsets when the box is
    inside the tensor (LDGSTS without ZFILL) and the clamped edge path (src-size: ZFILL),
    as many copies each."""
    _, c = gemm_sass
    plain = c.count("LDGSTS.E.BYPASS.128") - c.count("LDGSTS.E.BYPASS.128.ZFILL")
    assert plain and plain == c.count("LDGSTS.E.BYPASS.128.ZFILL"), c.summary()
    ptx = c.ck.asm["ptx"]
    assert ptx.count("], 16; }") == ptx.count("], 16, %r"), "fast and edge copies differ"


@needs_sass
def test_hopper_attention_text_compiles_for_sm80():
    """One kernel text, both targets: kitjit.nn's Hopper attention kernel on sm_80."""
    c = _sass(EXAMPLES / "attention.py", "attention_kernel", ATTN_SIG,
              {"BM": 128, "BN": 64, "D": 64, "CAUSAL": False, "STAGES": 2}, 4, "sm_80")
    _level2_ops(c)
    ptx = c.ck.asm["ptx"]
    assert "cp.async.mbarrier.arrive.noinc" in ptx and "mbarrier.test_wait.parity" in ptx
    assert "wgmma" not in ptx and "cp.async.bulk" not in ptx and "shared::cta" not in ptx


def test_sm80_errors_are_located():
    from kitjit.frontend.errors import CompileError

    me = str(pathlib.Path(__file__))
    with pytest.raises(CompileError, match="16 bytes") as e:
        kit.compile_aot(me, "narrow_rows_kernel", ["*bf16:16", "*bf16:16"], {"BM": 64}, 4,
                        "sm_80")
    assert "test_ampere.py" in str(e.value)
    with pytest.raises(CompileError, match="mbarrier_arrive"):
        kit.compile_aot(me, "mixed_barrier_kernel", ["*bf16:16", "*bf16:16"], {"BM": 64}, 4,
                        "sm_80")
    with pytest.raises(CompileError, match="multiples of 16"):
        kit.compile_aot(me, "mma_store_kernel", ["*bf16:16"] * 3 + ["i32"],
                        {"BM": 8, "BN": 64, "BK": 32, "TRANS_B": False}, 4, "sm_80")


# ------------------------------------------------------------------ the arch= launch option
def test_arch_option_compiles_for_that_target():
    from kitjit.testing import FakeDriver

    x = torch.zeros(64, 64, dtype=torch.bfloat16)
    with FakeDriver(allow_cpu=True) as fake:
        mma_store_kernel[(1, 1)](x, x, x, 64, BM=64, BN=64, BK=32, TRANS_B=False,
                                 arch="sm_80")
        mma_store_kernel[(1, 1)](x, x, x, 64, BM=64, BN=64, BK=32, TRANS_B=False)
        mma_store_kernel[(1, 1)](x, x, x, 64, BM=64, BN=64, BK=32, TRANS_B=False,
                                 arch="sm_80")  # a hit: the key holds the arch
    assert [c[3] for c in fake.compiles] == ["sm_80", "sm_90a"]
    assert fake.run_on == ["sm_90a", None]
    with FakeDriver(allow_cpu=True), pytest.raises(ValueError, match="arch="):
        mma_store_kernel[(1, 1)](x, x, x, 64, BM=64, BN=64, BK=32, TRANS_B=True,
                                 arch="sm_75")


def test_ptx_for_another_gpu(cache_dir):
    """compile(arch, run_on=gpu): the arch's PTX (NUL-terminated) for the driver to assemble,
    under a key of its own (a cubin for sm_80 under the plain key)."""
    specs = [("*bf16", 16)] * 3 + [("i32", 1)]
    consts = (64, 64, 32, False)
    ck = mma_store_kernel.compile(specs, consts, 4, "sm_80", run_on="sm_90a")
    blob = ck.asm["cubin"]
    assert blob.endswith(b"\0") and b".target sm_80" in blob
    assert ck.metadata["ptx_target"] == "sm_80" and ck.metadata["tma"][0]["kind"] == "rows"
    cubin = mma_store_kernel.compile(specs, consts, 4, "sm_80").asm["cubin"]
    assert cubin[:4] == b"\x7fELF"


# ------------------------------------------------------------------ GPU: the sm_80 path
gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("S,SK,D,causal,g", [(257, 257, 128, True, 2), (100, 333, 64, False, 4)])
def test_fa2_on_gpu_sm80_path(S, SK, D, causal, g):
    from examples.attention_ampere import reference

    q, k, v = _attn_case(2, 4, S, SK, D, g, "cuda")
    ro, rl = reference(q, k, v, causal)
    for cfg in ({}, {"STAGES": 2}):
        o, lse = _fa2(q, k, v, causal, arch="sm_80", **cfg)
        _check(o, ro, 1e-2, f"O {cfg}")
        _check(lse, rl, 1e-4, f"LSE {cfg}")


@pytest.mark.gpu
@gpu
def test_hopper_attention_text_on_gpu_sm80_path():
    from examples.attention_ampere import reference
    from kitjit.nn.attention import attention_kernel

    q, k, v = _attn_case(1, 4, 300, 300, 128, 2, "cuda")
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device="cuda")
    attention_kernel[(kit.cdiv(300, 128), 4)](
        q.contiguous().view(-1, 128), *(t.contiguous().view(-1, 300, 128) for t in (k, v)),
        o, lse, 300, 300, 4, 2,
        1.4426950408889634 / math.sqrt(128), BM=128, BN=64, D=128, CAUSAL=True, STAGES=2,
        num_warps=4, arch="sm_80")
    ro, rl = reference(q, k, v, True)
    _check(o, ro, 1e-2, "O")
    _check(lse, rl, 1e-4, "LSE")


@pytest.mark.gpu
@gpu
@pytest.mark.filterwarnings("ignore:kernel 'attention_ws_kernel' spills")
def test_warp_specialized_text_on_gpu_sm80_path():
    """kitjit.nn's producer/consumer attention (kit.setmaxnreg, a no-op on sm_80; one
    producer warpgroup's cp.async, two consumers' kit.mbarrier_arrive per warp)."""
    from examples.attention_ampere import reference
    from kitjit.nn.attention import attention_ws_kernel

    q, k, v = _attn_case(1, 4, 300, 300, 128, 2, "cuda")
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device="cuda")
    attention_ws_kernel[(kit.cdiv(300, 128), 4)](
        q.contiguous().view(-1, 128), *(t.contiguous().view(-1, 300, 128) for t in (k, v)),
        o, lse, 300, 300, 4, 2,
        1.4426950408889634 / math.sqrt(128), BM=128, BN=128, D=128, CAUSAL=True, STAGES=2,
        CONSUMERS=2, num_warps=12, arch="sm_80")
    ro, rl = reference(q, k, v, True)
    _check(o, ro, 1e-2, "O")
    _check(lse, rl, 1e-4, "LSE")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("trans_b", [False, True])
def test_mma_and_tma_store_on_gpu_sm80_path(trans_b):
    a = torch.randn(300, 200, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(200, 264, device="cuda", dtype=torch.bfloat16)
    bb = b.t().contiguous() if trans_b else b
    for nw in (4, 8):
        _check(_mma_store(a, bb, trans_b, arch="sm_80", num_warps=nw), a.double() @ b.double(),
               1e-2, f"{nw} warps")


@pytest.mark.gpu
@gpu
def test_matmul_examples_on_gpu_sm80_path():
    from examples.matmul import matmul
    from examples.matmul_ampere import matmul as matmul_ampere

    for M, N, K in ((300, 264, 200), (1024, 512, 4096)):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        ref = a.double() @ b.double()
        _check(matmul(a, b, arch="sm_80"), ref, 1e-2, f"matmul.py {M}x{N}x{K}")
        _check(matmul_ampere(a, b, arch="sm_80"), ref, 1e-2, f"matmul_ampere {M}x{N}x{K}")
