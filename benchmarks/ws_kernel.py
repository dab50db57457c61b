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
        it = 0
        for tile in range(first, n_tiles, step):
            m0, n0 = tile_origin(tile, M, N, BM, BN, GROUP)
            for kk in range(n_k):
                s = it % STAGES
                kit.mbarrier_wait(empty[s], it // STAGES % 2 ^ 1)
                kit.tma_load(a[s], A, (m0, kk * BK), ready[s])
                kit.tma_load(b[s], B, (kk * BK, n0), ready[s])
                it += 1
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
            m0, n0 = tile_origin(tile, M, N, BM, BN, GROUP)
            rm = m0 + kit.arange(0, BM)
            rn = n0 + kit.arange(0, BN)
            kit.store(C + rm[:, None] * N + rn[None, :], out,
                      mask=(rm[:, None] < M) & (rn[None, :] < N))


@kit.jit
def consumer(a, b, ready, empty, C, M, N, n_k, n_tiles, first, step, p,
             BM: kit.constexpr, BN: kit.constexpr, S2: kit.constexpr, GROUP: kit.constexpr):
    # consumer p takes every other tile of the program and owns ring p (stages p*S2 ..
    # p*S2+S2-1): a waiter is never more than one phase ahead of its barrier
    it = 0
    for tile in range(first + p * step, n_tiles, 2 * step):
        acc = kit.zeros((BM, BN), kit.float32)
        for kk in range(n_k):
            s = p * S2 + it % S2
            kit.mbarrier_wait(ready[s], it // S2 % 2)
            acc = kit.mma(a[s], b[s], acc, pending=1)
            if kk > 0:
                kit.mbarrier_arrive(empty[p * S2 + (it - 1) % S2])
            it += 1
        out = acc.to(C.dtype.element_ty)
        kit.mbarrier_arrive(empty[p * S2 + (it - 1) % S2])
        m0, n0 = tile_origin(tile, M, N, BM, BN, GROUP)
        rm = m0 + kit.arange(0, BM)
        rn = n0 + kit.arange(0, BN)
        kit.store(C + rm[:, None] * N + rn[None, :], out,
                  mask=(rm[:, None] < M) & (rn[None, :] < N))


@kit.jit
def matmul_pingpong(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
                    STAGES: kit.constexpr, GROUP: kit.constexpr):
    S2 = STAGES // 2                               # two rings, one per consumer
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)
    b = kit.shared((STAGES, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(STAGES)
    empty = kit.mbarriers(STAGES)                  # one consumer warpgroup per stage
    n_k = kit.cdiv(K, BK)
    n_tiles = kit.cdiv(M, BM) * kit.cdiv(N, BN)
    first = kit.program_id(0)
    step = kit.num_programs(0)
    if kit.warpgroup_id() == 0:                    # producer
        kit.setmaxnreg(40)
        j = 0
        for tile in range(first, n_tiles, step):
            m0, n0 = tile_origin(tile, M, N, BM, BN, GROUP)
            p = j % 2
            base = (j // 2) * n_k                  # k-steps ring p has seen before this tile
            for kk in range(n_k):
                it = base + kk
                s = p * S2 + it % S2
                kit.mbarrier_wait(empty[s], it // S2 % 2 ^ 1)
                kit.tma_load(a[s], A, (m0, kk * BK), ready[s])
                kit.tma_load(b[s], B, (kk * BK, n0), ready[s])
            j += 1
    else:
        kit.setmaxnreg(232)
        if kit.warpgroup_id() == 1:                # two consumers, alternate tiles: one's
            consumer(a, b, ready, empty, C, M, N, n_k, n_tiles, first, step, 0,  # epilogue
                     BM, BN, S2, GROUP)            # overlaps the other's MMAs
        else:
            consumer(a, b, ready, empty, C, M, N, n_k, n_tiles, first, step, 1,
                     BM, BN, S2, GROUP)
