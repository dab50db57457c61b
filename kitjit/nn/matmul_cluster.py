"""A persistent bf16/fp16 GEMM on 2-CTA thread-block clusters with TMA multicast of B.

examples/matmul.py's persistent kernel is bound by L2 -> shared-memory traffic at ~810
TFLOP/s on an H100/H200 with 128x256 tiles (benchmarks/NOTES.md, session 5). Here the two
CTAs of a cluster (2, 1, 1) compute vertically neighbouring tiles of C (rows m0 and m0 + BM,
the same BN columns), so both need the same B tile: each loads its own A tile and one column
half of B, multicast into both CTAs. Per pair of tiles and k-step that is 2 A + 1 B tiles
read from L2 instead of 2 A + 2 B: a third less traffic per flop at 128x256.

The pair walks pairs of tiles together (the scheduler hands out pairs of row blocks, in
examples/matmul.py's L2-friendly grouped order), and the ring of TMA stages runs across
tile boundaries as in the example. A stage is refilled by a multicast that writes into BOTH
CTAs, so its "empty" condition is cluster-wide: each warpgroup arrives on `empty[s]` of both
CTAs once its MMAs on stage s have retired, and each CTA waits on its own `empty[s]` (2 x
warpgroups arrivals) before it issues its loads into s. Each CTA copies its half of the
stage's B tile (`kit.tma_load(..., multicast=3, split=True)`), so every warpgroup runs one
64x256 MMA per 16 of K over the whole tile, as the example does (SPLIT_B=False: B in two
half tiles and two N = BN/2 MMAs per k-step, the first form, kept for measurement).

Two kernels: `matmul_cluster_kernel` (both warpgroups issue MMAs and, in turn, the refill,
as the example) and `matmul_cluster_ws_kernel` (a producer warpgroup waits for the
cluster-wide releases and issues the copies; two consumer warpgroups only wait for data).

Ragged edges: a pair whose second tile starts past M still runs (its A loads read zeros, its
B half still lands in both CTAs, so nobody waits forever); its stores are clipped (TMA) or
masked. `LAG` is how many k-steps back the stage being refilled was released (1: the one
just released, waiting for the peer's release of the same step; 2: one step of slack for
the peer, one stage less in flight).
"""

from __future__ import annotations

import torch

import kitjit as kit


@kit.jit
def pair_origin(pair, M, N, BM: kit.constexpr, BN: kit.constexpr, GROUP: kit.constexpr):
    """(m0, n0) of this CTA's tile in pair `pair`: GROUP pair-rows (2*BM rows each) are
    swept column by column (as examples/matmul.py's tile_origin); rank r takes rows
    m0 + r*BM of the pair."""
    n_p, n_n = kit.cdiv(M, 2 * BM), kit.cdiv(N, BN)
    first = pair // (GROUP * n_n) * GROUP
    # at least 1: asked for the pair after the last too (the next pair's origin, unused
    # then), where no pair-rows are left and a remainder by 0 would be undefined
    rows = kit.maximum(kit.minimum(n_p - first, GROUP), 1)
    return ((first + pair % (GROUP * n_n) % rows) * 2 * BM + kit.cluster_ctarank() * BM,
            pair % (GROUP * n_n) // rows * BN)


@kit.jit
def fill(a, b, ready, empty, A, B, m0, n0, k, g, BN: kit.constexpr, STAGES: kit.constexpr,
         TRANS_B: kit.constexpr, SPLIT_B: kit.constexpr):
    """Load k-step number g of this CTA (k-offset k of tile (m0, n0)) into stage g % STAGES
    once both CTAs released that stage: own A tile, plus half of B multicast to both."""
    s = g % STAGES
    kit.mbarrier_wait(empty[s], g // STAGES % 2 ^ 1)   # a fresh barrier passes parity 1
    kit.tma_load(a[s], A, (m0, k), ready[s], sync=False)   # the wait ordered the readers
    if SPLIT_B:        # the whole B tile's origin; this CTA copies its half of it
        kit.tma_load(b[s], B, (n0, k) if TRANS_B else (k, n0), ready[s], sync=False,
                     multicast=3, split=True)
    else:              # column half `rank` into its own tile b[2s + rank]
        r = kit.cluster_ctarank()
        nh = n0 + r * (BN // 2)
        kit.tma_load(b[2 * s + r], B, (nh, k) if TRANS_B else (k, nh), ready[s], sync=False,
                     multicast=3)


@kit.jit
def refill(a, b, ready, empty, A, B, pair, step, n_pairs, kk, it, m0, n0, m1, n1, M, N, n_k,
           BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr, STAGES: kit.constexpr,
           GROUP: kit.constexpr, TRANS_B: kit.constexpr, LAG: kit.constexpr,
           SPLIT_B: kit.constexpr):
    j = kk + STAGES - LAG      # the k-step (of this pair, or later ones) that refills the
    g = it + STAGES - LAG      # stage released LAG steps ago
    if j < n_k:
        fill(a, b, ready, empty, A, B, m0, n0, j * BK, g, BN, STAGES, TRANS_B, SPLIT_B)
    elif j < 2 * n_k:
        if pair + step < n_pairs:
            fill(a, b, ready, empty, A, B, m1, n1, (j - n_k) * BK, g, BN, STAGES, TRANS_B,
                 SPLIT_B)
    elif pair + j // n_k * step < n_pairs:          # K shorter than the ring
        mj, nj = pair_origin(pair + j // n_k * step, M, N, BM, BN, GROUP)
        fill(a, b, ready, empty, A, B, mj, nj, j % n_k * BK, g, BN, STAGES, TRANS_B, SPLIT_B)


@kit.jit
def store_tile(C, out, m0, n0, M, N, BM: kit.constexpr, BN: kit.constexpr,
               TMA_STORE: kit.constexpr):
    if TMA_STORE:      # two column halves through one half-size staging tile (as the
        lo, hi = kit.split(kit.permute(kit.reshape(out, (BM, 2, BN // 2)), (0, 2, 1)))
        kit.tma_store(C, (m0, n0), lo)          # example's TMA_STORE=2); rows past M and
        kit.tma_store(C, (m0, n0 + BN // 2), hi)   # columns past N are clipped
    else:
        rm = m0 + kit.arange(0, BM)
        rn = n0 + kit.arange(0, BN)
        kit.store(C + rm[:, None] * N + rn[None, :], out,
                  mask=(rm[:, None] < M) & (rn[None, :] < N))


@kit.jit
def store_halves(C, acc0, acc1, m0, n0, M, N, BM: kit.constexpr, BN: kit.constexpr,
                 TMA_STORE: kit.constexpr):
    """store_tile for a tile held as two column halves (SPLIT_B=False)."""
    if TMA_STORE:
        kit.tma_store(C, (m0, n0), acc0.to(C.dtype.element_ty))
        kit.tma_store(C, (m0, n0 + BN // 2), acc1.to(C.dtype.element_ty))
    else:
        rm = m0 + kit.arange(0, BM)
        rn = n0 + kit.arange(0, BN // 2)
        mask = rm[:, None] < M
        kit.store(C + rm[:, None] * N + rn[None, :], acc0.to(C.dtype.element_ty),
                  mask=mask & (rn[None, :] < N))
        rn2 = rn + BN // 2
        kit.store(C + rm[:, None] * N + rn2[None, :], acc1.to(C.dtype.element_ty),
                  mask=mask & (rn2[None, :] < N))


@kit.jit
def matmul_cluster_kernel(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr,
                          BK: kit.constexpr, STAGES: kit.constexpr, GROUP: kit.constexpr,
                          WG: kit.constexpr, TRANS_B: kit.constexpr = False,
                          TMA_STORE: kit.constexpr = True, LAG: kit.constexpr = 1,
                          SPLIT_B: kit.constexpr = True):
    dt = A.dtype.element_ty
    a = kit.shared((STAGES, BM, BK), dt)
    bs = (BN, BK) if TRANS_B else (BK, BN)   # B [N, K] tiles are read through .T
    if SPLIT_B:        # one B tile per stage, each CTA multicasting half of it
        b = kit.shared((STAGES, bs[0], bs[1]), dt)
    else:              # B's two column halves per stage, one MMA each
        b = kit.shared((2 * STAGES, bs[0] // 2, bs[1]) if TRANS_B else
                       (2 * STAGES, bs[0], bs[1] // 2), dt)
    ready = kit.mbarriers(STAGES)                     # stage s has landed here (A + all B)
    empty = kit.mbarriers(STAGES, arrivals=2 * WG)    # both CTAs' warpgroups are done with s
    n_k = kit.cdiv(K, BK)
    kit.assume(n_k > 0)
    n_pairs = kit.cdiv(M, 2 * BM) * kit.cdiv(N, BN)
    step = kit.num_programs(0) // 2                   # clusters in the persistent grid
    first = kit.program_id(0) // 2                    # this cluster's first pair
    kit.cluster_barrier()              # the peer's barriers exist before copies land in them
    for s in kit.static_range(STAGES - LAG):         # prologue: this pair's first k-steps
        t = first + s // n_k * step                   # (several pairs when K is short)
        if t < n_pairs:
            m0, n0 = pair_origin(t, M, N, BM, BN, GROUP)
            fill(a, b, ready, empty, A, B, m0, n0, s % n_k * BK, s, BN, STAGES, TRANS_B,
                 SPLIT_B)
    it = 0                                            # k-steps done by this CTA
    for pair in range(first, n_pairs, step):
        m0, n0 = pair_origin(pair, M, N, BM, BN, GROUP)
        m1, n1 = pair_origin(pair + step, M, N, BM, BN, GROUP)
        if SPLIT_B:
            acc = kit.zeros((BM, BN), kit.float32)
        else:          # acc: columns [0, BN/2), acc1: [BN/2, BN)
            acc = kit.zeros((BM, BN // 2), kit.float32)
            acc1 = kit.zeros((BM, BN // 2), kit.float32)
        for kk in range(n_k):
            s = it % STAGES
            kit.mbarrier_wait(ready[s], it // STAGES % 2)
            if SPLIT_B:
                acc = kit.mma(a[s], b[s].T if TRANS_B else b[s], acc, pending=1)
            else:
                acc = kit.mma(a[s], b[2 * s].T if TRANS_B else b[2 * s], acc, pending=3)
                acc1 = kit.mma(a[s], b[2 * s + 1].T if TRANS_B else b[2 * s + 1], acc1,
                               pending=2)
            if it > 0:         # step it-1's MMAs retired: release its stage in both CTAs
                kit.mbarrier_arrive(empty[(it - 1) % STAGES], cta=0)
                kit.mbarrier_arrive(empty[(it - 1) % STAGES], cta=1)
            refill(a, b, ready, empty, A, B, pair, step, n_pairs, kk, it, m0, n0, m1, n1, M,
                   N, n_k, BM, BN, BK, STAGES, GROUP, TRANS_B, LAG, SPLIT_B)
            it += 1
        if SPLIT_B:
            store_tile(C, acc.to(C.dtype.element_ty), m0, n0, M, N, BM, BN, TMA_STORE)
        else:
            store_halves(C, acc, acc1, m0, n0, M, N, BM, BN, TMA_STORE)
    kit.cluster_barrier()              # no CTA leaves while its peer may still arrive on it


@kit.jit
def produce(a, b, ready, empty, A, B, M, N, n_k, n_pairs, first, step, BN: kit.constexpr,
            BM: kit.constexpr, BK: kit.constexpr, STAGES: kit.constexpr,
            GROUP: kit.constexpr, TRANS_B: kit.constexpr):
    """The producer warpgroup (WS): every k-step of this cluster's pairs, in order, into
    the ring, each stage once both CTAs' consumers released it."""
    g = 0
    for pair in range(first, n_pairs, step):
        m0, n0 = pair_origin(pair, M, N, BM, BN, GROUP)
        for kk in range(n_k):
            fill(a, b, ready, empty, A, B, m0, n0, kk * BK, g, BN, STAGES, TRANS_B, True)
            g += 1


@kit.jit
def matmul_cluster_ws_kernel(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr,
                             BK: kit.constexpr, STAGES: kit.constexpr, GROUP: kit.constexpr,
                             TRANS_B: kit.constexpr = False, TMA_STORE: kit.constexpr = True):
    """matmul_cluster_kernel warp-specialized: a producer warpgroup (few registers) waits
    for the cluster-wide releases and issues the copies, so the two consumer warpgroups
    (64 rows of the tile each) never wait for the peer CTA, only for data."""
    dt = A.dtype.element_ty
    a = kit.shared((STAGES, BM, BK), dt)
    b = kit.shared((STAGES, BN, BK) if TRANS_B else (STAGES, BK, BN), dt)
    ready = kit.mbarriers(STAGES)
    empty = kit.mbarriers(STAGES, arrivals=4)         # 2 consumer warpgroups x 2 CTAs
    n_k = kit.cdiv(K, BK)
    kit.assume(n_k > 0)
    n_pairs = kit.cdiv(M, 2 * BM) * kit.cdiv(N, BN)
    step = kit.num_programs(0) // 2
    first = kit.program_id(0) // 2
    kit.cluster_barrier()              # the peer's barriers exist before copies land in them
    if kit.warpgroup_id() == 0:
        kit.setmaxnreg(40)
        produce(a, b, ready, empty, A, B, M, N, n_k, n_pairs, first, step, BN, BM, BK,
                STAGES, GROUP, TRANS_B)
    else:
        kit.setmaxnreg(232)
        it = 0
        for pair in range(first, n_pairs, step):
            m0, n0 = pair_origin(pair, M, N, BM, BN, GROUP)
            acc = kit.zeros((BM, BN), kit.float32)
            for kk in range(n_k):
                s = it % STAGES
                kit.mbarrier_wait(ready[s], it // STAGES % 2)
                acc = kit.mma(a[s], b[s].T if TRANS_B else b[s], acc, pending=1)
                if kk > 0:     # MMA it-1 retired: release its stage in both CTAs
                    kit.mbarrier_arrive(empty[(it - 1) % STAGES], cta=0)
                    kit.mbarrier_arrive(empty[(it - 1) % STAGES], cta=1)
                it += 1
            out = acc.to(C.dtype.element_ty)          # waits for the last MMA
            kit.mbarrier_arrive(empty[(it - 1) % STAGES], cta=0)
            kit.mbarrier_arrive(empty[(it - 1) % STAGES], cta=1)
            store_tile(C, out, m0, n0, M, N, BM, BN, TMA_STORE)
    kit.cluster_barrier()              # no CTA leaves while its peer may still arrive on it


_SMS: dict = {}


def _clusters(device: torch.device) -> int:
    """Clusters in the persistent grid: one per two SMs (4 on the CPU)."""
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count // 2 \
            if torch.cuda.is_available() and device.type == "cuda" else 2
    return _SMS[device]


CONFIG = dict(BM=128, BN=256, BK=64, STAGES=4, GROUP=8, num_warps=8)


def gemm_dims(name: str, a: torch.Tensor, b: torch.Tensor, trans_b: bool) -> tuple:
    """(M, N, K) of a @ b (b [N, K] when trans_b), or a ValueError in `name`'s words."""
    M, K = a.shape
    N = b.shape[0] if trans_b else b.shape[1]
    if b.shape[1 if trans_b else 0] != K:
        raise ValueError(f"{name}: a is {tuple(a.shape)}, b {tuple(b.shape)}"
                         f"{' (transposed)' if trans_b else ''}: K differs")
    return M, N, K


def matmul_cluster(a: torch.Tensor, b: torch.Tensor, trans_b: bool = False,
                   clusters: int | None = None, ws: bool = False, **config) -> torch.Tensor:
    """a @ b (a @ b.T when trans_b: b is [N, K]) on 2-CTA clusters sharing B (sm_90a).
    `config`: BM, BN, BK, STAGES, GROUP, num_warps (default 128x256x64, 4 stages, pair-rows
    grouped by 8, 8 warps), LAG (default 1), SPLIT_B (default True), TMA_STORE (default:
    where C's rows are a multiple of 16 bytes); `clusters`: the persistent grid's clusters
    (default: half the SMs); `ws`: the warp-specialized kernel (a producer warpgroup and
    two consumers, 12 warps; LAG and SPLIT_B do not apply). A and B need rows of a multiple
    of 16 bytes (TMA)."""
    M, N, K = gemm_dims("matmul_cluster", a, b, trans_b)
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    if K == 0:
        return c.zero_()
    cfg = dict(CONFIG, **dict(dict(num_warps=12) if ws else {}, **config))
    cfg.setdefault("TMA_STORE", N * c.dtype.itemsize % 16 == 0)
    pairs = kit.cdiv(M, 2 * cfg["BM"]) * kit.cdiv(N, cfg["BN"])
    grid = (2 * min(pairs, clusters or _clusters(a.device)),)
    if ws:
        matmul_cluster_ws_kernel[grid](a, b, c, M, N, K, TRANS_B=trans_b, cluster=(2, 1, 1),
                                       **cfg)
    else:
        matmul_cluster_kernel[grid](a, b, c, M, N, K, WG=cfg["num_warps"] // 4,
                                    TRANS_B=trans_b, cluster=(2, 1, 1), **cfg)
    return c
