"""Split-K for skinny GEMMs (LLM decode / small-batch shapes) with the parts added in
distributed shared memory: the P parts of one output tile run as one thread-block cluster
of P CTAs, so the sum needs no fp32 slabs in global memory, no second launch and no
counter in global memory (the cluster's CTAs are co-scheduled, so they may wait for each
other).

Why: at M = 16-128 a 128-wide tile grid fills a third to two thirds of the SMs, and each
SM streams its bytes from L2 at ~38-40 GB/s (benchmarks/NOTES.md), so the work has to be
spread over more SMs by splitting K. examples/matmul.py sums the parts through fp32 slabs
and a second launch above M = 64 (the last part's pass over 128 rows was slower), which
cost 8B o at M = 128 0.71-0.81x cuBLAS on an H100.

Each CTA runs its 1/P of the k-steps through a TMA ring into its own accumulator, then
pushes column chunk i of it (BN/P columns, a relabeling of the accumulator's registers)
into CTA i's shared buffer `red` (st.shared::cluster, P - 1 slots: the sender's own chunk
stays in its registers); after one cluster barrier CTA i adds the chunks it was sent to
its own, always in the same order (the sum does not depend on timing), and stores
columns [i*BN/P, (i+1)*BN/P) of the tile. Non-persistent: one cluster per tile.

With CN > 1 (`share_a`), CN neighbouring column blocks of the same part of K also sit in
the cluster (rank = part + P * block): they need the same A tile, so each copies 1/CN of
its rows and multicasts it to all (`kit.tma_load(..., multicast=, split=True)`), and a
stage is refilled only once every sharer released it (an `empty` barrier that each
warpgroup of the CN CTAs arrives on after its MMAs on the stage retired). Each CTA then
pulls (BM/CN + BN) rows of K from L2 instead of (BM + BN).
"""

from __future__ import annotations

import torch

import kitjit as kit

from .matmul_cluster import gemm_dims


@kit.jit
def fill(a, b, ready, empty, A, B, m0, n0, k, g, part, STAGES: kit.constexpr,
         P: kit.constexpr, CN: kit.constexpr, AMASK: kit.constexpr, TRANS_B: kit.constexpr,
         L2_B: kit.constexpr):
    """k-step g (k-offset k) into stage g % STAGES: A (past K or M, TMA reads zeros) and
    B. CN > 1: the CN CTAs of this part share A, each copying 1/CN of its rows multicast to
    all, once all of them released the stage."""
    s = g % STAGES
    if CN == 1:
        kit.tma_load(a[s], A, (m0, k), ready[s])
        kit.tma_load(b[s], B, (n0, k) if TRANS_B else (k, n0), ready[s], l2_promotion=L2_B)
    else:
        kit.mbarrier_wait(empty[s], g // STAGES % 2 ^ 1)   # a fresh barrier passes parity 1
        for p in kit.static_range(P):                 # a multicast mask is a constexpr:
            if part == p:                             # the A group of part p
                kit.tma_load(a[s], A, (m0, k), ready[s], sync=False, multicast=AMASK << p,
                             split=True)
                kit.tma_load(b[s], B, (n0, k) if TRANS_B else (k, n0), ready[s],
                             sync=False, l2_promotion=L2_B)


@kit.jit
def halves(x, BM: kit.constexpr, W: kit.constexpr):
    """Columns [0, W/2) and [W/2, W) of x [BM, W] (each thread holds both: no shuffle)."""
    return kit.split(kit.permute(kit.reshape(x, (BM, 2, W // 2)), (0, 2, 1)))


@kit.jit
def trade(red, c, own, i, part, base, P: kit.constexpr):
    """Column chunk i of this CTA's partial: kept where it is this CTA's own (i == part),
    else pushed into slot (part - i - 1) mod P of CTA base + i (its owner)."""
    if part != i:
        kit.cluster_store(red[(part - i - 1 + P) % P], base + i, c)
    return kit.where(part == i, c, own)


@kit.jit
def trade_chunks(red, acc, part, base, BM: kit.constexpr, BN: kit.constexpr,
                 P: kit.constexpr):
    """Pushes column chunk i of acc (BN/P columns) to CTA base + i for every i != part;
    returns chunk `part`, the one this CTA adds up."""
    if P == 2:
        c0, c1 = halves(acc, BM, BN)
        own = trade(red, c0, c0, 0, part, base, P)
        own = trade(red, c1, own, 1, part, base, P)
    elif P == 4:
        lo, hi = halves(acc, BM, BN)
        c0, c1 = halves(lo, BM, BN // 2)
        c2, c3 = halves(hi, BM, BN // 2)
        own = trade(red, c0, c0, 0, part, base, P)
        own = trade(red, c1, own, 1, part, base, P)
        own = trade(red, c2, own, 2, part, base, P)
        own = trade(red, c3, own, 3, part, base, P)
    else:
        kit.static_assert(P == 8, "matmul_splitk_cluster: P is 1, 2, 4 or 8")
        lo, hi = halves(acc, BM, BN)
        q0, q1 = halves(lo, BM, BN // 2)
        q2, q3 = halves(hi, BM, BN // 2)
        c0, c1 = halves(q0, BM, BN // 4)
        c2, c3 = halves(q1, BM, BN // 4)
        c4, c5 = halves(q2, BM, BN // 4)
        c6, c7 = halves(q3, BM, BN // 4)
        own = trade(red, c0, c0, 0, part, base, P)
        own = trade(red, c1, own, 1, part, base, P)
        own = trade(red, c2, own, 2, part, base, P)
        own = trade(red, c3, own, 3, part, base, P)
        own = trade(red, c4, own, 4, part, base, P)
        own = trade(red, c5, own, 5, part, base, P)
        own = trade(red, c6, own, 6, part, base, P)
        own = trade(red, c7, own, 7, part, base, P)
    return own


@kit.jit
def matmul_splitk_cluster_kernel(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr,
                                 BK: kit.constexpr, STAGES: kit.constexpr, P: kit.constexpr,
                                 CN: kit.constexpr, AMASK: kit.constexpr, WG: kit.constexpr,
                                 TRANS_B: kit.constexpr = False, L2_B: kit.constexpr = 256,
                                 LAG: kit.constexpr = 1):
    dt = A.dtype.element_ty
    a = kit.shared((STAGES, BM, BK), dt)
    b = kit.shared((STAGES, BN, BK) if TRANS_B else (STAGES, BK, BN), dt)
    if P > 1:   # slot j: part (rank + j + 1) mod P's chunk of my columns
        red = kit.shared((P - 1, BM, BN // P), kit.float32)
    ready = kit.mbarriers(STAGES)
    empty = kit.mbarriers(STAGES, arrivals=CN * WG)   # CN > 1: A's sharers are done with s
    rank = kit.cluster_ctarank()                      # = part + P * (column block in cluster)
    part = rank % P                                   # this CTA's part of K
    group = kit.program_id(0) // (P * CN)             # CN column blocks of one row block
    n_m = kit.cdiv(M, BM)
    m0 = group % n_m * BM                             # a group's row blocks are neighbours
    n0 = (group // n_m * CN + rank // P) * BN         # (B's tiles read from HBM once)
    n_k = kit.cdiv(kit.cdiv(K, BK), P)                # k-steps of each part
    kit.assume(n_k > 0)
    k0 = part * n_k * BK
    if CN > 1:
        kit.cluster_barrier()     # the peers' barriers exist before copies land in them
    for s in kit.static_range(STAGES - LAG):
        if s < n_k:
            fill(a, b, ready, empty, A, B, m0, n0, k0 + s * BK, s, part, STAGES, P, CN,
                 AMASK, TRANS_B, L2_B)
    if CN == 1:
        kit.cluster_barrier()     # every peer's `red` exists before anyone pushes into it
    acc = kit.zeros((BM, BN), kit.float32)
    for kk in range(n_k):
        s = kk % STAGES
        kit.mbarrier_wait(ready[s], kk // STAGES % 2)
        acc = kit.mma(a[s], b[s].T if TRANS_B else b[s], acc, pending=1)
        if CN > 1:
            if kk > 0:            # MMA kk-1 retired: release its stage in A's sharers
                for j in kit.static_range(CN):
                    kit.mbarrier_arrive(empty[(kk - 1) % STAGES], cta=part + P * j)
        if kk + STAGES - LAG < n_k:   # the stage MMA kk-LAG read is free (LAG 2: one
            fill(a, b, ready, empty, A, B, m0, n0,    # step of slack for A's sharers)
                 k0 + (kk + STAGES - LAG) * BK, kk + STAGES - LAG, part, STAGES, P, CN,
                 AMASK, TRANS_B, L2_B)
    if P == 1:
        total = acc
    else:
        total = trade_chunks(red, acc, part, rank - part, BM, BN, P)
    kit.cluster_barrier()         # every part's chunks have landed in their owners' `red`
    for j in kit.static_range(P - 1):   # (and no CTA leaves while a peer may write to it)
        total += kit.load(red[j])
    rm = m0 + kit.arange(0, BM)
    rn = n0 + part * (BN // P) + kit.arange(0, BN // P)
    kit.store(C + rm[:, None] * N + rn[None, :], total.to(C.dtype.element_ty),
              mask=(rm[:, None] < M) & (rn[None, :] < N))


_SMS: dict = {}


def num_sms(device: torch.device) -> int:
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count \
            if torch.cuda.is_available() and device.type == "cuda" else 132
    return _SMS[device]


def splitk_plan(M: int, N: int, K: int, sms: int, BK: int = 64, share_a: bool = False
                ) -> dict:
    """Tiles and parts for a skinny GEMM: 64-row tiles for M <= 64, else 128; 128 columns;
    P, the most parts (a power of two, at most 8: a portable cluster) whose CTAs all fit on
    the SMs at once while each part keeps at least 8 k-steps (P == 1: no split pays).
    `share_a`: CN column blocks (2 or 4, dividing the column blocks, P * CN <= 8) share
    each A tile by multicast (A's bytes from L2 per CTA / CN)."""
    BM = 64 if M <= 64 else 128
    BN = 128
    n_n = kit.cdiv(N, BN)
    tiles = kit.cdiv(M, BM) * n_n
    P = 1
    while P < 8 and tiles * P * 2 <= sms and kit.cdiv(K, BK) >= 2 * P * 8:
        P *= 2
    CN = 1
    while share_a and CN < 4 and P * CN * 2 <= 8 and n_n % (CN * 2) == 0:
        CN *= 2
    return dict(BM=BM, BN=BN, BK=BK, P=P, CN=CN, STAGES=stages_that_fit(BM, BN, BK, P),
                num_warps=4 if BM == 64 else 8)


SMEM_BYTES = 227 * 1024     # a CTA's shared memory on sm_90


def stages_that_fit(BM: int, BN: int, BK: int, P: int, most: int = 6) -> int:
    """Ring stages (at most `most`) beside the P - 1 fp32 chunks a CTA is sent (bf16/fp16
    A and B tiles): more copies in flight for a stream that is bound by them."""
    red = (P - 1) * BM * (BN // P) * 4
    return max(2, min(most, (SMEM_BYTES - 1024 - red) // ((BM + BN) * BK * 2)))


def active_clusters(ck, cluster_ctas: int, num_warps: int, device: torch.device) -> int:
    """How many clusters of `cluster_ctas` CTAs of compiled kernel `ck` the GPU keeps
    resident at once (cuOccupancyMaxActiveClusters): a cluster lives on one GPC, so with
    one CTA an SM, clusters of 4-8 can leave a GPC's last SMs idle, and clusters past the
    count would run in a second wave. Large without a GPU or when the driver cannot say
    (a plan for speed: the launch is correct either way)."""
    if device.type != "cuda":
        return 1 << 30
    try:
        return _max_active_clusters(ck, cluster_ctas, num_warps, device)
    except Exception:
        return 1 << 30


def _max_active_clusters(ck, cluster_ctas: int, num_warps: int, device: torch.device) -> int:
    from cuda.bindings import driver as cu

    conf = cu.CUlaunchConfig()
    conf.gridDimX, conf.gridDimY, conf.gridDimZ = cluster_ctas, 1, 1
    conf.blockDimX, conf.blockDimY, conf.blockDimZ = 32 * num_warps, 1, 1
    conf.sharedMemBytes = ck.shared
    attr = cu.CUlaunchAttribute()
    attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = \
        cluster_ctas, 1, 1
    conf.attrs = [attr]
    conf.numAttrs = 1
    err, n = cu.cuOccupancyMaxActiveClusters(cu.CUfunction(ck.function(device.index or 0)),
                                             conf)
    if int(err) != 0:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters: {err}")
    return int(n)


_PLANS: dict = {}


def _launch_config(a, b, c, M, N, K, trans_b, share_a, config) -> tuple[dict, int]:
    """The config and grid of a call (cached per shape: no Python planning per launch).
    The plan's parts and A sharers are halved (sharers first) until every cluster of the
    grid is resident at once."""
    key = (M, N, K, trans_b, share_a, a.device, a.dtype, tuple(sorted(config.items())))
    got = _PLANS.get(key)
    if got is not None:
        return got
    cfg = dict(splitk_plan(M, N, K, num_sms(a.device), config.get("BK", 64), share_a),
               **config)
    while True:
        P, CN = cfg["P"], cfg["CN"]
        if P not in (1, 2, 4, 8) or cfg["BN"] % P or cfg["BN"] // P < 8:
            raise ValueError(f"matmul_splitk_cluster: P={P} parts of BN={cfg['BN']} "
                             "columns: P is 1, 2, 4 or 8 and leaves chunks of at least 8 "
                             "columns")
        if CN not in (1, 2, 4, 8) or P * CN > 16:
            raise ValueError(f"matmul_splitk_cluster: CN={CN} column blocks sharing A with "
                             f"P={P} parts: CN is 1, 2, 4 or 8, and P * CN at most 16")
        groups = kit.cdiv(M, cfg["BM"]) * kit.cdiv(kit.cdiv(N, cfg["BN"]), CN)
        cfg.update(AMASK=sum(1 << (P * j) for j in range(CN)), WG=cfg["num_warps"] // 4)
        grid = groups * CN * P
        if a.device.type != "cuda" or "P" in config and "CN" in config:
            break
        ck = matmul_splitk_cluster_kernel.warmup(a, b, c, M, N, K, TRANS_B=trans_b,
                                                 grid=(grid,), cluster=(P * CN, 1, 1), **cfg)
        if groups <= active_clusters(ck, P * CN, cfg["num_warps"], a.device) or P * CN == 1:
            break
        if CN > 1 and "CN" not in config:
            cfg["CN"] = CN // 2
        elif "P" not in config:
            cfg["P"] = P // 2
        else:
            cfg["CN"] = CN // 2
    _PLANS[key] = cfg, grid
    return cfg, grid


def splitk_config(a: torch.Tensor, b: torch.Tensor, trans_b: bool = False,
                  share_a: bool = False, **config) -> dict:
    """The config matmul_splitk_cluster(a, b, trans_b, share_a, **config) launches with
    (after the residency check): for reports."""
    M, K = a.shape
    N = b.shape[0] if trans_b else b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    return dict(_launch_config(a, b, c, M, N, K, trans_b, share_a, config)[0])


def matmul_splitk_cluster(a: torch.Tensor, b: torch.Tensor, trans_b: bool = False,
                          share_a: bool = False, **config) -> torch.Tensor:
    """a @ b (a @ b.T when trans_b: b is [N, K]) with K split over the CTAs of a cluster
    (sm_90a), the parts added in distributed shared memory. `config`: BM, BN, BK, STAGES,
    P (parts: 1, 2, 4 or 8), CN (column blocks sharing A by multicast: 1, 2, 4, 8),
    num_warps, L2_B (the L2 promotion of B's copies), LAG (1: a stage is refilled as soon
    as the MMAs of the step before released it in every sharer; 2: one step later, so a
    sharer running a step behind does not stall the refill); defaults from `splitk_plan`
    (`share_a` there), P and CN then halved until every cluster is resident at once
    (unless both are given). A and B need rows of a multiple of 16 bytes (TMA)."""
    M, N, K = gemm_dims("matmul_splitk_cluster", a, b, trans_b)
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    if K == 0 or M == 0 or N == 0:
        return c.zero_()
    cfg, grid = _launch_config(a, b, c, M, N, K, trans_b, share_a, config)
    matmul_splitk_cluster_kernel[(grid,)](a, b, c, M, N, K, TRANS_B=trans_b,
                                          cluster=(cfg["P"] * cfg["CN"], 1, 1), **cfg)
    return c
