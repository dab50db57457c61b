"""fp8 GEMM on Hopper: C = (A * scale_a) @ (B * scale_b).T with A [M, K] and B [N, K] in
float8_e4m3fn or float8_e5m2, fp32 accumulation, C in bf16, fp16 or fp32.

The pipeline is examples/matmul.py's (persistent grid, a TMA ring that runs across tiles,
two warpgroups on WGMMA); what fp8 changes on the hardware:
- fp8 WGMMA (QGMMA in SASS) has no transpose bits: both tiles must be K-major in shared
  memory, so B comes as [N, K] (a weight stored out_features x in_features already is) and
  the MMA reads `b[s].T`;
- one instruction reads 32 bytes of K per row (m64nNk32), and a K tile of 128 fp8 values is
  one 128-byte swizzle span: BK = 128 moves as many bytes per stage as bf16's BK = 64.

Scales (dequantization factors, as torch._scaled_mm takes them), picked by their shapes:
- per tensor: two fp32 scalars, applied once to the accumulator in the epilogue;
- per row of A / per column of B ([M] and [N]): also in the epilogue;
- DeepSeek-V3 blocks: scale_a [M, K/128] (1x128: per row, per K-block), scale_b
  [N/128, K/128] (128x128). They change within the K sum, so each K-block's MMA goes into a
  fresh fp32 partial that is scaled and added to the accumulator ("promotion": this also
  bounds the error of the tensor cores' reduced-precision fp8 accumulation to one block).
"""

import torch
from matmul import load_stage, num_sms, refill, store_tile, tile_origin

import kitjit as kit
from kitjit.testing import bench, check, device, has_gpu


@kit.jit
def matmul_fp8_kernel(A, B, C, SA, SB, M, N, K, BM: kit.constexpr, BN: kit.constexpr,
                      BK: kit.constexpr, STAGES: kit.constexpr, GROUP: kit.constexpr,
                      SCALE: kit.constexpr, TMA_STORE: kit.constexpr = False,
                      OVERLAP: kit.constexpr = False):
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)   # [BM, 128] fp8: 128-byte swizzle
    b = kit.shared((STAGES, BN, BK), B.dtype.element_ty)   # [N, K]: K-major, as QGMMA needs
    ready = kit.mbarriers(STAGES)
    n_k = kit.cdiv(K, BK)
    n_tiles = kit.cdiv(M, BM) * kit.cdiv(N, BN)
    step, first = kit.num_programs(0), kit.program_id(0)
    for s in kit.static_range(STAGES - 1):                   # prologue, as in matmul.py
        t = first + s // n_k * step
        if t < n_tiles:
            m0, n0, k0 = tile_origin(t, M, N, n_k, BM, BN, BK, GROUP, 1)
            load_stage(a, b, ready, A, B, m0, n0, k0, s % n_k, s, BK, STAGES, True)
    it = 0
    if OVERLAP:        # the last tile's C and origin, stored under this tile's first MMAs
        prev, pm, pn = kit.zeros((BM, BN), C.dtype.element_ty), 0, 0
    for tile in range(first, n_tiles, step):
        m0, n0, k0 = tile_origin(tile, M, N, n_k, BM, BN, BK, GROUP, 1)
        m1, n1, k1 = tile_origin(tile + step, M, N, n_k, BM, BN, BK, GROUP, 1)
        rm = m0 + kit.arange(0, BM)
        rn = n0 + kit.arange(0, BN)
        acc = kit.zeros((BM, BN), kit.float32)
        part = kit.zeros((BM, BN), kit.float32)      # block scales: the last K-block's sum
        s_part = kit.zeros((BM,), kit.float32)       # and its scales
        if OVERLAP:    # k-step 0 peeled: the tensor cores run it while the registers of the
            kit.mbarrier_wait(ready[it % STAGES], it // STAGES % 2)   # last tile's C go out
            acc = kit.mma(a[it % STAGES], b[it % STAGES].T, acc, pending=1)
            refill(a, b, ready, A, B, tile, step, n_tiles, 0, it, m0, n0, k0, m1, n1, k1, M,
                   N, n_k, BM, BN, BK, STAGES, GROUP, True, 1)
            it += 1
            if tile != first:
                store_tile(C, prev, pm, pn, M, N, BM, BN, TMA_STORE)
        for kk in range(1 if OVERLAP else 0, n_k):
            if SCALE == "block":       # this K-block's scales (BN <= 128: one B block)
                s_new = kit.load(SA + rm * n_k + kk, mask=rm < M, other=0.0) * \
                    kit.load(SB + n0 // 128 * n_k + kk)
            kit.mbarrier_wait(ready[it % STAGES], it // STAGES % 2)
            if SCALE == "block":       # promotion: each K-block into a fresh partial; the
                new = kit.mma(a[it % STAGES], b[it % STAGES].T,       # previous one is
                              kit.zeros((BM, BN), kit.float32), pending=1)   # scaled and
                acc += part * s_part[:, None]      # added while this one runs (pending=1)
                part, s_part = new, s_new
            else:
                acc = kit.mma(a[it % STAGES], b[it % STAGES].T, acc, pending=1)
            refill(a, b, ready, A, B, tile, step, n_tiles, kk, it, m0, n0, k0, m1, n1, k1, M,
                   N, n_k, BM, BN, BK, STAGES, GROUP, True, 1)
            it += 1
        if SCALE == "block":
            acc += part * s_part[:, None]
        elif SCALE == "tensor":
            acc = acc * (kit.load(SA) * kit.load(SB))
        elif SCALE == "row":
            acc = acc * kit.load(SA + rm, mask=rm < M, other=0.0)[:, None] \
                * kit.load(SB + rn, mask=rn < N, other=0.0)[None, :]
        if OVERLAP:     # kept in registers (16-bit: half the accumulator's) until the
            prev, pm, pn = acc.to(C.dtype.element_ty), m0, n0      # next tile's k-step 0
        elif TMA_STORE:  # through a staging tile: the bulk copy drains under the next tile
            store_tile(C, acc, m0, n0, M, N, BM, BN, TMA_STORE)   # (2: in two halves)
        else:
            mask = (rm[:, None] < M) & (rn[None, :] < N)
            kit.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=mask)
    if OVERLAP:
        if first < n_tiles:                           # this program's last tile
            store_tile(C, prev, pm, pn, M, N, BM, BN, TMA_STORE)


FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
# A stage is a 128x128 A tile and a 256x128 B tile (48 KB). The epilogue goes through a TMA
# store that drains under the next tile's MMAs, in two column halves through one 32 KB staging
# tile, so that 4 stages fit beside it (H100, same run: 0.990 of cuBLAS fp8 fast-accum over the
# four large shapes, against 0.966 for the whole tile's 64 KB staging and 3 stages; session 4:
# direct stores 0.962). Direct stores and 4 stages where the staging
# tile does not fit (fp32 C: 128 KB) or rows of C are not a multiple of 16 bytes, and for
# per-row scales (measured: the scale vectors' registers make the TMA-store variant no
# faster there). Block scales keep two accumulators (the sum and the last K-block's partial):
# 128x128 tiles. OVERLAP keeps a finished tile's C in 16-bit registers and stores it while the
# next tile's first k-step runs (H200, 2026-11-29: 1.024x fast-accum cuBLAS over the four
# shapes, against 0.96-0.97 without; +4-13% where K is short and the epilogue weighs most).
DEFAULT = dict(BM=128, BN=256, BK=128, STAGES=4, TMA_STORE=2, OVERLAP=True, num_warps=8)
DEFAULT_DIRECT = dict(DEFAULT, TMA_STORE=False, OVERLAP=False)
DEFAULT_BLOCK = dict(BM=128, BN=128, BK=128, STAGES=6, num_warps=8)


# Per-tensor scales into 16-bit C with 16-byte rows: kit.autotune times these on the first call
# per (M, N, K, scaling, dtypes) key and GPU and keeps the winner on disk, as examples/matmul.py
# does. Each won a shape in one H200 run (TFLOP/s at 4096^3 / 8192^3 / 8192x8192x1024 /
# 16384x1024x4096: 1378 / 1308 / 1104 / 1298 for the best of them), but by 1-2%, within what
# the same config moved between two columns of that run: expect little from the choice itself.
# OVERLAP won at every shape (benchmarks/fp8_overlap.py, H200 2026-11-29: 1331 / 1289 / 1139 /
# 1352 against 1298 / 1306 / 1063 / 1199 without), so it leads the list.
CONFIGS = [kit.Config(c, num_warps=8) for c in (
    dict(BM=128, BN=256, BK=128, STAGES=4, TMA_STORE=2, OVERLAP=True),   # DEFAULT
    dict(BM=128, BN=256, BK=128, STAGES=4, TMA_STORE=2),    # the same, C stored after
    dict(BM=128, BN=256, BK=128, STAGES=3, TMA_STORE=1),    # whole-tile staging, 3 stages
    dict(BM=256, BN=128, BK=128, STAGES=4, TMA_STORE=2))]   # the tile transposed


def waves_of_work(M: int, N: int, BM: int, BN: int, sms: int) -> int:
    """Elements of C one SM computes in this tile shape: whole waves of whole tiles (what the
    padding past M, N and the last wave's idle SMs cost)."""
    return kit.cdiv(kit.cdiv(M, BM) * kit.cdiv(N, BN), sms) * BM * BN


def least_waste(configs, named_args, **kwargs):
    """Time only the tile shapes whose padding and last wave waste least (within 2%), in the
    list's order: the first is the heuristic's pick, which the interpreter takes untimed."""
    M, N = named_args["M"], named_args["N"]
    sms = num_sms(named_args["A"].device)
    work = [waves_of_work(M, N, c.kwargs["BM"], c.kwargs["BN"], sms) for c in configs]
    return [c for c, w in zip(configs, work) if w <= 1.02 * min(work)]


matmul_fp8_tuned = kit.autotune(CONFIGS, key=["M", "N", "K", "SCALE"],
                                prune_configs_by={"early_config_prune": least_waste}
                                )(matmul_fp8_kernel)


def default_config(mode: str, N: int, out_dtype: torch.dtype) -> dict:
    if mode == "block":
        return DEFAULT_BLOCK
    tma = mode == "tensor" and out_dtype.itemsize == 2 and (N * 2) % 16 == 0
    return DEFAULT if tma else DEFAULT_DIRECT


def scale_mode(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor):
    """('tensor' | 'row' | 'block', sa, sb as the kernel reads them) from the scales' shapes."""
    M, K = a.shape
    N = b.shape[0]
    kb, nb = kit.cdiv(K, 128), kit.cdiv(N, 128)
    if sa.numel() == 1 and sb.numel() == 1:
        return "tensor", sa.float().reshape(1), sb.float().reshape(1)
    if tuple(sa.shape) == (M, kb) and tuple(sb.shape) == (nb, kb):
        return "block", sa.float().contiguous(), sb.float().contiguous()
    sa = sa.float().reshape(-1).expand(M).contiguous() if sa.numel() in (1, M) else None
    sb = sb.float().reshape(-1).expand(N).contiguous() if sb.numel() in (1, N) else None
    if sa is None or sb is None:
        raise ValueError("scales are per tensor (one value), per row of A / column of B "
                         "([M], [N]), or 1x128 / 128x128 blocks ([M, K/128], [N/128, K/128])")
    return "row", sa, sb


def matmul_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
               scale_b: torch.Tensor, out_dtype: torch.dtype = torch.bfloat16,
               tune: bool = True, **config) -> torch.Tensor:
    """(a * scale_a) @ (b * scale_b).T for fp8 a [M, K] and b [N, K] (K a multiple of 16:
    TMA rows are 16-byte aligned), fp32 accumulation, out_dtype bf16/fp16/fp32. With no
    config, per-tensor scales and TMA-storable C, the tile config is tuned per shape
    (CONFIGS; `tune=False`: the untimed heuristic pick); otherwise `default_config`.
    `OVERLAP=True` stores each tile's C under the next tile's first MMAs (not block scales)."""
    if a.dtype not in FP8 or b.dtype not in FP8:
        raise TypeError(f"matmul_fp8 takes float8_e4m3fn / float8_e5m2, got {a.dtype}, "
                        f"{b.dtype}")
    M, K = a.shape
    N = b.shape[0]
    if b.shape[1] != K or K % 16:
        raise ValueError(f"a is {list(a.shape)}, b must be [N, {K}] with K % 16 == 0, got "
                         f"{list(b.shape)}")
    mode, sa, sb = scale_mode(a, b, scale_a, scale_b)
    c = torch.empty(M, N, device=a.device, dtype=out_dtype)
    if K == 0:     # the kernel's ring assumes k-steps (the prologue divides by their count)
        return c.zero_()
    sms = num_sms(a.device)
    if not config and default_config(mode, N, out_dtype) is DEFAULT:
        if tune:
            def grid(meta):
                return (min(kit.cdiv(M, meta["BM"]) * kit.cdiv(N, meta["BN"]), sms),)
            matmul_fp8_tuned[grid](a, b, c, sa, sb, M, N, K, GROUP=8, SCALE=mode)
            return c
        config = dict(least_waste(CONFIGS, dict(M=M, N=N, A=a))[0].all_kwargs())
    cfg = dict(default_config(mode, N, out_dtype), **config)
    if cfg.get("OVERLAP") and (mode == "block" or out_dtype.itemsize != 2):
        raise ValueError("OVERLAP is not supported yet with block scales or fp32 C (a second "
                         "accumulator-sized tile of registers for the last tile's C)")
    if mode == "block" and (cfg["BK"] != 128 or 128 % cfg["BN"]):
        raise ValueError("block scales need BK=128 (one K-block of scales per stage) and BN "
                         "dividing 128 (one block of B's scales per tile)")
    if cfg.get("TMA_STORE") and (N * out_dtype.itemsize) % 16:
        raise ValueError("TMA_STORE needs rows of C a multiple of 16 bytes")
    grid = (min(kit.cdiv(M, cfg["BM"]) * kit.cdiv(N, cfg["BN"]), sms),)
    matmul_fp8_kernel[grid](a, b, c, sa, sb, M, N, K, GROUP=8, SCALE=mode, **cfg)
    return c


def reference(a, b, scale_a, scale_b) -> torch.Tensor:
    """float64 (a * scale_a) @ (b * scale_b).T, the block scales expanded."""
    M, K = a.shape
    N = b.shape[0]
    mode, sa, sb = scale_mode(a, b, scale_a, scale_b)
    sa, sb = sa.double(), sb.double()
    if mode == "block":
        sa = sa.repeat_interleave(128, 1)[:, :K]
        sb = sb.repeat_interleave(128, 0).repeat_interleave(128, 1)[:N, :K]
    elif mode == "row":
        sa, sb = sa[:, None], sb[:, None]
    return (a.double() * sa) @ (b.double() * sb).T


def main() -> None:
    dev = device()
    M, N, K = (300, 264, 400) if has_gpu() else (100, 72, 160)
    cfg = {} if has_gpu() else dict(BM=64, BN=64, num_warps=4, STAGES=3)
    a = (torch.randn(M, K, device=dev) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, device=dev) * 4).to(torch.float8_e4m3fn)
    scales = {"tensor": (torch.tensor(0.5, device=dev), torch.tensor(0.25, device=dev)),
              "row": (torch.rand(M, device=dev) + 0.5, torch.rand(N, device=dev) + 0.5),
              "block": (torch.rand(M, kit.cdiv(K, 128), device=dev) + 0.5,
                        torch.rand(kit.cdiv(N, 128), kit.cdiv(K, 128), device=dev) + 0.5)}
    for mode, (sa, sb) in scales.items():
        err = check(matmul_fp8(a, b, sa, sb, **cfg), reference(a, b, sa, sb), 1e-2, mode)
        print(f"matmul_fp8 {M}x{N}x{K} e4m3, {mode} scales: rel err {err:.2e} "
              f"({'GPU' if has_gpu() else 'interpreter'})")
    if has_gpu():
        for M, N, K in ((4096, 4096, 4096), (8192, 8192, 8192)):
            a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
            b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
            one = torch.tensor(1.0, device="cuda")
            flop = 2 * M * N * K / 1e9
            ms_k = bench(lambda: matmul_fp8(a, b, one, one))
            ms_t = bench(lambda: torch._scaled_mm(a, b.T, one, one, out_dtype=torch.bfloat16,
                                                  use_fast_accum=True))
            print(f"  {M}x{N}x{K}: kitjit {flop / ms_k:.0f} TFLOP/s, torch._scaled_mm "
                  f"{flop / ms_t:.0f} TFLOP/s ({ms_t / ms_k:.2f}x)")


if __name__ == "__main__":
    main()
