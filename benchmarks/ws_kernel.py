"""Warp-specialized GEMM variants, measured against examples/matmul.py by
benchmarks/ws_try.py: `matmul_ws` (one tile per CTA), `matmul_wsp` (persistent, two
consumer warpgroups on one 128-row tile) and `matmul_pingpong` (persistent, two consumer
warpgroups on alternate tiles taking turns on the tensor cores). Host wrappers at the end."""
import torch

import kitjit as kit


@kit.jit
def matmul_ws(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
              STAGES: kit.constexpr):
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)
    b = kit.shared((STAGES, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(STAGES)
    empty = kit.mbarriers(STAGES, arrivals=2)
    n_k = kit.cdiv(K, BK)
    m0 = kit.program_id(0) * BM
    n0 = kit.program_id(1) * BN
    if kit.warpgroup_id() == 0:
        kit.setmaxnreg(40)
        for kk in range(n_k):
            s = kk % STAGES
            kit.mbarrier_wait(empty[s], kk // STAGES % 2 ^ 1)
            kit.tma_load(a[s], A, (m0, kk * BK), ready[s])
            kit.tma_load(b[s], B, (kk * BK, n0), ready[s])
    else:
        kit.setmaxnreg(232)
        acc = kit.zeros((BM, BN), kit.float32)
        for kk in range(n_k):
            s = kk % STAGES
            kit.mbarrier_wait(ready[s], kk // STAGES % 2)
            acc = kit.mma(a[s], b[s], acc)
            kit.mbarrier_arrive(empty[s])
        rm = m0 + kit.arange(0, BM)
        rn = n0 + kit.arange(0, BN)
        kit.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty),
                  mask=(rm[:, None] < M) & (rn[None, :] < N))


@kit.jit
def tile_origin(tile, M, N, BM: kit.constexpr, BN: kit.constexpr, GROUP: kit.constexpr):
    n_m, n_n = kit.cdiv(M, BM), kit.cdiv(N, BN)
    first_m = tile // (GROUP * n_n) * GROUP
    rows = kit.minimum(n_m - first_m, GROUP)
    return (first_m + tile % (GROUP * n_n) % rows) * BM, tile % (GROUP * n_n) // rows * BN


@kit.jit
def produce(a, b, ready, empty, A, B, M, N, n_k, n_tiles, first, step, BM: kit.constexpr,
            BN: kit.constexpr, BK: kit.constexpr, STAGES: kit.constexpr,
            GROUP: kit.constexpr):
    """The producer warpgroup of a persistent kernel: every k-step of this program's tiles,
    in order, into the ring (a stage is refilled once its consumers freed it)."""
    it = 0
    for tile in range(first, n_tiles, step):
        m0, n0 = tile_origin(tile, M, N, BM, BN, GROUP)
        for kk in range(n_k):
            s = it % STAGES
            kit.mbarrier_wait(empty[s], it // STAGES % 2 ^ 1)
            kit.tma_load(a[s], A, (m0, kk * BK), ready[s])
            kit.tma_load(b[s], B, (kk * BK, n0), ready[s])
            it += 1


@kit.jit
def store_tile(C, out, tile, M, N, BM: kit.constexpr, BN: kit.constexpr,
               GROUP: kit.constexpr):
    m0, n0 = tile_origin(tile, M, N, BM, BN, GROUP)
    rm = m0 + kit.arange(0, BM)
    rn = n0 + kit.arange(0, BN)
    kit.store(C + rm[:, None] * N + rn[None, :], out, mask=(rm[:, None] < M) & (rn[None, :] < N))


@kit.jit
def matmul_wsp(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
               STAGES: kit.constexpr, GROUP: kit.constexpr):
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)
    b = kit.shared((STAGES, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(STAGES)                  # producer -> consumers: stage landed
    empty = kit.mbarriers(STAGES, arrivals=2)      # consumers -> producer: stage free
    n_k = kit.cdiv(K, BK)
    n_tiles = kit.cdiv(M, BM) * kit.cdiv(N, BN)
    first = kit.program_id(0)
    step = kit.num_programs(0)
    if kit.warpgroup_id() == 0:                    # producer: one warpgroup, few registers
        kit.setmaxnreg(40)
        produce(a, b, ready, empty, A, B, M, N, n_k, n_tiles, first, step, BM, BN, BK, STAGES,
                GROUP)
    else:                                          # consumers: two warpgroups, 64 rows each
        kit.setmaxnreg(232)
        it = 0
        for tile in range(first, n_tiles, step):
            acc = kit.zeros((BM, BN), kit.float32)
            for kk in range(n_k):
                s = it % STAGES
                kit.mbarrier_wait(ready[s], it // STAGES % 2)
                acc = kit.mma(a[s], b[s], acc, pending=1)
                if kk > 0:                         # MMA it-1 is done: its stage is free
                    kit.mbarrier_arrive(empty[(it - 1) % STAGES])
                it += 1
            out = acc.to(C.dtype.element_ty)       # waits for the last MMA
            kit.mbarrier_arrive(empty[(it - 1) % STAGES])
            store_tile(C, out, tile, M, N, BM, BN, GROUP)


@kit.jit
def pp_consumer(a, b, ready, empty, turn, C, M, N, n_k, n_tiles, first, step, p,
                BM: kit.constexpr, BN: kit.constexpr, STAGES: kit.constexpr,
                GROUP: kit.constexpr):
    # consumer p takes tiles first + p*step, first + (2+p)*step, ... of this program; the
    # two consumers share one ring and take turns on the tensor cores (turn[p] is theirs),
    # so one's epilogue runs while the other's MMAs do
    j = 0
    for tile in range(first + p * step, n_tiles, 2 * step):
        it = (2 * j + p) * n_k                     # ring position of this tile's first step
        if j > 0 or p == 1:
            kit.mbarrier_wait(turn[p], (j - 1 + p) % 2)
        acc = kit.zeros((BM, BN), kit.float32)
        for kk in range(n_k):
            s = it % STAGES
            kit.mbarrier_wait(ready[s], it // STAGES % 2)
            acc = kit.mma(a[s], b[s], acc, pending=1)
            if kk > 0:
                kit.mbarrier_arrive(empty[(it - 1) % STAGES])
            it += 1
        kit.mbarrier_arrive(turn[1 - p])           # all MMAs issued: the other may go
        out = acc.to(C.dtype.element_ty)           # waits for the last MMA
        kit.mbarrier_arrive(empty[(it - 1) % STAGES])
        store_tile(C, out, tile, M, N, BM, BN, GROUP)
        j += 1


@kit.jit
def matmul_pingpong(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
                    STAGES: kit.constexpr, GROUP: kit.constexpr):
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)
    b = kit.shared((STAGES, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(STAGES)
    empty = kit.mbarriers(STAGES)                  # one consumer warpgroup per stage
    turn = kit.mbarriers(2)                        # consumer p may issue its MMAs
    n_k = kit.cdiv(K, BK)
    n_tiles = kit.cdiv(M, BM) * kit.cdiv(N, BN)
    first = kit.program_id(0)
    step = kit.num_programs(0)
    if kit.warpgroup_id() == 0:                    # producer: the tiles in order, one ring
        kit.setmaxnreg(40)
        produce(a, b, ready, empty, A, B, M, N, n_k, n_tiles, first, step, BM, BN, BK, STAGES,
                GROUP)
    else:
        kit.setmaxnreg(232)
        if kit.warpgroup_id() == 1:
            pp_consumer(a, b, ready, empty, turn, C, M, N, n_k, n_tiles, first, step, 0,
                        BM, BN, STAGES, GROUP)
        else:
            pp_consumer(a, b, ready, empty, turn, C, M, N, n_k, n_tiles, first, step, 1,
                        BM, BN, STAGES, GROUP)


def ws(a, b, c=None, BM=128, BN=256, BK=64, STAGES=4):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype) if c is None else c
    matmul_ws[(kit.cdiv(M, BM), kit.cdiv(N, BN))](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK,
                                                  STAGES=STAGES, num_warps=12)
    return c


def _persistent(kernel, a, b, c, BM, BN, BK, STAGES):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype) if c is None else c
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count \
        if a.device.type == "cuda" else 4
    kernel[(min(kit.cdiv(M, BM) * kit.cdiv(N, BN), sms),)](
        a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, STAGES=STAGES, GROUP=8, num_warps=12)
    return c


def wsp(a, b, c=None, BM=128, BN=256, BK=64, STAGES=4):
    return _persistent(matmul_wsp, a, b, c, BM, BN, BK, STAGES)


def pp(a, b, c=None, BM=128, BN=128, BK=64, STAGES=6):
    return _persistent(matmul_pingpong, a, b, c, BM, BN, BK, STAGES)
