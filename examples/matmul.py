"""bf16 GEMM on Hopper: TMA copies tiles of A and B into a ring of shared-memory stages,
each stage completing on its own mbarrier; both warpgroups run WGMMA on the stage that
arrived while the copies for later stages fly. C = A @ B, fp32 accumulation."""

import torch

import kitjit as kit
from kitjit.testing import bench, check, device, has_gpu


@kit.jit
def matmul_kernel(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
                  STAGES: kit.constexpr, GROUP: kit.constexpr):
    # L2-friendly order: GROUP row-blocks of C are swept column by column
    pid = kit.program_id(0)
    n_m, n_n = kit.cdiv(M, BM), kit.cdiv(N, BN)
    group = pid // (GROUP * n_n)
    first_m = group * GROUP
    rows = kit.minimum(n_m - first_m, GROUP)
    m0 = (first_m + (pid % (GROUP * n_n)) % rows) * BM
    n0 = ((pid % (GROUP * n_n)) // rows) * BN

    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)   # 128-byte swizzle, from the width
    b = kit.shared((STAGES, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(STAGES)                            # stage s has landed
    acc = kit.zeros((BM, BN), kit.float32)                   # wgmma accumulator layout
    n_k = kit.cdiv(K, BK)
    for s in kit.static_range(STAGES - 1):                   # prologue: fill the ring
        if s < n_k:
            kit.tma_load(a[s], A, (m0, s * BK), ready[s])
            kit.tma_load(b[s], B, (s * BK, n0), ready[s])
    for i in range(n_k):
        s = i % STAGES
        kit.mbarrier_wait(ready[s], (i // STAGES) % 2)
        acc = kit.mma(a[s], b[s], acc, pending=1)            # keep one MMA in flight
        j = i + STAGES - 1                                   # refill the stage freed by MMA i-1
        if j < n_k:
            kit.tma_load(a[j % STAGES], A, (m0, j * BK), ready[j % STAGES])
            kit.tma_load(b[j % STAGES], B, (j * BK, n0), ready[j % STAGES])
    rm = m0 + kit.arange(0, BM)
    rn = n0 + kit.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    kit.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=mask)


def matmul(a: torch.Tensor, b: torch.Tensor, BM=128, BN=256, BK=64, STAGES=3,
           num_warps=8) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    grid = (kit.cdiv(M, BM) * kit.cdiv(N, BN),)
    matmul_kernel[grid](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, STAGES=STAGES, GROUP=8,
                        num_warps=num_warps)
    return c


def main() -> None:
    dev = device()
    shapes = [(256, 512, 192), (300, 264, 200)] if has_gpu() else [(128, 256, 128)]
    for M, N, K in shapes:
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
        err = check(matmul(a, b), a.double() @ b.double(), 1e-2)
        print(f"matmul {M}x{N}x{K} bf16: rel err {err:.2e} "
              f"({'GPU' if has_gpu() else 'interpreter'})")
    if has_gpu():
        for M, N, K in ((4096, 4096, 4096), (8192, 8192, 8192)):
            a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
            flop = 2 * M * N * K / 1e9
            ms_k, ms_t = bench(lambda: matmul(a, b)), bench(lambda: a @ b)
            print(f"  {M}x{N}x{K}: kitjit {flop / ms_k:.0f} TFLOP/s, "
                  f"cuBLAS {flop / ms_t:.0f} TFLOP/s ({ms_t / ms_k:.2f}x)")


if __name__ == "__main__":
    main()
