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

One kernel walks that list (matmul.py's: both warpgroups run WGMMA on 128-row tiles and the
CTA refills the ring between k-steps). A warp-specialized variant whose consumers own 64 rows
each (an expert's last tile of <= 64 rows at half cost) measured slower on an H200 (0.892x
the best torch path against 0.964x; benchmarks/NOTES.md, session 11 call 4) and was
removed. Configs at the bottom.
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

def default_config(T: int, E: int, N: int) -> dict:
    """The config grouped_mm runs with none given: LEGACY, the fastest on the H200 over the
    eight benchmark cases (2026-11-29, x the best torch path: LEGACY 0.964, TMA 0.944, BM64
    0.903; benchmarks/NOTES.md, session 11 call 4). The host
    knows T and E, not the routing, so the choice cannot depend on the group sizes without a
    sync."""
    return dict(LEGACY)


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, **config) -> torch.Tensor:
    """out[offs[e-1]:offs[e]] = x[offs[e-1]:offs[e]] @ w[e].T for x [T, K] (bf16/fp16, K a
    multiple of 8), w [E, N, K], offs int32 [E] (cumulative ends, offs[-1] <= T; rows past
    it are left unwritten; K == 0: all zeros). No host sync. `config`: BM, BN, BK, STAGES,
    num_warps, TMA_STORE, BALANCE (a config naming BM starts from LEGACY, else from
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
    grouped_matmul_kernel[grid](x, w.reshape(E * N, K), c, offs, E, N, K, GROUP=8, EP=ep, **cfg)
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
    small = {} if has_gpu() else dict(BN=64, BK=32, STAGES=3)   # interpreter-sized tiles
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
