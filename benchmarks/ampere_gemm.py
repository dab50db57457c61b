"""Variants of examples/matmul_ampere.py's GEMM for the sm_80 code path (benchmarks/ampere.py
times them; tests/test_ampere_gemm.py checks them in the interpreter and in SASS).

`matmul_persistent_kernel`: one program per SM walks the tiles pid, pid + programs, ... and the
cp.async ring runs across tile boundaries: while a tile's last k-steps and its epilogue run,
the copies of the next tile's first k-steps already fly (a 192 KB ring leaves room for one
CTA per SM, so a non-persistent grid has nothing to hide each tile's ramp behind). Same
no-barrier argument as the example: the loads run PREFETCH = STAGES / 2 k-steps ahead in the
program's one stream of k-steps (`it` counts them over all its tiles), so waiting for step
i's copies proves every thread is past its MMA of step i - PREFETCH, whose stage the refill
after step i overwrites. The epilogue stores straight from registers: no shared memory.
`COPY_ONLY=True` drops the MMAs (C = 0): a diagnostic of what the cp.async ring alone runs at.
"""

from __future__ import annotations

import torch

import kitjit as kit


@kit.jit
def tile_origin(tile, M, N, BM: kit.constexpr, BN: kit.constexpr, GROUP: kit.constexpr):
    """(m0, n0) of a tile: GROUP row-blocks of C swept column by column (L2 reuse)."""
    n_m, n_n = kit.cdiv(M, BM), kit.cdiv(N, BN)
    first_m = tile // (GROUP * n_n) * GROUP
    rows = kit.minimum(n_m - first_m, GROUP)
    return (first_m + tile % (GROUP * n_n) % rows) * BM, tile % (GROUP * n_n) // rows * BN


@kit.jit
def load_step(a, b, ready, A, B, m0, n0, kk, it, BK: kit.constexpr, STAGES: kit.constexpr):
    s = it % STAGES                                   # past K, the copies read zeros
    kit.tma_load(a[s], A, (m0, kk * BK), ready[s], sync=False)
    kit.tma_load(b[s], B, (kk * BK, n0), ready[s], sync=False)


@kit.jit
def matmul_persistent_kernel(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr,
                             BK: kit.constexpr, STAGES: kit.constexpr, GROUP: kit.constexpr,
                             COPY_ONLY: kit.constexpr = False):
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)
    b = kit.shared((STAGES, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(STAGES)
    n_k = kit.cdiv(K, BK)
    kit.assume(n_k > 0)
    n_tiles = kit.cdiv(M, BM) * kit.cdiv(N, BN)
    step = kit.num_programs(0)
    first = kit.program_id(0)
    for s in kit.static_range(STAGES // 2):          # this program's first k-steps (several
        t = first + s // n_k * step                  # tiles when K is shorter than that)
        if t < n_tiles:
            m0, n0 = tile_origin(t, M, N, BM, BN, GROUP)
            load_step(a, b, ready, A, B, m0, n0, s % n_k, s, BK, STAGES)
    it = 0
    for tile in range(first, n_tiles, step):
        m0, n0 = tile_origin(tile, M, N, BM, BN, GROUP)
        m1, n1 = tile_origin(tile + step, M, N, BM, BN, GROUP)
        acc = kit.zeros((BM, BN), kit.float32)
        for kk in range(n_k):
            s = it % STAGES
            kit.mbarrier_wait(ready[s], it // STAGES % 2)
            if not COPY_ONLY:                         # COPY_ONLY: the ring alone (C = 0),
                acc = kit.mma(a[s], b[s], acc)        # what the copies cost by themselves
            j = kk + STAGES // 2
            if j < n_k:                               # this tile's k-step j
                load_step(a, b, ready, A, B, m0, n0, j, it + STAGES // 2, BK, STAGES)
            elif j < 2 * n_k:                         # the next tile's first k-steps
                if tile + step < n_tiles:
                    load_step(a, b, ready, A, B, m1, n1, j - n_k, it + STAGES // 2, BK,
                              STAGES)
            elif tile + j // n_k * step < n_tiles:    # K shorter than the prefetch
                mj, nj = tile_origin(tile + j // n_k * step, M, N, BM, BN, GROUP)
                load_step(a, b, ready, A, B, mj, nj, j % n_k, it + STAGES // 2, BK, STAGES)
            it += 1
        rm = m0 + kit.arange(0, BM)
        rn = n0 + kit.arange(0, BN)
        kit.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty),
                  mask=(rm[:, None] < M) & (rn[None, :] < N))


def num_programs(tiles: int, device: torch.device, ctas_per_sm: int = 1) -> int:
    """The persistent grid: one program per SM (CPU: 3, so programs walk several tiles)."""
    if device.type != "cuda":
        return min(tiles, 3)
    idx = device.index if device.index is not None else torch.cuda.current_device()
    return min(tiles, torch.cuda.get_device_properties(idx).multi_processor_count
               * ctas_per_sm)


def matmul_persistent(a: torch.Tensor, b: torch.Tensor, arch: str | None = None,
                      c: torch.Tensor | None = None, GROUP: int = 8, ctas_per_sm: int = 1,
                      programs: int | None = None, **cfg) -> torch.Tensor:
    """a @ b (bf16/fp16, rows 16-byte aligned) with the persistent kernel; cfg: BM, BN, BK,
    STAGES (>= 2), num_warps. `programs`: the grid (default one program per SM, or
    `ctas_per_sm`; checks take a few so that each walks several tiles)."""
    M, K = a.shape
    N = b.shape[1]
    if cfg["STAGES"] < 2:
        raise ValueError("matmul_persistent: STAGES must be at least 2 (loads run STAGES/2 "
                         "ahead)")
    c = torch.empty(M, N, device=a.device, dtype=a.dtype) if c is None else c
    tiles = kit.cdiv(M, cfg["BM"]) * kit.cdiv(N, cfg["BN"])
    grid = (min(tiles, programs) if programs else num_programs(tiles, a.device, ctas_per_sm),)
    matmul_persistent_kernel[grid](a, b, c, M, N, K, GROUP=GROUP, arch=arch, **cfg)
    return c
