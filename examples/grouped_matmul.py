"""Grouped GEMM for mixture-of-experts: out[rows of expert e] = x[rows of e] @ w[e].T for every
expert in one persistent launch. x [T, K] holds the tokens sorted by expert, `offs` [E] the
end row of each expert's group (int32, cumulative: torch._grouped_mm's convention), w
[E, N, K] the experts' weights (nn.Linear layout). No host sync: the kernel reads the
offsets itself, so a launch fits in a CUDA graph whatever the routing.

The tiles of all experts form one list (expert by expert, each expert's tiles in matmul.py's
L2-friendly order) walked by a persistent grid with examples/matmul.py's TMA ring; a program
finds the expert of its next tile by moving a cursor forward over the offsets (its tiles come
in increasing order, so the cursor never goes back). A tile's A rows may run into the next
expert's tokens: the MMA computes them and the store drops them.

Two kernels walk that list. grouped_matmul_kernel: both warpgroups run WGMMA on 128-row
tiles and the CTA refills the ring between k-steps (matmul.py's kernel).
grouped_matmul_ws_kernel (the default, HALVES): a producer warpgroup issues the copies and
two consumer warpgroups each own 64 rows of the tile, so where an expert's last tile holds
<= 64 of its rows the second consumer only passes the stages back and the tile costs about
half (a 520-row expert: 4.5 tiles of work instead of 5). Configs at the bottom
(benchmarks/NOTES.md, session 11).
"""

import torch
from matmul import load_stage, num_sms, store_tile, tile_origin

import kitjit as kit
from kitjit.testing import bench, check, device, has_gpu


@kit.jit
def expert_of(tile, e, base, OFFS, E, N, BM: kit.constexpr, BN: kit.constexpr):
    """Move the cursor (expert e, whose first tile is `base`) forward to the expert holding
    `tile`; returns that expert, its first tile and its rows [start, end)."""
    start = kit.load(OFFS + e - 1, mask=e > 0, other=0)
    end = kit.load(OFFS + e)
    count = kit.cdiv(end - start, BM) * kit.cdiv(N, BN)
    while (tile >= base + count) & (e < E - 1):
        base += count
        e += 1
        start = end
        end = kit.load(OFFS + e)
        count = kit.cdiv(end - start, BM) * kit.cdiv(N, BN)
    return e, base, start, end


@kit.jit
def group_tile(tile, e, base, OFFS, E, N, BM: kit.constexpr, BN: kit.constexpr,
               BK: kit.constexpr, GROUP: kit.constexpr, BALANCE: kit.constexpr = False):
    """(cursor e, base, first row m0, B's row e * N + n0, n0, the expert's end row).
    BALANCE: the expert's row blocks in groups of even size (17 -> 6, 6, 5 instead of 8, 8,
    1: a group of one row block reads each of the expert's B tiles for one tile only)."""
    e, base, start, end = expert_of(tile, e, base, OFFS, E, N, BM, BN)
    group = GROUP
    if BALANCE:
        n_m = kit.cdiv(end - start, BM)
        group = kit.cdiv(n_m, kit.maximum(kit.cdiv(n_m, GROUP), 1))
    m0, n0, _ = tile_origin(tile - base, end - start, N, 1, BM, BN, BK, group, 1)
    return e, base, start + m0, e * N + n0, n0, end


@kit.jit
def count_tiles(OFFS, E, N, BM: kit.constexpr, BN: kit.constexpr, EP: kit.constexpr):
    """Tiles of all experts (every program counts them: EP >= E offsets at once)."""
    ex = kit.arange(0, EP)
    ends = kit.load(OFFS + ex, mask=ex < E, other=0)
    starts = kit.load(OFFS + ex - 1, mask=(ex > 0) & (ex < E), other=0)
    return kit.sum(kit.cdiv(ends - starts, BM), axis=0) * kit.cdiv(N, BN)


@kit.jit
def grouped_matmul_kernel(A, B, C, OFFS, E, N, K, BM: kit.constexpr, BN: kit.constexpr,
                          BK: kit.constexpr, STAGES: kit.constexpr, GROUP: kit.constexpr,
                          EP: kit.constexpr, TMA_STORE: kit.constexpr = 0,
                          BALANCE: kit.constexpr = False):
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)
    b = kit.shared((STAGES, BN, BK), B.dtype.element_ty)   # B is w viewed as [E * N, K]
    ready = kit.mbarriers(STAGES)
    n_k = kit.cdiv(K, BK)
    n_tiles = count_tiles(OFFS, E, N, BM, BN, EP)
    step, first = kit.num_programs(0), kit.program_id(0)
    for s in kit.static_range(STAGES - 1):                   # prologue, as in matmul.py
        t = first + s // n_k * step
        if t < n_tiles:
            _, _, m0, nb0, _, _ = group_tile(t, 0, 0, OFFS, E, N, BM, BN, BK, GROUP, BALANCE)
            load_stage(a, b, ready, A, B, m0, nb0, 0, s % n_k, s, BK, STAGES, True)
    it = 0
    e, base = 0, 0                                           # the cursor
    for tile in range(first, n_tiles, step):
        e, base, m0, nb0, n0, end = group_tile(tile, e, base, OFFS, E, N, BM, BN, BK, GROUP,
                                               BALANCE)
        _, _, m1, nb1, _, _ = group_tile(tile + step, e, base, OFFS, E, N, BM, BN, BK, GROUP,
                                         BALANCE)
        acc = kit.zeros((BM, BN), kit.float32)
        for kk in range(n_k):
            kit.mbarrier_wait(ready[it % STAGES], it // STAGES % 2)
            acc = kit.mma(a[it % STAGES], b[it % STAGES].T, acc, pending=1)
            j = kk + STAGES - 1        # refill, as matmul.py's refill, with expert tiles
            if j < n_k:
                load_stage(a, b, ready, A, B, m0, nb0, 0, j, it + STAGES - 1, BK, STAGES, True)
            elif j < 2 * n_k:
                if tile + step < n_tiles:
                    load_stage(a, b, ready, A, B, m1, nb1, 0, j - n_k, it + STAGES - 1, BK,
                               STAGES, True)
            elif tile + j // n_k * step < n_tiles:           # K shorter than the ring
                _, _, mj, nbj, _, _ = group_tile(tile + j // n_k * step, e, base, OFFS, E, N,
                                                 BM, BN, BK, GROUP, BALANCE)
                load_stage(a, b, ready, A, B, mj, nbj, 0, j % n_k, it + STAGES - 1, BK,
                           STAGES, True)
            it += 1
        if TMA_STORE and m0 + BM <= end:   # a whole tile of this expert: through the TMA
            store_tile(C, acc, m0, n0, end, N, BM, BN, TMA_STORE)   # (drains under the next
        else:                              # tile's MMAs); its last tile: only its own rows
            store_tile(C, acc, m0, n0, end, N, BM, BN, 0)


@kit.jit
def produce(a, b, ready, empty, A, B, OFFS, E, N, n_k, n_tiles, first, step,
            BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr, STAGES: kit.constexpr,
            GROUP: kit.constexpr, BALANCE: kit.constexpr):
    """The producer warpgroup (HALVES): every k-step of this program's tiles into the ring,
    a stage once both consumers released it; A as two 64-row halves, one per consumer."""
    g = 0
    e, base = 0, 0
    for tile in range(first, n_tiles, step):
        e, base, m0, nb0, _, _ = group_tile(tile, e, base, OFFS, E, N, BM, BN, BK, GROUP, BALANCE)
        for kk in range(n_k):
            s = g % STAGES
            kit.mbarrier_wait(empty[s], g // STAGES % 2 ^ 1)   # a fresh barrier passes 1
            kit.tma_load(a[2 * s], A, (m0, kk * BK), ready[s], sync=False)
            kit.tma_load(a[2 * s + 1], A, (m0 + BM // 2, kk * BK), ready[s], sync=False)
            kit.tma_load(b[s], B, (nb0, kk * BK), ready[s], sync=False)
            g += 1


@kit.jit
def consume(a, b, ready, empty, C, OFFS, T, E, N, n_k, n_tiles, first, step,
            HALF: kit.constexpr, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
            STAGES: kit.constexpr, GROUP: kit.constexpr, TMA_STORE: kit.constexpr,
            BALANCE: kit.constexpr):
    """Consumer warpgroup HALF (HALVES): rows [HALF * BM/2, (HALF+1) * BM/2) of each tile.
    Where none of them belong to the tile's expert (the expert's last tile holds <= BM/2
    rows) it only takes the stages and gives them back: the other consumer's MMAs then have
    the tensor cores to themselves and the tile costs about half."""
    it = 0
    e, base = 0, 0
    H: kit.constexpr = BM // 2
    for tile in range(first, n_tiles, step):
        e, base, m0, _, n0, end = group_tile(tile, e, base, OFFS, E, N, BM, BN, BK, GROUP, BALANCE)
        m0 += HALF * H
        if m0 < end:
            acc = kit.zeros((H, BN), kit.float32)
            for kk in range(n_k):
                s = it % STAGES
                kit.mbarrier_wait(ready[s], it // STAGES % 2)
                acc = kit.mma(a[2 * s + HALF], b[s].T, acc, pending=1)
                if kk > 0:     # MMA it-1 retired: its stage is free
                    kit.mbarrier_arrive(empty[(it - 1) % STAGES])
                it += 1
            out = acc.to(C.dtype.element_ty)          # waits for the last MMA
            kit.mbarrier_arrive(empty[(it - 1) % STAGES])
            if TMA_STORE:
                # both stores run on every tile (a branch between them made ptxas serialize
                # the WGMMAs, C7514): a whole half goes through the TMA, a partial one from
                # the registers; the other is a no-op (a TMA box from row T, past C's end,
                # is dropped; the register store's mask is empty)
                whole = m0 + H <= end
                store_tile(C, out, kit.where(whole, m0, T), n0, end, N, H, BN, TMA_STORE)
                store_tile(C, out, m0, n0, kit.where(whole, m0, end), N, H, BN, 0)
            else:
                store_tile(C, out, m0, n0, end, N, H, BN, 0)
        else:
            for _ in range(n_k):
                kit.mbarrier_wait(ready[it % STAGES], it // STAGES % 2)
                kit.mbarrier_arrive(empty[it % STAGES])
                it += 1


@kit.jit
def grouped_matmul_ws_kernel(A, B, C, OFFS, T, E, N, K, BM: kit.constexpr, BN: kit.constexpr,
                             BK: kit.constexpr, STAGES: kit.constexpr, GROUP: kit.constexpr,
                             EP: kit.constexpr, TMA_STORE: kit.constexpr = 0,
                          BALANCE: kit.constexpr = False):
    """The HALVES kernel: the same tile list as grouped_matmul_kernel, warp-specialized
    (a producer warpgroup and two consumers of BM/2 rows each, 12 warps), so that an
    expert's last tile with <= BM/2 rows runs one consumer's MMAs only."""
    a = kit.shared((2 * STAGES, BM // 2, BK), A.dtype.element_ty)   # stage s: a[2s], a[2s+1]
    b = kit.shared((STAGES, BN, BK), B.dtype.element_ty)
    ready = kit.mbarriers(STAGES)
    empty = kit.mbarriers(STAGES, arrivals=2)                 # both consumers are done with s
    n_k = kit.cdiv(K, BK)
    kit.assume(n_k > 0)        # the k-loop runs: its MMAs stay in flight (ptxas C7514/5)
    step, first = kit.num_programs(0), kit.program_id(0)
    wg = kit.warpgroup_id()
    if wg == 0:                # (the tile count inside each role: 12 warps hold no tile)
        kit.setmaxnreg(40)
        n_tiles = count_tiles(OFFS, E, N, BM, BN, EP)
        produce(a, b, ready, empty, A, B, OFFS, E, N, n_k, n_tiles, first, step, BM, BN, BK,
                STAGES, GROUP, BALANCE)
    elif wg == 1:
        kit.setmaxnreg(232)
        n_tiles = count_tiles(OFFS, E, N, BM, BN, EP)
        consume(a, b, ready, empty, C, OFFS, T, E, N, n_k, n_tiles, first, step, 0, BM, BN,
                BK, STAGES, GROUP, TMA_STORE, BALANCE)
    else:
        kit.setmaxnreg(232)
        n_tiles = count_tiles(OFFS, E, N, BM, BN, EP)
        consume(a, b, ready, empty, C, OFFS, T, E, N, n_k, n_tiles, first, step, 1, BM, BN,
                BK, STAGES, GROUP, TMA_STORE, BALANCE)


# Tile configs, timed side by side by `benchmarks/gemm_family.py --only grouped` (NOTES,
# session 11). TMA_STORE=2: every whole tile (or 64-row half) of an expert stores C through
# the TMA in two column halves, a bulk copy that drains under the next tile's MMAs (as
# matmul.py's tma-halves); an expert's last, partial tile stores its own rows from the
# registers. LEGACY: the kernel before session 11 (register stores only).
LEGACY = dict(BM=128, BN=256, BK=64, STAGES=4, num_warps=8)
TMA = dict(LEGACY, TMA_STORE=2)        # 4 x 48 KB stages + a 32 KB staging tile: 226 KB
# 64-row tiles (one warpgroup): a 520-row expert costs 9 of them (576 rows) instead of 5
# 128-row tiles (640), but each k-step moves 40 KB per 64 rows instead of 48 KB per 128
BM64 = dict(BM=64, BN=256, BK=64, STAGES=5, num_warps=4, TMA_STORE=2)
# grouped_matmul_ws_kernel (a producer warpgroup + two 64-row consumers, 12 warps): the
# 128-row tiles of TMA, but an expert's last tile of <= 64 rows costs about half a tile;
# 4 x 48 KB stages + 2 x 16 KB staging tiles
HALVES = dict(LEGACY, TMA_STORE=2, HALVES=True, num_warps=12)
# the same on 128x128 tiles, 6 stages: twice the tiles to even out the last wave (4096 x
# 14336 at 8 x 512 tokens: 576 128x256 tiles are 4.36 waves of 132 SMs), a third more
# L2 -> shared traffic per flop
HALVES_N128 = dict(HALVES, BN=128, STAGES=6)


def default_config(T: int, E: int, N: int) -> dict:
    """The config grouped_mm runs with none given: LEGACY, the fastest on the H200 over the
    eight benchmark cases (2026-11-29, x the best torch path: LEGACY 0.964, TMA 0.944, BM64
    0.903, HALVES 0.892, HALVES_N128 0.736; benchmarks/NOTES.md, session 11 call 4). The host
    knows T and E, not the routing, so the choice cannot depend on the group sizes without a
    sync."""
    return dict(LEGACY)


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, **config) -> torch.Tensor:
    """out[offs[e-1]:offs[e]] = x[offs[e-1]:offs[e]] @ w[e].T for x [T, K] (bf16/fp16, K a
    multiple of 8), w [E, N, K], offs int32 [E] (cumulative ends, offs[-1] <= T; rows past
    it are left unwritten; K == 0: all zeros). No host sync. `config`: BM, BN, BK, STAGES,
    num_warps, TMA_STORE, HALVES, BALANCE (a config naming BM starts from LEGACY, else from
    default_config)."""
    T, K = x.shape
    E, N, K2 = w.shape
    if K2 != K or tuple(offs.shape) != (E,) or offs.dtype != torch.int32:
        raise ValueError(f"x [T, K], w [E, N, K], offs int32 [E]: got x {list(x.shape)}, w "
                         f"{list(w.shape)}, offs {offs.dtype} {list(offs.shape)}")
    c = torch.empty(T, N, device=x.device, dtype=x.dtype)
    if K == 0:            # (the kernels divide by the k-steps and assume there are some)
        return c.zero_()
    cfg = dict(LEGACY, **config) if "BM" in config else dict(default_config(T, E, N), **config)
    if cfg.get("TMA_STORE") and (N * x.element_size()) % 16:
        raise ValueError(f"grouped_mm: TMA_STORE needs rows of the output a multiple of 16 "
                         f"bytes, got N={N}")
    most = (kit.cdiv(T, cfg["BM"]) + E) * kit.cdiv(N, cfg["BN"])   # tiles, at most
    grid = (max(1, min(most, num_sms(x.device))),)
    ep = max(16, 1 << (E - 1).bit_length())
    if cfg.pop("HALVES", False):
        grouped_matmul_ws_kernel[grid](x, w.reshape(E * N, K), c, offs, T, E, N, K, GROUP=8,
                                       EP=ep, **cfg)
    else:
        grouped_matmul_kernel[grid](x, w.reshape(E * N, K), c, offs, E, N, K, GROUP=8, EP=ep,
                                    **cfg)
    return c


def reference(x, w, offs) -> torch.Tensor:
    """float64, one expert at a time; rows past offs[-1] are NaN (never written)."""
    out = torch.full((x.shape[0], w.shape[1]), float("nan"), dtype=torch.float64)
    start = 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end].double().cpu() @ w[e].double().cpu().T
        start = end
    return out


def routed(T: int, E: int, device, skew: bool = True, seed: int = 0) -> torch.Tensor:
    """Cumulative int32 ends of E groups over T tokens: uneven (some empty) when skewed."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(E, generator=g) ** (4 if skew else 0)
    counts = torch.bincount(torch.multinomial(p / p.sum(), T, True, generator=g), minlength=E)
    return counts.cumsum(0).to(torch.int32).to(device)


def main() -> None:
    dev = device()
    T, E, N, K = (1000, 8, 264, 200) if has_gpu() else (150, 5, 72, 96)
    small = {} if has_gpu() else dict(HALVES, BN=64, BK=32, STAGES=3)   # the default kernel
    x = torch.randn(T, K, device=dev, dtype=torch.bfloat16)
    w = torch.randn(E, N, K, device=dev, dtype=torch.bfloat16) / K ** 0.5
    offs = routed(T, E, dev)
    ref = reference(x, w, offs)
    err = check(grouped_mm(x, w, offs, **small), ref, 1e-2, "grouped_mm")
    print(f"grouped_mm T={T} E={E} N={N} K={K} (groups {offs.tolist()}): rel err {err:.2e} "
          f"({'GPU' if has_gpu() else 'interpreter'})")
    if has_gpu():
        T, E, N, K = 16384, 8, 14336, 4096
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16)
        offs = routed(T, E, "cuda")
        flop = 2 * T * N * K / 1e9
        ms = bench(lambda: grouped_mm(x, w, offs))
        print(f"  T={T} E={E} N={N} K={K}: kitjit {flop / ms:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
