"""bf16 GEMM for Ampere and Ada (sm_80 / sm_86 / sm_89): a ring of shared-memory stages that
`kit.tma_load` fills (cp.async by every thread there), `kit.mma` on ldmatrix + mma.sync with
64x64 warp tiles (16 ldmatrix.x4 for 64 mma.sync a 32-deep step), C = A @ B with fp32
accumulation.

No barrier between the MMAs and the refills. With STAGES stages the loads run PREFETCH =
STAGES / 2 steps ahead: the refill at step i overwrites the data of step i + PREFETCH -
STAGES <= i - PREFETCH. Every thread issued its piece of step i's copies right after its
own MMA of step i - PREFETCH, so a thread that has waited for step i's copies knows all
threads are past step i - PREFETCH: nobody still reads the stage it overwrites, and
`sync=False` drops the CTA barrier `kit.tma_load` would otherwise put first. (That argument
needs every thread to issue copies, as on Ampere; on Hopper one thread issues TMA, so there
it holds for one warpgroup only. examples/matmul.py is the Hopper GEMM.)

`persistent=True` (opt-in, not measured yet: benchmarks/NOTES.md) launches
`matmul_ampere_persistent_kernel` instead: one program per SM walks the tiles pid, pid +
programs, ..., and the ring runs across tile boundaries (the next tile's first copies fly
while this tile's last MMAs and its epilogue run; a 192 KB ring leaves room for one CTA per
SM, so a grid of one tile a program has nothing to hide each tile's ramp behind). The
argument above holds over the program's one stream of k-steps (`it` counts them over its
tiles); the epilogue stores from registers, so nothing else touches shared memory.

`NEXT_FRAGS` (opt-in, benchmarks/NOTES.md session 10) passes `next=` to `kit.mma`: step
i + 1's first k-slice loaded, after its wait, before step i's last MMAs (needs STAGES >= 4,
so that step i + 1's copies are issued before step i's MMAs). Measured on an H200 (sm_80
path, 4096³): default 447 TFLOP/s, NEXT_FRAGS 406, so it stays off.

`PEEL` (opt-in, benchmarks/NOTES.md session 11) runs the last STAGES/2 steps in a loop of
their own, so the main loop's copies need no `j < n_k` test: compiled with
backend/lower/ampere.py's `_COPIES_IN_LINE`, the copies then share a basic block with the
MMAs and ptxas issues them between the last HMMAs (benchmarks/ampere.py's "il" variants).

On an H100 the Ampere code path runs with `arch="sm_80"`.
"""

import torch

import kitjit as kit
from kitjit.testing import bench, check, device, has_gpu


@kit.jit
def matmul_ampere_kernel(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr,
                         BK: kit.constexpr, STAGES: kit.constexpr, GROUP: kit.constexpr,
                         NEXT_FRAGS: kit.constexpr = False, PEEL: kit.constexpr = False):
    pid = kit.program_id(0)
    n_m, n_n = kit.cdiv(M, BM), kit.cdiv(N, BN)
    first_m = pid // (GROUP * n_n) * GROUP           # GROUP row-blocks swept column by column
    rows = kit.minimum(n_m - first_m, GROUP)
    m0 = (first_m + pid % (GROUP * n_n) % rows) * BM
    n0 = pid % (GROUP * n_n) // rows * BN
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)
    b = kit.shared((STAGES, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(STAGES)
    n_k = kit.cdiv(K, BK)
    for s in kit.static_range(STAGES // 2):
        if s < n_k:
            kit.tma_load(a[s], A, (m0, s * BK), ready[s])
            kit.tma_load(b[s], B, (s * BK, n0), ready[s])
    acc = kit.zeros((BM, BN), kit.float32)
    if PEEL:   # the last STAGES/2 steps apart: the main loop's copies need no test
        for i in range(n_k - STAGES // 2):
            s, j = i % STAGES, i + STAGES // 2
            kit.mbarrier_wait(ready[s], i // STAGES % 2)
            acc = kit.mma(a[s], b[s], acc)
            kit.tma_load(a[j % STAGES], A, (m0, j * BK), ready[j % STAGES], sync=False)
            kit.tma_load(b[j % STAGES], B, (j * BK, n0), ready[j % STAGES], sync=False)
    for i in range(kit.maximum(n_k - STAGES // 2, 0) if PEEL else 0, n_k):
        s = i % STAGES
        kit.mbarrier_wait(ready[s], i // STAGES % 2)
        if NEXT_FRAGS:            # step i + 1's first fragments under step i's last MMAs
            s1 = (i + 1) % STAGES
            acc = kit.mma(a[s], b[s], acc,
                          next=(a[s1], b[s1], ready[s1], (i + 1) // STAGES % 2, i + 1 < n_k))
        else:
            acc = kit.mma(a[s], b[s], acc)
        j = i + STAGES // 2                           # past K, the copies read zeros
        if not PEEL and j < n_k:
            kit.tma_load(a[j % STAGES], A, (m0, j * BK), ready[j % STAGES], sync=False)
            kit.tma_load(b[j % STAGES], B, (j * BK, n0), ready[j % STAGES], sync=False)
    rm = m0 + kit.arange(0, BM)
    rn = n0 + kit.arange(0, BN)
    kit.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty),
              mask=(rm[:, None] < M) & (rn[None, :] < N))


@kit.jit
def tile_origin(tile, M, N, BM: kit.constexpr, BN: kit.constexpr, GROUP: kit.constexpr):
    n_m, n_n = kit.cdiv(M, BM), kit.cdiv(N, BN)      # as above: GROUP row-blocks of C
    first_m = tile // (GROUP * n_n) * GROUP           # swept column by column
    rows = kit.minimum(n_m - first_m, GROUP)
    return (first_m + tile % (GROUP * n_n) % rows) * BM, tile % (GROUP * n_n) // rows * BN


@kit.jit
def load_step(a, b, ready, A, B, m0, n0, kk, it, BK: kit.constexpr, STAGES: kit.constexpr):
    s = it % STAGES                                   # past K, the copies read zeros
    kit.tma_load(a[s], A, (m0, kk * BK), ready[s], sync=False)
    kit.tma_load(b[s], B, (kk * BK, n0), ready[s], sync=False)


@kit.jit
def matmul_ampere_persistent_kernel(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr,
                                    BK: kit.constexpr, STAGES: kit.constexpr,
                                    GROUP: kit.constexpr, COPY_ONLY: kit.constexpr = False):
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
    it = 0                                           # k-steps done by this program
    for tile in range(first, n_tiles, step):
        m0, n0 = tile_origin(tile, M, N, BM, BN, GROUP)
        m1, n1 = tile_origin(tile + step, M, N, BM, BN, GROUP)
        acc = kit.zeros((BM, BN), kit.float32)
        for kk in range(n_k):
            s = it % STAGES
            kit.mbarrier_wait(ready[s], it // STAGES % 2)
            if not COPY_ONLY:     # COPY_ONLY: no MMAs, C = 0 (benchmarks/ampere.py times
                acc = kit.mma(a[s], b[s], acc)       # what the copies alone could feed)
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


# The first that fits the GPU's shared memory per block (benchmarks/NOTES.md, H100 running
# this code path): 256x128x64 on 8 warps, 4 stages, 192 KB (an sm_90 part's 227 KB; A100s
# have 163 KB, Ada 99 KB); 128x128x32 on 4 warps, 6 stages, 96 KB (0.90-0.95x of it).
CONFIGS = [dict(BM=256, BN=128, BK=64, STAGES=4, num_warps=8),
           dict(BM=128, BN=128, BK=32, STAGES=6, num_warps=4)]
CONFIG = CONFIGS[1]   # what the CPU (interpreter) and the smallest parts take


def stage_bytes(cfg: dict) -> int:
    """Shared memory of a config's ring (bf16/fp16 tiles), barriers aside."""
    return cfg["STAGES"] * (cfg["BM"] + cfg["BN"]) * cfg["BK"] * 2


def pick_config(device: torch.device) -> dict:
    """The first of CONFIGS whose ring fits the device's shared memory per block."""
    if device.type != "cuda":
        return CONFIG
    from kitjit.runtime.driver import max_shared_memory

    idx = device.index if device.index is not None else torch.cuda.current_device()
    room = max_shared_memory(idx) - 1024   # barriers, alignment
    return next((c for c in CONFIGS if stage_bytes(c) <= room), CONFIG)


def persistent_programs(tiles: int, device: torch.device, ctas_per_sm: int = 1) -> int:
    """The persistent grid: `ctas_per_sm` programs per SM (CPU: 3, so that programs walk
    several tiles in the interpreter too)."""
    if device.type != "cuda":
        return min(tiles, 3)
    idx = device.index if device.index is not None else torch.cuda.current_device()
    return min(tiles, torch.cuda.get_device_properties(idx).multi_processor_count
               * ctas_per_sm)


def matmul(a: torch.Tensor, b: torch.Tensor, arch: str | None = None, persistent: bool = False,
           c: torch.Tensor | None = None, GROUP: int = 8, programs: int | None = None,
           **config) -> torch.Tensor:
    """a @ b for bf16/fp16 a [M, K], b [K, N] (rows 16-byte aligned). `arch`: the target
    (None: this GPU's; "sm_80" runs the Ampere code path on a Hopper too). `persistent`: the
    persistent kernel (opt-in), on `programs` programs (default: one per SM). `c`: the output
    (default: a new tensor)."""
    M, K = a.shape
    N = b.shape[1]
    cfg = dict(pick_config(a.device), **config)
    if cfg["STAGES"] < 2:
        raise ValueError("matmul_ampere: STAGES must be at least 2 (loads run STAGES/2 ahead)")
    if cfg.get("NEXT_FRAGS") and cfg.get("PEEL"):
        raise ValueError("matmul_ampere: PEEL's main loop has no NEXT_FRAGS form")
    if cfg.get("NEXT_FRAGS") and cfg["STAGES"] < 4:
        raise ValueError("matmul_ampere: NEXT_FRAGS waits for step i + 1 inside step i's "
                         "kit.mma: STAGES must be at least 4 (step i + 1 issued before it)")
    c = torch.empty(M, N, device=a.device, dtype=a.dtype) if c is None else c
    tiles = kit.cdiv(M, cfg["BM"]) * kit.cdiv(N, cfg["BN"])
    if persistent:
        grid = (min(tiles, programs) if programs else persistent_programs(tiles, a.device),)
        matmul_ampere_persistent_kernel[grid](a, b, c, M, N, K, GROUP=GROUP, arch=arch, **cfg)
    else:
        matmul_ampere_kernel[(tiles,)](a, b, c, M, N, K, GROUP=GROUP, arch=arch, **cfg)
    return c


def main() -> None:
    dev = device()
    arch = "sm_80" if has_gpu() else None
    for M, N, K in ((300, 264, 200), (128, 256, 96)):
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
        for persistent in (False, True):
            err = check(matmul(a, b, arch=arch, persistent=persistent), a.double() @ b.double(),
                        1e-2)
            print(f"matmul_ampere{' persistent' if persistent else ''} {M}x{N}x{K}: rel err "
                  f"{err:.2e} ({'GPU, ' + arch if has_gpu() else 'interpreter'})")
    if has_gpu():
        for n in (4096, 8192):
            a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in "ab")
            ms_k, ms_t = bench(lambda: matmul(a, b, arch=arch)), bench(lambda: a @ b)
            print(f"  {n}^3: kitjit ({arch}) {2 * n**3 / ms_k / 1e9:.0f} TFLOP/s, cuBLAS "
                  f"{2 * n**3 / ms_t / 1e9:.0f} TFLOP/s ({ms_t / ms_k:.2f}x)")


if __name__ == "__main__":
    main()
