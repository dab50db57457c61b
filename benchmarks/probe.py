"""Scratch probe: the example GEMM with its epilogue skipped (SKIP=1) or through
kit.tma_store (SKIP=2), and ncu sections over the variants."""
import sys

import torch

import kitjit as kit
from kitjit.testing import bench

sys.path.insert(0, "benchmarks")
import ws_kernel  # noqa: E402


@kit.jit
def tile_origin(tile, M, N, BM: kit.constexpr, BN: kit.constexpr, GROUP: kit.constexpr):
    # L2-friendly order: GROUP row-blocks of C are swept column by column
    n_m, n_n = kit.cdiv(M, BM), kit.cdiv(N, BN)
    first_m = tile // (GROUP * n_n) * GROUP
    rows = kit.minimum(n_m - first_m, GROUP)
    return (first_m + tile % (GROUP * n_n) % rows) * BM, tile % (GROUP * n_n) // rows * BN


@kit.jit
def load_stage(a, b, ready, A, B, m0, n0, kk, it, BK: kit.constexpr, STAGES: kit.constexpr,
               TRANS_B: kit.constexpr):
    s = it % STAGES
    kit.tma_load(a[s], A, (m0, kk * BK), ready[s])   # both land on ready[s]: one arrival
    kit.tma_load(b[s], B, (n0, kk * BK) if TRANS_B else (kk * BK, n0), ready[s])


@kit.jit
def matmul_kernel(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
                  STAGES: kit.constexpr, GROUP: kit.constexpr,
                  TRANS_B: kit.constexpr = False, SKIP: kit.constexpr = 0):
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)   # 128-byte swizzle, from the width
    # B is [K, N], or [N, K] when TRANS_B (then b[s].T is a K-major view for WGMMA)
    b = kit.shared((STAGES, BN, BK) if TRANS_B else (STAGES, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(STAGES)                            # stage s has landed
    n_k = kit.cdiv(K, BK)
    n_tiles = kit.cdiv(M, BM) * kit.cdiv(N, BN)
    step = kit.num_programs(0)                               # persistent: tiles pid, pid+step..
    first = kit.program_id(0)
    for s in kit.static_range(STAGES - 1):                   # prologue: fill the ring with
        t = first + s // n_k * step                          # this program's first k-steps
        if t < n_tiles:                                      # (several tiles when K is short)
            m0, n0 = tile_origin(t, M, N, BM, BN, GROUP)
            load_stage(a, b, ready, A, B, m0, n0, s % n_k, s, BK, STAGES, TRANS_B)
    it = 0                                                   # k-steps done by this program
    for tile in range(first, n_tiles, step):
        m0, n0 = tile_origin(tile, M, N, BM, BN, GROUP)
        m1, n1 = tile_origin(tile + step, M, N, BM, BN, GROUP)
        acc = kit.zeros((BM, BN), kit.float32)               # wgmma accumulator layout
        for kk in range(n_k):
            kit.mbarrier_wait(ready[it % STAGES], it // STAGES % 2)
            bs = b[it % STAGES].T if TRANS_B else b[it % STAGES]
            acc = kit.mma(a[it % STAGES], bs, acc, pending=1)
            j = kk + STAGES - 1        # refill the stage MMA it-1 freed, running into the
            if j < n_k:                # next tile so its loads fly during this epilogue
                load_stage(a, b, ready, A, B, m0, n0, j, it + STAGES - 1, BK, STAGES,
                           TRANS_B)
            elif j < 2 * n_k:
                if tile + step < n_tiles:
                    load_stage(a, b, ready, A, B, m1, n1, j - n_k, it + STAGES - 1, BK,
                               STAGES, TRANS_B)
            elif tile + j // n_k * step < n_tiles:           # K shorter than the ring
                mj, nj = tile_origin(tile + j // n_k * step, M, N, BM, BN, GROUP)
                load_stage(a, b, ready, A, B, mj, nj, j % n_k, it + STAGES - 1, BK, STAGES,
                           TRANS_B)
            it += 1
        rm = m0 + kit.arange(0, BM)    # the epilogue: straight from the accumulator
        rn = n0 + kit.arange(0, BN)    # registers (kit.tma_store measured slower here: its
        mask = (rm[:, None] < M) & (rn[None, :] < N)   # staging tile costs a 4th stage)
        if SKIP == 0:
            kit.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=mask)
        elif SKIP == 1:
            if n_k < 0:
                kit.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=mask)
        else:
            kit.tma_store(C, (m0, n0), acc.to(C.dtype.element_ty))




def ex(a, b, c, SKIP=0, BM=128, BN=256, STAGES=4):
    M, K = a.shape
    N = b.shape[1]
    grid = (min(kit.cdiv(M, BM) * kit.cdiv(N, BN), 132),)
    matmul_kernel[grid](a, b, c, M, N, K, BM=BM, BN=BN, BK=64, STAGES=STAGES, GROUP=8,
                        SKIP=SKIP, num_warps=8)


V = {"ex": lambda a, b, c: ex(a, b, c),
     "ex_noepi": lambda a, b, c: ex(a, b, c, SKIP=1),
     "ex_tma3": lambda a, b, c: ex(a, b, c, SKIP=2, STAGES=3),
     "wsp": lambda a, b, c: ws_kernel.wsp(a, b, c),
     "wsp128": lambda a, b, c: ws_kernel.wsp(a, b, c, BN=128, STAGES=6),
     "pp128": lambda a, b, c: ws_kernel.pp(a, b, c, BM=128, BN=128, STAGES=6),
     "cuBLAS": lambda a, b, c: torch.matmul(a, b, out=c)}
if __name__ == "__main__":
    mode = sys.argv[1]
    shapes = [(4096, 4096, 4096), (8192, 8192, 1024)]
    if mode == "ncu":       # one launch of each, for ncu to catch
        for M, N, K in shapes:
            a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
            c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            for n in sys.argv[2].split(","):
                V[n](a, b, c)
        torch.cuda.synchronize()
    else:
        for M, N, K in shapes:
            a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            ref = a.float() @ b.float()
            fl = 2 * M * N * K / 1e9
            row = []
            for n in V:
                c.fill_(float("nan"))
                V[n](a, b, c)
                torch.cuda.synchronize()
                err = ((c.float() - ref).norm() / ref.norm()).item()
                row.append(f"{n} {fl / bench(lambda n=n: V[n](a, b, c)):.0f} (err {err:.0e})")
            print(f"{M}x{N}x{K}: " + "  ".join(row), flush=True)
