"""A GEMM on 2-CTA thread-block clusters with TMA multicast of the shared operand, for
measurement against cuBLAS and examples/matmul.py (`python benchmarks/cluster_gemm.py`).

`cluster_matmul` computes C = A @ B (A [M, K], B [K, N], row-major). Two CTAs of a cluster
share one operand tile: with SHARE_B (cluster=(2, 1, 1): neighbours along M) each loads its
own A tile and half of the B tile's columns, multicast to both; without it (cluster=(1, 2,
1): neighbours along N) each loads its own B tile and half of the A tile's rows. The shared
operand sits in two half tiles, so each CTA runs two MMAs per k-step (one per half) into
two accumulators. A stage is refilled once both CTAs have finished with it: each arrives on
`empty[s]` of both CTAs (cluster-scope mbarriers). Not warp-specialized, not persistent: a
first cluster variant to measure, not a replacement for the example's kernel.
"""
from __future__ import annotations

import sys

import torch

import kitjit as kit


@kit.jit
def load_step(a, b, ready, A, B, m0, n0, k, s, r, BM: kit.constexpr, BN: kit.constexpr,
              SHARE_B: kit.constexpr):
    if SHARE_B:  # B's column half r goes to both CTAs; A is this CTA's own
        kit.tma_load(a[s], A, (m0, k), ready[s])
        kit.tma_load(b[2 * s + r], B, (k, n0 + r * (BN // 2)), ready[s], multicast=3)
    else:  # A's row half r goes to both CTAs; B is this CTA's own
        kit.tma_load(a[2 * s + r], A, (m0 + r * (BM // 2), k), ready[s], multicast=3)
        kit.tma_load(b[s], B, (k, n0), ready[s])


@kit.jit
def cluster_matmul(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
                   STAGES: kit.constexpr, SHARE_B: kit.constexpr, WG: kit.constexpr):
    dt = A.dtype.element_ty
    if SHARE_B:
        a = kit.shared((STAGES, BM, BK), dt)
        b = kit.shared((2 * STAGES, BK, BN // 2), dt)          # two column halves per stage
    else:
        a = kit.shared((2 * STAGES, BM // 2, BK), dt)          # two row halves per stage
        b = kit.shared((STAGES, BK, BN), dt)
    ready = kit.mbarriers(STAGES)                               # stage s has landed here
    empty = kit.mbarriers(STAGES, arrivals=2 * WG)              # both CTAs are done with s
    m0 = kit.program_id(0) * BM
    n0 = kit.program_id(1) * BN
    r = kit.cluster_ctarank()
    n_k = kit.cdiv(K, BK)
    kit.cluster_barrier()                  # both CTAs' tiles and barriers exist
    for i in kit.static_range(STAGES - 1):
        if i < n_k:
            load_step(a, b, ready, A, B, m0, n0, i * BK, i, r, BM, BN, SHARE_B)
    acc0 = kit.zeros((BM, BN // 2) if SHARE_B else (BM // 2, BN), kit.float32)
    acc1 = kit.zeros((BM, BN // 2) if SHARE_B else (BM // 2, BN), kit.float32)
    for kk in range(n_k):
        nxt = kk + STAGES - 1
        if nxt < n_k:                      # refill the stage both CTAs finished last step
            s2 = nxt % STAGES
            kit.mbarrier_wait(empty[s2], nxt // STAGES % 2 ^ 1)
            load_step(a, b, ready, A, B, m0, n0, nxt * BK, s2, r, BM, BN, SHARE_B)
        s = kk % STAGES
        kit.mbarrier_wait(ready[s], kk // STAGES % 2)
        if SHARE_B:
            acc0 = kit.mma(a[s], b[2 * s], acc0)
            acc1 = kit.mma(a[s], b[2 * s + 1], acc1)
        else:
            acc0 = kit.mma(a[2 * s], b[s], acc0)
            acc1 = kit.mma(a[2 * s + 1], b[s], acc1)
        kit.mbarrier_arrive(empty[s], cta=0)
        kit.mbarrier_arrive(empty[s], cta=1)
    if SHARE_B:
        kit.tma_store(C, (m0, n0), acc0.to(C.dtype.element_ty))
        kit.tma_store(C, (m0, n0 + BN // 2), acc1.to(C.dtype.element_ty))
    else:
        kit.tma_store(C, (m0, n0), acc0.to(C.dtype.element_ty))
        kit.tma_store(C, (m0 + BM // 2, n0), acc1.to(C.dtype.element_ty))
    kit.cluster_barrier()                  # no CTA leaves while its peer may arrive on it


def matmul_cluster(a: torch.Tensor, b: torch.Tensor, share_b: bool = True,
                   BM: int | None = None, BN: int | None = None, BK: int = 64,
                   STAGES: int = 4, num_warps: int = 8) -> torch.Tensor:
    """C = a @ b on 2-CTA clusters (`share_b`: along M, multicasting B; else along N,
    multicasting A). The grid is padded to whole clusters (the extra CTAs' tiles fall
    outside C: TMA clips their stores and zero-fills their loads). Default tiles: 128x256
    sharing B, 256x128 sharing A (each half of A then 128 rows, as 8 warps' MMA needs)."""
    BM = BM or (128 if share_b else 256)
    BN = BN or (256 if share_b else 128)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, dtype=a.dtype, device=a.device)
    gm, gn = -(-M // BM), -(-N // BN)
    if share_b:
        gm += gm % 2
    else:
        gn += gn % 2
    cluster_matmul[(gm, gn)](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, STAGES=STAGES,
                             SHARE_B=share_b, WG=num_warps // 4, num_warps=num_warps,
                             cluster=(2, 1, 1) if share_b else (1, 2, 1))
    return c


def main() -> None:
    """kitjit's cluster GEMM (2x1 sharing B, 1x2 sharing A) against cuBLAS and the
    example's GEMM, bf16, TFLOP/s (one line per shape)."""
    sys.path.insert(0, "examples")
    from matmul import matmul as example_matmul

    from kitjit.testing import do_bench

    shapes = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024)]
    print(f"{'M x N x K':>18} {'cuBLAS':>8} {'example':>8} {'2x1 B':>8} {'1x2 A':>8}  (TFLOP/s)")
    for M, N, K in shapes:
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16, generator=g)
        ref = (a.double() @ b.double())
        row = []
        for name, fn in [("cublas", lambda: a @ b), ("example", lambda: example_matmul(a, b)),
                         ("2x1", lambda: matmul_cluster(a, b, True)),
                         ("1x2", lambda: matmul_cluster(a, b, False))]:
            out = fn()
            err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
            if err > 2e-2:
                row.append(f"{'BAD':>8}")
                print(f"  {name} at {M}x{N}x{K}: max rel error {err:.3g}", file=sys.stderr)
                continue
            ms = do_bench(fn, warmup=25, rep=100)
            row.append(f"{2 * M * N * K / ms / 1e9:8.0f}")
        print(f"{f'{M}x{N}x{K}':>18} " + " ".join(row), flush=True)


if __name__ == "__main__":
    main()
