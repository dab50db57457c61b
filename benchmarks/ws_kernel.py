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
