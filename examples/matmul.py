"""bf16 GEMM on Hopper: TMA copies tiles of A and B into a ring of shared-memory stages,
each stage completing on its own mbarrier; both warpgroups run WGMMA on the stage that
arrived while the copies for later stages fly. The grid is persistent (one program per SM
walks the tiles), and the ring runs across tile boundaries, so the next tile's loads are in
flight while this tile's epilogue stores C. C = A @ B, fp32 accumulation."""

import torch

import kitjit as kit
from kitjit.testing import bench, check, device, has_gpu


@kit.jit
def tile_origin(tile, M, N, n_k, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
                GROUP: kit.constexpr, SPLIT_K: kit.constexpr, ROT=None):
    # L2-friendly order: GROUP row-blocks of C are swept column by column; with split-K,
    # the SPLIT_K parts of one tile's K range are neighbours (rows >= 1: the kernel asks
    # for the tile after its last too, and a remainder by 0 is undefined)
    t = tile // SPLIT_K
    n_m, n_n = kit.cdiv(M, BM), kit.cdiv(N, BN)
    first_m = t // (GROUP * n_n) * GROUP
    rows = kit.maximum(kit.minimum(n_m - first_m, GROUP), 1)
    m0 = (first_m + t % (GROUP * n_n) % rows) * BM
    if ROT is not None:    # GEMMs that communicate start at another rank's rows (matmul_comm)
        m0 = (m0 + ROT) % M
    return m0, t % (GROUP * n_n) // rows * BN, tile % SPLIT_K * n_k * BK


@kit.jit
def load_stage(a, b, ready, A, B, m0, n0, k0, kk, it, BK: kit.constexpr,
               STAGES: kit.constexpr, TRANS_B: kit.constexpr, b2=None, B2=None, GATE=None,
               CHUNK=1, OWN=0, EPOCH=0, A_OWN=None, L2_B: kit.constexpr = 256):
    s = it % STAGES
    k = k0 + kk * BK                                 # past K, TMA reads zeros
    if GATE is None:
        kit.tma_load(a[s], A, (m0, k), ready[s])     # both land on ready[s]: one arrival
    elif (m0 >= OWN * CHUNK) & (m0 < OWN * CHUNK + CHUNK):   # all-gather (matmul_comm):
        kit.tma_load(a[s], A_OWN, (m0 - OWN * CHUNK, k), ready[s])  # this rank's rows,
    else:                      # a peer's once they arrived
        if kk == 0:
            kit.signal_wait(GATE + m0 // CHUNK, EPOCH, cmp="ge")
        kit.tma_load(a[s], A, (m0, k), ready[s])
    kit.tma_load(b[s], B, (n0, k) if TRANS_B else (k, n0), ready[s], l2_promotion=L2_B)
    if B2 is not None:                               # a second B (SwiGLU's up projection)
        kit.tma_load(b2[s], B2, (n0, k) if TRANS_B else (k, n0), ready[s])


@kit.jit
def refill(a, b, ready, A, B, tile, step, n_tiles, kk, it, m0, n0, k0, m1, n1, k1, M, N, n_k,
           BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr, STAGES: kit.constexpr,
           GROUP: kit.constexpr, TRANS_B: kit.constexpr, SPLIT_K: kit.constexpr, b2=None,
           B2=None, GATE=None, CHUNK=1, OWN=0, EPOCH=0, ROT=None, A_OWN=None,
           L2_B: kit.constexpr = 256):
    j = kk + STAGES - 1        # refill the stage MMA it-1 freed, running into the next tile
    if j < n_k:                # (its origin m1, n1, k1) so its loads fly during this epilogue
        load_stage(a, b, ready, A, B, m0, n0, k0, j, it + STAGES - 1, BK, STAGES, TRANS_B,
                   b2, B2, GATE, CHUNK, OWN, EPOCH, A_OWN, L2_B)
    elif j < 2 * n_k:
        if tile + step < n_tiles:
            load_stage(a, b, ready, A, B, m1, n1, k1, j - n_k, it + STAGES - 1, BK, STAGES,
                       TRANS_B, b2, B2, GATE, CHUNK, OWN, EPOCH, A_OWN, L2_B)
    elif tile + j // n_k * step < n_tiles:           # K shorter than the ring
        mj, nj, kj = tile_origin(tile + j // n_k * step, M, N, n_k, BM, BN, BK, GROUP, SPLIT_K,
                                 ROT)
        load_stage(a, b, ready, A, B, mj, nj, kj, j % n_k, it + STAGES - 1, BK, STAGES,
                   TRANS_B, b2, B2, GATE, CHUNK, OWN, EPOCH, A_OWN, L2_B)


@kit.jit
def store_tile(C, acc, m0, n0, M, N, BM: kit.constexpr, BN: kit.constexpr,
               TMA_STORE: kit.constexpr):
    # TMA_STORE 0: straight from the accumulator registers (shuffled into 16-byte stores by
    # the compiler); 1: through a shared staging tile and one TMA bulk store, which drains
    # while the next tile's MMAs run; 2: the same in two column halves through one half-size
    # staging tile (a 128x256 tile's 32 KB leave room for a 4th ring stage)
    out = acc.to(C.dtype.element_ty)
    if TMA_STORE == 1:
        kit.tma_store(C, (m0, n0), out)
    elif TMA_STORE == 2:   # columns [0, BN/2) and [BN/2, BN): a relabeling of registers
        lo, hi = kit.split(kit.permute(kit.reshape(out, (BM, 2, BN // 2)), (0, 2, 1)))
        kit.tma_store(C, (m0, n0), lo)
        kit.tma_store(C, (m0, n0 + BN // 2), hi)   # waits until the TMA has read `lo`
    else:
        rm = m0 + kit.arange(0, BM)
        rn = n0 + kit.arange(0, BN)
        kit.store(C + rm[:, None] * N + rn[None, :], out,
                  mask=(rm[:, None] < M) & (rn[None, :] < N))


@kit.jit
def add_parts(C, Wt, LOCKS, acc, t, part, parts, m0, n0, M, N, BM: kit.constexpr,
              BN: kit.constexpr, MAX_PARTS: kit.constexpr):
    # a tile computed in `parts` parts (split-K), in one launch: each part writes
    # its fp32 partial (rows < M) to the tile's region Wt of the workspace and counts itself
    # in on the tile's counter t; the last to arrive adds the partials in part order (the sum
    # does not depend on who came last; the loads of all parts fly together), a few rows at
    # a time (few registers), stores C and resets the counter for the next launch
    rows = kit.arange(0, BM)
    cols = kit.arange(0, BN)
    kit.store(Wt + part * BM * BN + rows[:, None] * BN + cols[None, :], acc,
              mask=(m0 + rows[:, None] < M) & (cols[None, :] < BN))
    kit.debug_barrier()                    # every thread's part is written before the count
    if kit.atomic_add(LOCKS + t, 1) == parts - 1:     # acq_rel, GPU scope: the others'
        for r in range(0, kit.minimum(BM, M - m0), 4096 // BN):   # partials are visible
            rr = r + kit.arange(0, 4096 // BN)                       # past it
            mask = (m0 + rr[:, None] < M) & (n0 + cols[None, :] < N)
            total = kit.zeros((4096 // BN, BN), kit.float32)
            for s in kit.static_range(MAX_PARTS):
                total += kit.load(Wt + s * BM * BN + rr[:, None] * BN + cols[None, :],
                                  mask=mask & (s < parts), other=0.0)
            kit.store(C + (m0 + rr[:, None]) * N + n0 + cols[None, :],
                      total.to(C.dtype.element_ty), mask=mask)
        kit.store(LOCKS + t, 0)


@kit.jit
def store_slab(W, acc, tile, m0, n0, M, N, BM: kit.constexpr, BN: kit.constexpr,
               SPLIT_K: kit.constexpr):
    # split-K's other way: fp32 partials, one [M, N] slab per split, added by splitk_sum
    rm = m0 + kit.arange(0, BM)
    rn = n0 + kit.arange(0, BN)
    kit.store(W + (tile % SPLIT_K * M + rm[:, None]) * N + rn[None, :], acc,
              mask=(rm[:, None] < M) & (rn[None, :] < N))


@kit.jit
def splitk_sum(W, C, n, SPLIT_K: kit.constexpr, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    for s in kit.static_range(SPLIT_K):
        acc += kit.load(W + s * n + offs, mask=offs < n)
    kit.store(C + offs, acc.to(C.dtype.element_ty), mask=offs < n)


@kit.jit
def matmul_kernel(A, B, C, W, LOCKS, M, N, K, BM: kit.constexpr, BN: kit.constexpr,
                  BK: kit.constexpr, STAGES: kit.constexpr, GROUP: kit.constexpr,
                  TRANS_B: kit.constexpr = False, SPLIT_K: kit.constexpr = 1,
                  TMA_STORE: kit.constexpr = 0, SLABS: kit.constexpr = False,
                  L2_B: kit.constexpr = 256, OVERLAP: kit.constexpr = False):
    kit.static_assert(not OVERLAP or SPLIT_K == 1, "OVERLAP is not supported with split-K")
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)   # 128-byte swizzle, from the width
    # B is [K, N], or [N, K] when TRANS_B (then b[s].T is a K-major view for WGMMA)
    b = kit.shared((STAGES, BN, BK) if TRANS_B else (STAGES, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(STAGES)                            # stage s has landed
    n_k = kit.cdiv(kit.cdiv(K, BK), SPLIT_K)                 # k-steps per tile (and split)
    kit.assume(n_k > 0)        # no tile without MMAs: no path that zeroes the accumulator
    n_tiles = kit.cdiv(M, BM) * kit.cdiv(N, BN) * SPLIT_K
    step = kit.num_programs(0)                               # persistent: tiles pid, pid+step..
    first = kit.program_id(0)
    for s in kit.static_range(STAGES - 1):                   # prologue: fill the ring with
        t = first + s // n_k * step                          # this program's first k-steps
        if t < n_tiles:                                      # (several tiles when K is short)
            m0, n0, k0 = tile_origin(t, M, N, n_k, BM, BN, BK, GROUP, SPLIT_K)
            load_stage(a, b, ready, A, B, m0, n0, k0, s % n_k, s, BK, STAGES, TRANS_B,
                       L2_B=L2_B)
    it = 0                                                   # k-steps done by this program
    if OVERLAP:   # the last tile's C in 16-bit registers (at 128x256: 64 beside acc's 128)
        prev, pm, pn = kit.zeros((BM, BN), C.dtype.element_ty), 0, 0
    for tile in range(first, n_tiles, step):
        m0, n0, k0 = tile_origin(tile, M, N, n_k, BM, BN, BK, GROUP, SPLIT_K)
        m1, n1, k1 = tile_origin(tile + step, M, N, n_k, BM, BN, BK, GROUP, SPLIT_K)
        acc = kit.zeros((BM, BN), kit.float32)               # wgmma accumulator layout
        # OVERLAP: k-step 0 peeled; its WGMMAs run on the tensor cores (async, pending=1)
        # while the last tile's C goes out (staging stores, barriers, TMA store), instead of
        # the tensor cores idling between tiles
        if OVERLAP:
            kit.mbarrier_wait(ready[it % STAGES], it // STAGES % 2)
            bs = b[it % STAGES].T if TRANS_B else b[it % STAGES]
            acc = kit.mma(a[it % STAGES], bs, acc, pending=1)
            refill(a, b, ready, A, B, tile, step, n_tiles, 0, it, m0, n0, k0, m1, n1, k1, M,
                   N, n_k, BM, BN, BK, STAGES, GROUP, TRANS_B, SPLIT_K, L2_B=L2_B)
            it += 1
            if tile != first:
                store_tile(C, prev, pm, pn, M, N, BM, BN, TMA_STORE)
        for kk in range(1 if OVERLAP else 0, n_k):
            kit.mbarrier_wait(ready[it % STAGES], it // STAGES % 2)
            bs = b[it % STAGES].T if TRANS_B else b[it % STAGES]
            acc = kit.mma(a[it % STAGES], bs, acc, pending=1)
            refill(a, b, ready, A, B, tile, step, n_tiles, kk, it, m0, n0, k0, m1, n1, k1, M,
                   N, n_k, BM, BN, BK, STAGES, GROUP, TRANS_B, SPLIT_K, L2_B=L2_B)
            it += 1
        if OVERLAP:   # stored under the next tile's k-step 0 (or after the loop)
            prev, pm, pn = acc.to(C.dtype.element_ty), m0, n0
        elif SPLIT_K == 1:
            store_tile(C, acc, m0, n0, M, N, BM, BN, TMA_STORE)
        elif SLABS:
            store_slab(W, acc, tile, m0, n0, M, N, BM, BN, SPLIT_K)
        else:
            add_parts(C, W + tile // SPLIT_K * SPLIT_K * BM * BN, LOCKS, acc, tile // SPLIT_K,
                      tile % SPLIT_K, SPLIT_K, m0, n0, M, N, BM, BN, SPLIT_K)
    if OVERLAP:
        if first < n_tiles:                                  # this program's last tile
            store_tile(C, prev, pm, pn, M, N, BM, BN, TMA_STORE)


_SMS: dict = {}


def num_sms(device) -> int:
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count \
            if torch.cuda.is_available() and device.type == "cuda" else 4
    return _SMS[device]


# the tile shape that wins depends on the problem: kit.autotune times these once per (M, N,
# K, B's layout) and GPU and keeps the winner on disk (skinny M wants small BM and more
# programs; B [K, N] and B [N, K] are different kernels, and their winners differ)
CONFIGS = [kit.Config(dict(BM=128, BN=256, BK=64, STAGES=s), num_warps=8) for s in (3, 4)] + [
    kit.Config(dict(BM=128, BN=128, BK=64, STAGES=4), num_warps=8),
    kit.Config(dict(BM=64, BN=256, BK=64, STAGES=4), num_warps=4),
    kit.Config(dict(BM=64, BN=64, BK=64, STAGES=4), num_warps=4)]


def big_tiles_where_they_fill(configs, named_args, **kwargs):
    """Where 128x256 tiles fill the GPU (one wave or more, the SMs busy >= 90% of the waves),
    time only those: in steady runs they beat the smaller tiles at the large shapes, but the
    tuner's short bursts (a cool GPU) twice picked another config there (H100, 8192^3:
    641 vs 690 TFLOP/s; H200, 8192x8192x1024: 0.82 vs 0.94x cuBLAS)."""
    tiles = kit.cdiv(named_args["M"], 128) * kit.cdiv(named_args["N"], 256)
    sms = num_sms(named_args["A"].device)
    if tiles >= sms and tiles >= 0.9 * kit.cdiv(tiles, sms) * sms:
        return [c for c in configs if (c.kwargs["BM"], c.kwargs["BN"]) == (128, 256)]
    return configs


matmul_tuned = kit.autotune(CONFIGS, key=["M", "N", "K", "TRANS_B"],
                            prune_configs_by={"early_config_prune": big_tiles_where_they_fill}
                            )(matmul_kernel)
# where rows of C are a multiple of 16 bytes (TMA), the 128x256 tiles store C through the TMA
# in two halves (H100, one run: geomean 0.962 vs 0.937 of cuBLAS over the four large shapes
# with B [K, N], 1.000 vs 0.980 with B [N, K]; 8192x8192x1024 gains most, 5%)
CONFIGS_TMA = [kit.Config(dict(BM=128, BN=256, BK=64, STAGES=4, TMA_STORE=2), num_warps=8)] + \
    CONFIGS[2:]
matmul_tuned_tma = kit.autotune(CONFIGS_TMA, key=["M", "N", "K", "TRANS_B"],
                                prune_configs_by={"early_config_prune": big_tiles_where_they_fill}
                                )(matmul_kernel)


def tuned_kernel(N: int, dtype: torch.dtype):
    """The autotuned kernel for C [M, N] of this dtype (TMA stores need 16-byte rows)."""
    return matmul_tuned_tma if N * dtype.itemsize % 16 == 0 else matmul_tuned


# Ampere / Ada (and the sm_80 code path on a Hopper, arch="sm_80"): the same kernel on
# cp.async and mma.sync; 64x64 warp tiles, two CTAs of 4 warps per SM (grid 2 x SMs); BK 64
# halves the barriers per MMA (H100, sm_80 path: 400 / 338 TFLOP/s at 4096^3 / 8192^3
# against 324 / 326 with BK 32; examples/matmul_ampere.py drops those barriers altogether)
AMPERE_CONFIG = dict(BM=128, BN=128, BK=64, STAGES=3, num_warps=4)
AMPERE_CTAS_PER_SM = 2


# How split-K shapes add their parts (opt-in until GPU figures pick; the `split_mode`
# argument of matmul): None: the tile's last part adds them in the kernel (M <= 64) or fp32
# slabs and a second launch (larger M); "cluster": the parts of a tile run as one
# thread-block cluster and add in distributed shared memory; "cluster-a": the same, with
# neighbouring column blocks sharing A's tiles by TMA multicast (kitjit/nn/matmul_splitk.py)
SPLIT_MODE: str | None = None


def matmul(a: torch.Tensor, b: torch.Tensor, trans_b: bool = False, arch: str | None = None,
           split_mode: str | None = None, l2_b: int = 256, **config) -> torch.Tensor:
    """a @ b (a @ b.T when trans_b: b is [N, K]); with no config, the autotuned choice.
    `arch`: compile for this target ("sm_80": the Ampere code path, on any newer GPU too).
    `split_mode`: how the shapes that split K add their parts (see SPLIT_MODE).
    `l2_b`: the L2 promotion of B's TMA copies (0, 64, 128 or 256 bytes; a skinny GEMM
    streams its weights once from DRAM, where the decode kernel gained with 0).
    `OVERLAP=True` (with an explicit config) stores each tile's C while the next tile's first
    k-step runs (not with split-K).

    What a call decides (split, config, grid, split-K workspace and counters) is planned once
    per (device, stream, shapes, dtypes, options) and kept in `_PLANS`: a repeat call, new
    tensors or not, does one lookup and its launches (the skinny decode GEMMs are host-bound
    otherwise). Not while a CUDA graph is captured: then every call plans afresh, its
    workspace from the graph's pool, as before plans."""
    M, K = a.shape
    if b.dim() != 2:
        raise ValueError(f"matmul: b must be 2-d, got shape {tuple(b.shape)}")
    Kb, N = reversed(b.shape) if trans_b else b.shape
    if Kb != K:
        raise ValueError(f"matmul: a is {tuple(a.shape)} but b is {tuple(b.shape)}"
                         f"{' (trans_b)' if trans_b else ''}: their K differ")
    dev = a.device
    stream = _stream_key(dev)
    if stream is None:        # capturing a CUDA graph: no shared workspace, no cached plan
        return _plan(a, b, M, N, K, trans_b, arch, split_mode, l2_b, config, None)(a, b)
    key = (dev, stream, M, N, K, a.dtype, b.dtype, trans_b, arch, split_mode, l2_b,
           *config.items())
    try:
        plan = _PLANS.get(key)
    except TypeError:         # an unhashable config value: plan every call
        return _plan(a, b, M, N, K, trans_b, arch, split_mode, l2_b, config, None)(a, b)
    if plan is None:
        if len(_PLANS) >= _PLANS_MAX:   # (prefill's ever-new M): start over
            _PLANS.clear()
        plan = _PLANS[key] = _plan(a, b, M, N, K, trans_b, arch, split_mode, l2_b, config,
                                   stream)
    return plan(a, b)


# the decided launches of matmul, by (device, stream, M, N, K, dtypes, options); and the fp32
# split-K workspace of each (device, stream): launches on one stream run in order, so one
# buffer serves them all; two streams never share one (their launches could overlap)
_PLANS: dict = {}
_PLANS_MAX = 4096
_WORKSPACE: dict = {}


def _stream_key(dev: torch.device) -> int | None:
    """The current stream's handle on `dev` (0 off the GPU); None while it captures a graph
    (or when `dev` is not the current device, whose capture state is what torch tells)."""
    if dev.type != "cuda":
        return 0
    if dev.index != torch.cuda.current_device() or torch.cuda.is_current_stream_capturing():
        return None
    return torch._C._cuda_getCurrentRawStream(dev.index)


def workspace(dev: torch.device, stream: int | None, n: int):
    """A function returning n fp32 values of split-K workspace for launches on `stream`: a
    view of that (device, stream)'s buffer (grown when too small, which drops the stream's
    plans so they take the new one), or with no stream (graph capture) a fresh tensor."""
    if stream is None:
        return lambda: torch.empty(n, device=dev, dtype=torch.float32)
    buf = _WORKSPACE.get((dev, stream))
    if buf is None or buf.numel() < n:
        for key in [k for k in list(_PLANS) if k[:2] == (dev, stream)]:
            _PLANS.pop(key, None)
        buf = _WORKSPACE[dev, stream] = torch.empty(n, device=dev, dtype=torch.float32)
    view = buf[:n]
    return lambda: view


def _plan(a, b, M, N, K, trans_b, arch, split_mode, l2_b, config, stream):
    """Every decision and check of a matmul call of this key, made once: a function of
    (a, b) that allocates C and launches."""
    split_mode = split_mode or SPLIT_MODE
    if split_mode not in (None, "cluster", "cluster-a"):
        raise ValueError(f"matmul: split_mode {split_mode!r} is not one of None, 'cluster', "
                         "'cluster-a'")
    dev, dt = a.device, a.dtype
    sms = num_sms(dev)
    if split_mode and not config and arch is None and splitk_for(M, N, K, sms) > 1:
        from kitjit.nn.matmul_splitk import matmul_splitk_cluster
        kw = dict(share_a=split_mode == "cluster-a", **({} if l2_b == 256 else {"L2_B": l2_b}))
        return lambda a, b: matmul_splitk_cluster(a, b, trans_b, **kw)
    if K == 0:            # the kernel assumes every tile has k-steps (see kit.assume there)
        return lambda a, b: torch.zeros(M, N, device=dev, dtype=dt)
    if arch is not None:  # an explicit target: an explicit config (no autotuning)
        ampere = arch < "sm_90"
        config = dict(config or (AMPERE_CONFIG if ampere else CONFIGS[1].kwargs), arch=arch,
                      **({} if config or ampere else {"num_warps": CONFIGS[1].num_warps}))
        sms *= AMPERE_CTAS_PER_SM if ampere else 1
    split = config.get("SPLIT_K", 1) if config else splitk_for(M, N, K, sms)
    if config.get("OVERLAP") and (split > 1 or dt.itemsize != 2):
        raise ValueError("matmul: OVERLAP is not supported yet with split-K or 32-bit C (it "
                         "keeps a finished tile's 16-bit C in registers until the next tile)")
    if l2_b != 256 and arch is None:     # (the sm_80 path has no TMA copies)
        config = dict(config, L2_B=l2_b)

    def grid(meta):
        return (min(kit.cdiv(M, meta["BM"]) * kit.cdiv(N, meta["BN"]) * split, sms),)

    if split > 1:      # too few tiles to fill the GPU: split K, then add the partial sums
        cfg = config if "BM" in config else dict(
            config, BM=64 if M <= 64 else 128, BN=128, BK=64, STAGES=4,
            num_warps=4 if M <= 64 else 8, SLABS=M > 64)
        kw = dict(GROUP=8, TRANS_B=trans_b, **dict(cfg, SPLIT_K=split))
        g = grid(cfg)
        if cfg.get("SLABS"):   # in slabs, summed by a second launch
            ws, g_sum = workspace(dev, stream, split * M * N), (kit.cdiv(M * N, 1024),)

            def slabs(a, b):
                c, w = torch.empty(M, N, device=dev, dtype=dt), ws()
                matmul_kernel[g](a, b, c, w, c, M, N, K, **kw)
                splitk_sum[g_sum](w, c, M * N, SPLIT_K=split, BLOCK=1024)
                return c
            return slabs
        tiles = kit.cdiv(M, cfg["BM"]) * kit.cdiv(N, cfg["BN"])   # in the kernel
        if tiles * split * cfg["BM"] * cfg["BN"] >= 2 ** 31:       # (int32 offsets)
            raise ValueError("split-K in the kernel: the workspace would pass 2^31 values; "
                             "use SLABS=True")
        ws = workspace(dev, stream, tiles * split * cfg["BM"] * cfg["BN"])
        if stream is None:
            def counters():
                return tile_counters(dev, tiles)
        else:
            t = tile_counters(dev, tiles)

            def counters():
                return t

        def in_kernel(a, b):
            c = torch.empty(M, N, device=dev, dtype=dt)
            matmul_kernel[g](a, b, c, ws(), counters(), M, N, K, **kw)
            return c
        return in_kernel
    kw = dict(GROUP=8, TRANS_B=trans_b, **config)
    if "BM" in config:
        g = grid(config)

        def explicit(a, b):
            c = torch.empty(M, N, device=dev, dtype=dt)
            matmul_kernel[g](a, b, c, c, c, M, N, K, **kw)
            return c
        return explicit
    tuned = tuned_kernel(N, dt)

    def autotuned(a, b):
        c = torch.empty(M, N, device=dev, dtype=dt)
        tuned[grid](a, b, c, c, c, M, N, K, **kw)
        return c
    return autotuned


_COUNTERS: dict = {}


def tile_counters(device: torch.device, n: int) -> torch.Tensor:
    """int32 arrival counters for split-K, one per output tile, zero at every launch: each
    launch resets the ones it used, so one buffer serves every launch on a device and stream
    (launches on one stream run in order)."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    t = _COUNTERS.get((device, stream))
    if t is None or t.numel() < n:
        t = _COUNTERS[device, stream] = torch.zeros(max(n, 1024), dtype=torch.int32,
                                                    device=device)
    return t


def splitk_for(M: int, N: int, K: int, sms: int) -> int:
    """Parts to split K into when 128-wide tiles leave most SMs idle (skinny, LLM-decode
    shapes) and each part keeps at least 16 k-steps of 64. M <= 64 (64-row tiles): the
    tile's last split adds the parts in the kernel (one pass over at most 64 rows); larger M:
    slabs and a second launch, where the sum is spread over many programs (H100, same run,
    M = 16: 0.94-1.02x cuBLAS in the kernel against 0.90-1.01 with slabs; M = 128: 0.71-1.04
    against 0.81-1.05)."""
    tiles = kit.cdiv(M, 128) * kit.cdiv(N, 128)
    split = 1
    while tiles * split * 2 <= sms and K // (split * 2) >= 1024:
        split *= 2
    return split


def main() -> None:
    dev = device()
    shapes = [(256, 512, 192), (300, 264, 200)] if has_gpu() else [(128, 256, 128)]
    for M, N, K in shapes:
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
        err = check(matmul(a, b), a.double() @ b.double(), 1e-2)
        bt = b.t().contiguous()                              # B given as [N, K]
        check(matmul(a, bt, trans_b=True), a.double() @ b.double(), 1e-2, "a @ bt.T")
        print(f"matmul {M}x{N}x{K} bf16 (B and B transposed): rel err {err:.2e} "
              f"({'GPU' if has_gpu() else 'interpreter'})")
        # the Ampere code path (cp.async, mma.sync), which runs on any newer GPU too
        check(matmul(a, b, arch="sm_80"), a.double() @ b.double(), 1e-2, "sm_80 path")
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
