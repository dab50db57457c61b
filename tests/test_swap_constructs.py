"""The constructs of `attention_decode(..., swap=True)` (kitjit/nn/decode_variants.py), one
kernel each, so that a GPU run says which one is wrong (the swap kernel passed the interpreter
and failed on an H200 with relative error ~1):

- store_b: a register tile stored (fp32 -> bf16, `kit.store`) into a (K, N) shared tile, a
  barrier, then that tile as WGMMA's MN-major B operand at N 8/16/32/64 (N 8: 16-byte rows,
  the one unswizzled case, whose descriptor had LBO = SBO = 0 and a K step of 0 bytes: every
  K step read the first 8 rows); the (64, N) accumulator stored and summed down its columns.
- tma_b: the same B operand loaded by TMA (the descriptor alone, no generic-proxy store).
- vt_a: Vᵀ as the A operand (`vs[h].T`, a (64 keys, 64) part of a 128-column V) with B N 8.
- ring: swap_block's skeleton without the softmax: per block Sᵀ = K Qᵀ (N 8), Pᵀ stored to
  shared memory, two MMAs (`pending=1`, then a wait) reading it and V's two parts, and the
  TMA refill of the stage they read.

Each runs in the interpreter and (`-m gpu`) on the device against float64 torch, on random
inputs, outputs poisoned with NaN. CPU: the N 8 B descriptor's constant in the PTX, and
every B address a descriptor and K step make (the PTX ISA's canonical layouts) against
where the tile's SharedLayout stores the element, for both majors and every swizzle.
"""

from __future__ import annotations

import pathlib

import pytest
import torch
from kitjit.backend.lower.dot import DotLowering
from kitjit.backend.lower.tma import TmaLowering

import kitjit as kit
from kitjit.ir.layouts import SharedLayout, shared_layout
from kitjit.testing import has_gpu, rel_error

HERE = pathlib.Path(__file__)
NAN = float("nan")
DEVICES = ["cpu"] + (["cuda"] if has_gpu() else [])


def randn(*shape, dtype=torch.bfloat16, seed=0, device="cpu"):
    """Normal values, never near zero."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float32)
    return torch.where(x.abs() < 1e-3, 0.5, x).to(dtype).to(device)


# ============================================================================ kernels
@kit.jit
def store_b(A, P, C, S, M: kit.constexpr, N: kit.constexpr, K: kit.constexpr):
    """C = A P with P (fp32, global) stored into a bf16 (K, N) shared tile by kit.store, then
    the MMA's B operand; S = the column sums of C (as swap's l_t is summed)."""
    a = kit.shared((M, K), A.dtype.element_ty)
    pt = kit.shared((K, N), A.dtype.element_ty)
    bar = kit.mbarriers(1)
    kit.tma_load(a, A, (0, 0), bar[0])
    rk, rn = kit.arange(0, K), kit.arange(0, N)
    p = kit.load(P + rk[:, None] * N + rn[None, :])
    kit.store(pt, p)
    kit.barrier()
    kit.mbarrier_wait(bar[0], 0)
    acc = kit.mma(a, pt, kit.zeros((M, N), kit.float32))
    rm = kit.arange(0, M)
    kit.store(C + rm[:, None] * N + rn[None, :], acc)
    kit.store(S + rn, kit.sum(acc, axis=0))


@kit.jit
def tma_b(A, B, C, M: kit.constexpr, N: kit.constexpr, K: kit.constexpr):
    """C = A B with B (K, N) loaded by TMA: MN-major B, no generic store."""
    a = kit.shared((M, K), A.dtype.element_ty)
    b = kit.shared((K, N), B.dtype.element_ty)
    bar = kit.mbarriers(1)
    kit.tma_load(a, A, (0, 0), bar[0])
    kit.tma_load(b, B, (0, 0), bar[0])
    kit.mbarrier_wait(bar[0], 0)
    acc = kit.mma(a, b, kit.zeros((M, N), kit.float32))
    rm, rn = kit.arange(0, M), kit.arange(0, N)
    kit.store(C + rm[:, None] * N + rn[None, :], acc)


@kit.jit
def vt_a(V, B, C, N: kit.constexpr, D: kit.constexpr):
    """C = Vᵀ B (D, N) with V (64 keys, D) loaded in 64-column parts, each part's `.T` the A
    operand of one MMA (rows h*64.. of C), B (64, N) by TMA."""
    vs = kit.shared((D // 64, 64, 64), V.dtype.element_ty)
    b = kit.shared((64, N), B.dtype.element_ty)
    bar = kit.mbarriers(1)
    for h in kit.static_range(D // 64):
        kit.tma_load(vs[h], V, (0, h * 64), bar[0])
    kit.tma_load(b, B, (0, 0), bar[0])
    kit.mbarrier_wait(bar[0], 0)
    rd, rn = kit.arange(0, 64), kit.arange(0, N)
    for h in kit.static_range(D // 64):
        acc = kit.mma(vs[h].T, b, kit.zeros((64, N), kit.float32))
        kit.store(C + (h * 64 + rd[:, None]) * N + rn[None, :], acc)


@kit.jit
def ring(Q, K, V, C, n_kv, NQ: kit.constexpr, STAGES: kit.constexpr):
    """Cᵀ = Σ_j V_jᵀ bf16(K_j Qᵀ) over n_kv blocks of 64 keys (D 128), swap_block's
    skeleton: Sᵀ = K Qᵀ (N = NQ), Pᵀ stored to shared memory, two MMAs reading it (the first
    pending=1), then the TMA refill of the stage both read."""
    q = kit.shared((NQ, 128), Q.dtype.element_ty)
    k = kit.shared((STAGES, 64, 128), K.dtype.element_ty)
    vs = kit.shared((STAGES * 2, 64, 64), V.dtype.element_ty)
    pt = kit.shared((64, NQ), Q.dtype.element_ty)
    q_ready = kit.mbarriers(1)
    ready = kit.mbarriers(STAGES)
    kit.tma_load(q, Q, (0, 0), q_ready[0])
    for s in kit.static_range(STAGES):
        if s < n_kv:
            kit.tma_load(k[s], K, (s * 64, 0), ready[s])
            for h in kit.static_range(2):
                kit.tma_load(vs[s * 2 + h], V, (s * 64, h * 64), ready[s])
    acc0 = kit.zeros((64, NQ), kit.float32)
    acc1 = kit.zeros((64, NQ), kit.float32)
    kit.mbarrier_wait(q_ready[0], 0)
    for j in range(n_kv):
        s = j % STAGES
        kit.mbarrier_wait(ready[s], j // STAGES % 2)
        st = kit.mma(k[s], q.T, kit.zeros((64, NQ), kit.float32))
        kit.barrier()   # every warp is past the last block's MMAs reading pt (in swap_block:
        kit.store(pt, st)   # the barriers of the column max's cross-warp reduction)
        kit.barrier()
        acc0 = kit.mma(vs[s * 2].T, pt, acc0, pending=1)
        acc1 = kit.mma(vs[s * 2 + 1].T, pt, acc1)
        if j + STAGES < n_kv:
            kit.tma_load(k[s], K, ((j + STAGES) * 64, 0), ready[s])
            for h in kit.static_range(2):
                kit.tma_load(vs[s * 2 + h], V, ((j + STAGES) * 64, h * 64), ready[s])
    rd, rn = kit.arange(0, 64), kit.arange(0, NQ)
    kit.store(C + rd[:, None] * NQ + rn[None, :], acc0)
    kit.store(C + (64 + rd[:, None]) * NQ + rn[None, :], acc1)


# ============================================================================ checks
def check_store_b(N: int, device: str) -> None:
    a, p = randn(64, 64, seed=1, device=device), randn(64, N, dtype=torch.float32, seed=2,
                                                        device=device)
    c = torch.full((64, N), NAN, device=device)
    s = torch.full((N,), NAN, device=device)
    store_b[(1,)](a, p, c, s, M=64, N=N, K=64, num_warps=4)
    want = a.double() @ p.to(torch.bfloat16).double()
    assert rel_error(c, want) < 1e-5, f"store_b N{N} on {device}: {rel_error(c, want)}"
    assert rel_error(s, want.sum(0)) < 1e-4, f"store_b N{N} column sums on {device}"


def check_tma_b(N: int, device: str) -> None:
    a, b = randn(64, 64, seed=3, device=device), randn(64, N, seed=4, device=device)
    c = torch.full((64, N), NAN, device=device)
    tma_b[(1,)](a, b, c, M=64, N=N, K=64, num_warps=4)
    assert rel_error(c, a.double() @ b.double()) < 1e-5, f"tma_b N{N} on {device}"


def check_vt_a(N: int, D: int, device: str) -> None:
    v, b = randn(64, D, seed=5, device=device), randn(64, N, seed=6, device=device)
    c = torch.full((D, N), NAN, device=device)
    vt_a[(1,)](v, b, c, N=N, D=D, num_warps=4)
    assert rel_error(c, v.double().T @ b.double()) < 1e-5, f"vt_a N{N} D{D} on {device}"


def check_ring(NQ: int, n_kv: int, device: str) -> None:
    q = randn(NQ, 128, seed=7, device=device)
    k, v = randn(64 * n_kv, 128, seed=8, device=device), randn(64 * n_kv, 128, seed=9,
                                                                device=device)
    c = torch.full((128, NQ), NAN, device=device)
    ring[(1,)](q, k, v, c, n_kv, NQ=NQ, STAGES=2, num_warps=4)
    pt = (k.double() @ q.double().T).to(torch.bfloat16).double()   # Pᵀ rounds to bf16
    want = v.double().T @ pt
    assert rel_error(c, want) < 1e-2, f"ring NQ{NQ} n_kv{n_kv} on {device}: {rel_error(c, want)}"


# ============================================================================ CPU
@pytest.mark.parametrize("N", [8, 16])
def test_interp_store_b(N):
    check_store_b(N, "cpu")


def test_interp_tma_b_vt_a():
    check_tma_b(8, "cpu")
    check_vt_a(8, 128, "cpu")


def test_interp_ring():
    check_ring(8, 3, "cpu")


def test_ptx_unswizzled_b_descriptor():
    """N 8 bf16 B (16-byte rows, unswizzled): LBO 128 bytes (the next 8-row core matrix along
    K), SBO K x 16, mode 0, and each K step 16 rows = 256 bytes on (a zero LBO/SBO and step
    read the first 8 rows for every K step: swap's wrong results on the H200)."""
    ck = kit.compile_aot(str(HERE), "tma_b", ["*bf16:16"] * 2 + ["*fp32:16"],
                         dict(M=64, N=8, K=64), 4, arch="sm_90a")
    ptx = ck.asm["ptx"]
    desc = (128 >> 4) << 16 | (64 * 16 >> 4) << 32
    assert str(desc) in ptx or hex(desc) in ptx.lower(), "the N 8 B descriptor's LBO/SBO"
    assert ptx.count("m64n8k16.f32.bf16.bf16") == 4
    assert "p, 1, 1, 0, 1; }" in ptx, "imm-trans-b = 1: B stored [K, N]"


def canonical_b(desc: int, start: int, k: int, n: int, e: int, trans_b: int) -> int:
    """Byte address WGMMA reads element (k, n) of a K step's B from, given the descriptor's
    LBO/SBO/swizzle and the step's start: the PTX ISA's canonical layouts (T elements of 16
    bytes, c 16-byte units of a swizzle row; "Shared memory matrix layout"), then the
    swizzle, XOR of address bits 4.. with bits 7.. (tiles are 1024-byte aligned)."""
    lbo, sbo = (desc >> 16 & 0x3FFF) << 4, (desc >> 32 & 0x3FFF) << 4
    sw = {0: 0, 1: 128, 2: 64, 3: 32}[desc >> 62]
    t, c = 16 // e, max(sw // 16, 1)
    if trans_b:   # MN-major: ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)), swizzled
        #           ((T,c,m),(8,k)):((1,T,LBO),(cT,SBO))
        if sw:
            a = n % t * e + n // t % c * 16 + n // (t * c) * lbo + k % 8 * sw + k // 8 * sbo
        else:
            a = n % t * e + n // t * sbo + k % 8 * 16 + k // 8 * lbo
    elif sw:      # K-major: ((8,m),(T,2k)):((cT,SBO),(1,T)), K within a swizzle row
        a = n % 8 * sw + n // 8 * sbo + k * e
    else:         # ((8,m),(T,2k)):((1T,SBO),(1,LBO))
        a = n % 8 * 16 + n // 8 * sbo + k % t * e + k // t * lbo
    a += start
    return a ^ ((a >> 7) & (c - 1)) << 4 if sw else a


B_CASES = [(kit.bfloat16, False, n, 64) for n in (8, 16, 32, 64, 128, 256)] + [
    (kit.bfloat16, True, n, k) for n, k in ((8, 64), (16, 128), (64, 64), (128, 32))] + [
    (kit.float8e4nv, True, 64, 128)]


@pytest.mark.parametrize("dtype,kmajor,N,K", B_CASES)
def test_b_descriptor_addresses(dtype, kmajor, N, K):
    """Every element WGMMA reads for B (per K step: the descriptor and the step's offset)
    is where kit.store / TMA put it (the tile's SharedLayout): the N 8 case read rows 0-7
    for every K step before (LBO = SBO = 0, step 0)."""
    e = dtype.itemsize
    R, C = (N, K) if kmajor else (K, N)                       # the stored tile
    lay = shared_layout((R, C), dtype)
    lb = SharedLayout(lay.swizzle, lay.chunk, transposed=kmajor)
    desc, trans_b, offs = DotLowering.b_operand(lb, K, N, e)
    assert trans_b == int(not kmajor)
    kw = 32 // e
    for i, k0 in enumerate(range(0, K, kw)):
        for k in range(kw):
            for n in range(N):
                r, c = (n, k0 + k) if kmajor else (k0 + k, n)
                want = TmaLowering.smem_const_offset(lay, R, C, e, r, c)
                got = canonical_b(desc, offs[i], k, n, e, trans_b)
                assert got == want, (f"{dtype} {'K' if kmajor else 'MN'}-major N{N} K{K} "
                                     f"{lay}: B[{k0 + k}, {n}] read at {got}, stored at {want}")


# ============================================================================ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("N", [8, 16, 32, 64])
def test_gpu_store_b(N):
    check_store_b(N, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("N", [8, 16, 32])
def test_gpu_tma_b(N):
    check_tma_b(N, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("N,D", [(8, 128), (16, 64)])
def test_gpu_vt_a(N, D):
    check_vt_a(N, D, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("NQ,n_kv", [(8, 1), (8, 5), (16, 4), (64, 3)])
def test_gpu_ring(NQ, n_kv):
    check_ring(NQ, n_kv, "cuda")
