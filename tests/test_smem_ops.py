"""Registers <-> shared memory and the MMA operands they make (what attention's backward needs):
`kit.store(a[s], x)` / `kit.load(a[s])` of shared tiles (and their `.T` views), `kit.mma` with a
transposed shared A operand (MN-major, imm-trans-a), `kit.tma_store(..., reduce="add")`, and
the wgmma group tracking that lets a later MMA run while an earlier result is read.

Interpreter runs against float64 torch on random inputs with NaN-poisoned outputs; compile-to-
SASS for sm_90a (HGMMA forms, STS, UTMAREDG, no spills, the waits in the PTX); the same on a GPU
(`-m gpu`).
"""

from __future__ import annotations

import pathlib
import re

import pytest
import torch

import kitjit as kit
from kitjit.interpreter import RaceError
from kitjit.testing import rel_error
from kitjit.tools import ToolError, disassemble, find_tool

HERE = pathlib.Path(__file__)
NAN = float("nan")


def randn(*shape, dtype=torch.bfloat16, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float32)
    return torch.where(x.abs() < 1e-3, 0.5, x).to(dtype).to(device)


# ============================================================================ kernels
@kit.jit
def mma_trans_a(X, Y, C, M: kit.constexpr, N: kit.constexpr, K: kit.constexpr):
    """C = Xᵀ Y with X stored (K, M): the A operand is the `.T` view of X's tile."""
    x = kit.shared((K, M), X.dtype.element_ty)
    y = kit.shared((K, N), Y.dtype.element_ty)
    bar = kit.mbarriers(1)
    kit.tma_load(x, X, (0, 0), bar[0])
    kit.tma_load(y, Y, (0, 0), bar[0])
    kit.mbarrier_wait(bar[0], 0)
    acc = kit.mma(x.T, y, kit.zeros((M, N), kit.float32))
    rm, rn = kit.arange(0, M), kit.arange(0, N)
    kit.store(C + rm[:, None] * N + rn[None, :], acc)


@kit.jit
def mma_from_stored(P, Y, C, OUT, M: kit.constexpr, N: kit.constexpr, K: kit.constexpr,
                    TRANS: kit.constexpr):
    """C = P Y with P loaded into registers and stored into shared memory (as is, or into the
    `.T` view of a (K, M) tile, read back transposed as the MMA's A); OUT = kit.load of it."""
    rm, rk = kit.arange(0, M), kit.arange(0, K)
    p = kit.load(P + rm[:, None] * K + rk[None, :])
    y = kit.shared((K, N), Y.dtype.element_ty)
    bar = kit.mbarriers(1)
    kit.tma_load(y, Y, (0, 0), bar[0])
    if TRANS:
        pt = kit.shared((K, M), P.dtype.element_ty)
        kit.store(pt.T, p)
        kit.barrier()
        back = kit.load(pt)
        kit.store(OUT + rk[:, None] * M + rm[None, :], back)
        kit.mbarrier_wait(bar[0], 0)
        acc = kit.mma(pt.T, y, kit.zeros((M, N), kit.float32))
    else:
        ps = kit.shared((M, K), P.dtype.element_ty)
        kit.store(ps, p)
        kit.barrier()
        back = kit.load(ps)
        kit.store(OUT + rm[:, None] * K + rk[None, :], back)
        kit.mbarrier_wait(bar[0], 0)
        acc = kit.mma(ps, y, kit.zeros((M, N), kit.float32))
    rn = kit.arange(0, N)
    kit.store(C + rm[:, None] * N + rn[None, :], acc)


@kit.jit
def reduce_add(X, Out, n_rows, BM: kit.constexpr, BN: kit.constexpr):
    """Every program adds its block of X's rows into the one (BM, BN) box of Out at (0, 0)."""
    rm = kit.program_id(0) * BM + kit.arange(0, BM)
    rn = kit.arange(0, BN)
    x = kit.load(X + rm[:, None] * BN + rn[None, :], mask=(rm < n_rows)[:, None], other=0.0)
    kit.tma_store(Out, (0, 0), x * 2.0, reduce="add")


@kit.jit
def overlap_two(A, B, C, D, M: kit.constexpr, N: kit.constexpr, K: kit.constexpr):
    """C = A B and D = A Bᵀ issued back to back (pending=1): reading C waits for C's MMA only."""
    a = kit.shared((M, K), A.dtype.element_ty)
    b = kit.shared((K, N), B.dtype.element_ty)
    bar = kit.mbarriers(1)
    kit.tma_load(a, A, (0, 0), bar[0])
    kit.tma_load(b, B, (0, 0), bar[0])
    kit.mbarrier_wait(bar[0], 0)
    c = kit.mma(a, b, kit.zeros((M, N), kit.float32), pending=1)
    d = kit.mma(a, b.T, kit.zeros((M, K), kit.float32), pending=1)
    rm, rn, rk = kit.arange(0, M), kit.arange(0, N), kit.arange(0, K)
    kit.store(C + rm[:, None] * N + rn[None, :], c * 2.0)
    kit.store(D + rm[:, None] * K + rk[None, :], d)


@kit.jit
def store_under_mma(A, C, M: kit.constexpr, K: kit.constexpr):
    """A mistake: kit.store into the tile an MMA still reads (issued with pending=1)."""
    a = kit.shared((M, K), A.dtype.element_ty)
    bar = kit.mbarriers(1)
    kit.tma_load(a, A, (0, 0), bar[0])
    kit.mbarrier_wait(bar[0], 0)
    c = kit.mma(a, a.T, kit.zeros((M, M), kit.float32), pending=1)
    kit.store(a, kit.zeros((M, K), kit.float32))
    rm = kit.arange(0, M)
    kit.store(C + rm[:, None] * M + rm[None, :], c)


# ============================================================================ interpreter
def test_interp_mma_trans_a():
    x, y = randn(64, 128, seed=1), randn(64, 64, seed=2)
    c = torch.full((128, 64), NAN)
    mma_trans_a[(1,)](x, y, c, M=128, N=64, K=64, num_warps=8)
    assert rel_error(c, x.double().T @ y.double()) < 1e-5


@pytest.mark.parametrize("trans", [False, True], ids=["as_is", "transposed"])
def test_interp_store_load_mma(trans):
    p, y = randn(64, 64, seed=3), randn(64, 128, seed=4)
    c = torch.full((64, 128), NAN)
    out = torch.full((64, 64), NAN, dtype=torch.bfloat16)
    mma_from_stored[(1,)](p, y, c, out, M=64, N=128, K=64, TRANS=trans, num_warps=4)
    assert torch.equal(out, p.T if trans else p)
    assert rel_error(c, p.double() @ y.double()) < 1e-5


def test_interp_tma_reduce_add():
    x = randn(200, 32, dtype=torch.float32, seed=5)
    out = randn(64, 32, dtype=torch.float32, seed=6)
    want = out.double() + 2 * torch.nn.functional.pad(x.double(), (0, 0, 0, 256 - 200)).view(
        4, 64, 32).sum(0)
    reduce_add[(4,)](x, out, 200, BM=64, BN=32, num_warps=4)
    assert rel_error(out, want) < 1e-6


def test_interp_overlap_two():
    a, b = randn(64, 64, seed=7), randn(64, 64, seed=8)
    c, d = torch.full((64, 64), NAN), torch.full((64, 64), NAN)
    overlap_two[(1,)](a, b, c, d, M=64, N=64, K=64, num_warps=4)
    assert rel_error(c, 2 * a.double() @ b.double()) < 1e-5
    assert rel_error(d, a.double() @ b.double().T) < 1e-5


def test_interp_store_under_inflight_mma_is_a_race():
    a = randn(64, 64, seed=9)
    with pytest.raises(RaceError, match="kit.store overwrites shared memory that the kit.mma"):
        store_under_mma[(1,)](a, torch.empty(64, 64), M=64, K=64, num_warps=4)


def test_store_shape_mismatch_is_located():
    from kitjit.frontend.errors import CompileError

    @kit.jit
    def bad(X, M: kit.constexpr):
        s = kit.shared((M, M), X.dtype.element_ty)
        kit.store(s, kit.zeros((M, 2 * M), kit.float32))

    with pytest.raises(CompileError, match="does not fit the shared tile"):
        bad[(1,)](torch.zeros(4), M=64, num_warps=4)


# ============================================================================ SASS
needs_sass = pytest.mark.skipif(
    find_tool("cuobjdump") is None or find_tool("nvdisasm") is None,
    reason="cuobjdump/nvdisasm not found")
_INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([^;]*);", re.M)


def build(kernel, sig, consts, warps):
    ck = kit.compile_aot(str(HERE), kernel, sig, consts, warps, arch="sm_90a")
    try:
        text = disassemble(ck.asm["cubin"])
    except ToolError as e:
        pytest.skip(str(e))
    return ck, [m.group(1).strip() for m in _INSN.finditer(text)]


@needs_sass
def test_sass_mma_trans_a():
    ck, insns = build("mma_trans_a", ["*bf16:16"] * 2 + ["*fp32:16"],
                      dict(M=128, N=64, K=64), 8)
    assert "p, 1, 1, 1, 1; }" in ck.asm["ptx"], "imm-trans-a = 1 for the .T view"
    assert any(re.match(r"HGMMA\.64x64x16\.F32\.BF16 R\d+, gdesc\[", i) for i in insns)
    assert ck.n_spills == 0


@needs_sass
@pytest.mark.parametrize("trans", [False, True], ids=["as_is", "transposed"])
def test_sass_store_load_mma(trans):
    ck, insns = build("mma_from_stored", ["*bf16:16"] * 2 + ["*fp32:16", "*bf16:16"],
                      dict(M=64, N=128, K=64, TRANS=trans), 4)
    sts = [i for i in insns if i.startswith("STS")]
    # as is: the loaded layout's 8 contiguous bf16 go out as one 16-byte store (4 per thread)
    assert sts and (trans or len([i for i in sts if i.startswith("STS.128")]) == 4), sts
    assert "fence.proxy.async.shared::cta;" in ck.asm["ptx"]
    assert any(i.startswith("LDS") for i in insns)
    assert any(i.startswith("HGMMA") for i in insns) and ck.n_spills == 0


@needs_sass
def test_sass_tma_reduce_add():
    ck, insns = build("reduce_add", ["*fp32:16", "*fp32:16", "i32"], dict(BM=64, BN=32), 4)
    assert "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group" in \
        ck.asm["ptx"]
    assert any(i.startswith("UTMAREDG") for i in insns), [i for i in insns if "UTMA" in i]


def test_ptx_overlap_waits_for_the_read_mma_only():
    ck = kit.compile_aot(str(HERE), "overlap_two", ["*bf16:16"] * 2 + ["*fp32:16"] * 2,
                         dict(M=64, N=64, K=64), 4, arch="sm_90a")
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned (\d)", ck.asm["ptx"])
    # after each issue: 1, 1; reading c: 1 (d may still run); reading d: 0
    assert waits == ["1", "1", "1", "0"], waits


# ============================================================================ GPU
@pytest.mark.gpu
def test_gpu_smem_ops():
    dev = "cuda"
    x, y = randn(64, 128, seed=1, device=dev), randn(64, 64, seed=2, device=dev)
    c = torch.full((128, 64), NAN, device=dev)
    mma_trans_a[(1,)](x, y, c, M=128, N=64, K=64, num_warps=8)
    assert rel_error(c, x.double().T @ y.double()) < 1e-5
    for trans in (False, True):
        p, y = randn(64, 64, seed=3, device=dev), randn(64, 128, seed=4, device=dev)
        c = torch.full((64, 128), NAN, device=dev)
        out = torch.full((64, 64), NAN, dtype=torch.bfloat16, device=dev)
        mma_from_stored[(1,)](p, y, c, out, M=64, N=128, K=64, TRANS=trans, num_warps=4)
        assert torch.equal(out, p.T if trans else p), trans
        assert rel_error(c, p.double() @ y.double()) < 1e-5, trans
    x = randn(200, 32, dtype=torch.float32, seed=5, device=dev)
    out = randn(64, 32, dtype=torch.float32, seed=6, device=dev)
    want = out.double() + 2 * torch.nn.functional.pad(x.double(), (0, 0, 0, 56)).view(
        4, 64, 32).sum(0)
    reduce_add[(4,)](x, out, 200, BM=64, BN=32, num_warps=4)
    assert rel_error(out, want) < 1e-6
    a, b = randn(64, 64, seed=7, device=dev), randn(64, 64, seed=8, device=dev)
    c, d = (torch.full((64, 64), NAN, device=dev) for _ in range(2))
    overlap_two[(1,)](a, b, c, d, M=64, N=64, K=64, num_warps=4)
    assert rel_error(c, 2 * a.double() @ b.double()) < 1e-5
    assert rel_error(d, a.double() @ b.double().T) < 1e-5


@kit.jit
def row_stages(X, Out, R: kit.constexpr, N: kit.constexpr):
    """Rows of X through the stages of a (2, 1, N) fp32 tile (TMA in, kit.load out)."""
    t = kit.shared((2, 1, N), kit.float32)
    bar = kit.mbarriers(2)
    for r in kit.static_range(R):
        kit.tma_load(t[r % 2], X, (r, 0), bar[r % 2])
        kit.mbarrier_wait(bar[r % 2], r // 2 % 2)
        x = kit.load(t[r % 2])
        kit.store(Out + r * N + kit.arange(0, N)[None, :], x * 2.0)


def test_layout_of_few_rows_is_unswizzled():
    """The swizzle is a function of address bits 7..: only tiles of 8 rows or more keep their
    stages and chunks at whole repeats of it, so smaller ones are not swizzled (a (2, 1, 64)
    fp32 tile's stage 1 would start 256 bytes into a repeat, where TMA XORs otherwise)."""
    from kitjit.ir.layouts import shared_layout
    from kitjit.ir.types import bfloat16, float32

    assert shared_layout((1, 64), float32).swizzle == 0
    assert shared_layout((4, 128), bfloat16).swizzle == 0
    assert shared_layout((8, 64), bfloat16).swizzle == 128


def test_interp_row_stages():
    x = randn(4, 64, dtype=torch.float32, seed=10)
    out = torch.full((4, 64), NAN)
    row_stages[(1,)](x, out, R=4, N=64, num_warps=4)
    assert torch.equal(out, 2 * x)


@pytest.mark.gpu
def test_gpu_row_stages():
    x = randn(4, 64, dtype=torch.float32, seed=10, device="cuda")
    out = torch.full((4, 64), NAN, device="cuda")
    row_stages[(1,)](x, out, R=4, N=64, num_warps=4)
    assert torch.equal(out, 2 * x)
