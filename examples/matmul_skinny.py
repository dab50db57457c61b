"""Skinny bf16/fp16 GEMM on Hopper (decode, M = 1..128 tokens): C [M, N] = X [M, K] @ W^T,
the weights W given as [N, K] (nn.Linear's layout; trans_b) or as [K, N].

The time is the weights' stream from DRAM (8B qkv 16x6144x4096: 50 MB, ~11.5 us at the
H200's ~4.4 TB/s), so the kernel is built to keep every SM's copy engine busy:

- "swap AB": WGMMA's M side is 64 rows a warpgroup, but there are only M tokens, so the
  product is computed transposed, C^T = W X^T: BN rows of the weights are the MMA's rows
  (its A operand, straight from the TMA tile), the tokens padded to MP = 16..128 its N
  (the B operand: x's [MP, BK] tile through a K-major `.T` view; TMA reads rows past M as
  zeros). With W as [K, N] the weights' [BK, BN] tile is read through `.T` (an MN-major A,
  which WGMMA takes for 16-bit types).
- split-K over a 2-d grid (column block, part of K): the parts are chosen so that
  programs x k-steps spread over the SMs in nearly whole waves (skinny_config); each
  program keeps STAGES-1 copies in flight (~50-90 KB; less at MP 128), the weights' copies ask
  L2 for no promotion (l2_promotion=0: each weight byte is read once).
- the parts are added in the same launch: each program stores its fp32 partial [BN, MP]
  (L2-resident, a few hundred KB to a few MB in all), counts itself in on the column
  block's counter, and the last to arrive adds the parts in order (the sum does not depend
  on who was last), stores C and puts the counter back to 0 for the next launch."""

from __future__ import annotations

import torch

import kitjit as kit

try:
    from matmul import num_sms, tile_counters
except ModuleNotFoundError:   # imported as examples.matmul_skinny
    from examples.matmul import num_sms, tile_counters

BK = 64            # 128-byte rows of bf16/fp16: the 128-byte swizzle
MAX_M = 128        # WGMMA's N side (and the accumulators) stay small
MAX_SPLIT = 16


@kit.jit
def skinny_kernel(X, W, C, WS, CNT, M, N, K, n_k, MP: kit.constexpr, BN: kit.constexpr,
                  BK: kit.constexpr, STAGES: kit.constexpr, SPLIT: kit.constexpr,
                  TRANS_B: kit.constexpr, L2_W: kit.constexpr = 0, RCH: kit.constexpr = 16):
    xs = kit.shared((STAGES, MP, BK), X.dtype.element_ty)      # x's [MP, BK] tiles
    ws = kit.shared((STAGES, BN, BK) if TRANS_B else (STAGES, BK, BN), W.dtype.element_ty)
    ready = kit.mbarriers(STAGES)                              # stage s has landed
    kit.assume(n_k > 0)
    n0 = kit.program_id(0) * BN                                # this program's columns
    sp = kit.program_id(1)                                     # and part of K (n_k steps;
    k0 = sp * n_k * BK                                         # past K, TMA reads zeros)
    for s in kit.static_range(STAGES - 1):                     # fill the ring
        if s < n_k:
            kit.tma_load(xs[s], X, (0, k0 + s * BK), ready[s])
            kit.tma_load(ws[s], W, (n0, k0 + s * BK) if TRANS_B else (k0 + s * BK, n0),
                         ready[s], l2_promotion=L2_W)
    acc = kit.zeros((BN, MP), kit.float32)                     # C^T's [BN, MP] block
    for i in range(n_k):
        s = i % STAGES
        kit.mbarrier_wait(ready[s], i // STAGES % 2)
        w_op = ws[s] if TRANS_B else ws[s].T                   # [BN, BK]
        acc = kit.mma(w_op, xs[s].T, acc, pending=1)
        j = i + STAGES - 1     # refill the stage MMA i-1 read (done: one MMA pending)
        if j < n_k:
            s1 = j % STAGES
            kit.tma_load(xs[s1], X, (0, k0 + j * BK), ready[s1])
            kit.tma_load(ws[s1], W, (n0, k0 + j * BK) if TRANS_B else (k0 + j * BK, n0),
                         ready[s1], l2_promotion=L2_W)
    if SPLIT == 1:
        out = kit.trans(acc)                                   # [MP, BN]: C's orientation
        rm = kit.arange(0, MP)
        rn = n0 + kit.arange(0, BN)
        kit.store(C + rm[:, None] * N + rn[None, :], out.to(C.dtype.element_ty),
                  mask=(rm[:, None] < M) & (rn[None, :] < N))
    else:
        add_parts(C, WS + kit.program_id(0) * SPLIT * BN * MP, CNT + kit.program_id(0), acc,
                  sp, n0, M, N, MP, BN, SPLIT, RCH)


@kit.jit
def add_parts(C, Wt, cnt, acc, sp, n0, M, N, MP: kit.constexpr, BN: kit.constexpr,
              SPLIT: kit.constexpr, RCH: kit.constexpr):
    # the column block's parts, one launch: store this part's [BN, MP] accumulators as
    # they are (each thread's pairs along MP widen to 16-byte stores; the padded tokens are
    # TMA's zeros) to the block's region Wt, count in (acq_rel, GPU scope); the last adds
    # all parts in order, RCH tokens at a time (the loads of every part in flight, ~64
    # registers), turns the sum to C's [RCH, BN] orientation, and resets the counter
    rows = kit.arange(0, BN)               # weight rows: C's columns
    toks = kit.arange(0, MP)
    kit.store(Wt + sp * BN * MP + rows[:, None] * MP + toks[None, :], acc)
    kit.debug_barrier()                    # every thread's part is stored before the count
    if kit.atomic_add(cnt, 1) == SPLIT - 1:
        for r in range(0, kit.minimum(MP, M), RCH):
            tt = r + kit.arange(0, RCH)
            total = kit.zeros((BN, RCH), kit.float32)
            for p in kit.static_range(SPLIT):
                total += kit.load(Wt + p * BN * MP + rows[:, None] * MP + tt[None, :])
            kit.store(C + tt[:, None] * N + n0 + rows[None, :],
                      kit.trans(total).to(C.dtype.element_ty),
                      mask=(tt[:, None] < M) & (n0 + rows[None, :] < N))
        kit.store(cnt, 0)


def padded_m(M: int) -> int:
    """x's rows padded to WGMMA's N: 16, 32, 64 or 128."""
    return max(16, 1 << (M - 1).bit_length())


def skinny_config(M: int, N: int, K: int, sms: int, BN: int | None = None) -> dict:
    """BN, SPLIT, STAGES and the k-steps a part (n_k) for C [M, N], K deep on `sms` SMs.

    The cost of a split, in k-steps of the busiest SM: programs go out round-robin, so an
    SM streams ceil(programs / sms) of them (co-resident programs share its bandwidth),
    each its n_k k-steps plus ~1 for the ring's first round trip (overlapped by the other
    programs on the SM, but not wholly); splitting adds the combine's serial L2 round trips
    (~3 k-steps) and the partials' traffic (written and read once, spread over the SMs;
    a [128, 64] fp32 partial weighs 1.3 k-steps). The cheapest split wins, ties to the
    smaller. BN 64 (one warpgroup, <= ~120 registers a thread: three programs an SM)
    keeps the column blocks many (kit.graph's swapped kernel measured BN 128 split 8 at
    20.9 us against BN 64's 17.5 at 16x4096x6144); at MP 128, BN 128 (two warpgroups, ~90
    registers: two programs an SM), since every column block re-reads x's tiles from L2
    (1 MB at K 4096: with BN 64 twice the weights' bytes). The ring is as deep as leaves
    room for the programs an SM runs at once: >= ~50 KB in flight a program where it fits
    (Little's law at an SM's share of DRAM, ~33 GB/s x ~1 us)."""
    MP = padded_m(M)
    BN = BN or (128 if MP == 128 else 64)
    nbk = -(-K // BK)
    gn = -(-N // BN)
    stage = (MP + BN) * BK * 2
    part = MP * BN * 4 / stage               # a partial's bytes, in k-steps

    def cost(s: int) -> float:
        split = 3 + gn * s * 2 * part / sms if s > 1 else 0
        return -(-(gn * s) // sms) * (-(-nbk // s) + 1) + split

    splits = [s for s in range(1, MAX_SPLIT + 1)
              if s == 1 or (-(-nbk // s) >= 2 and (s - 1) * -(-nbk // s) < nbk)]
    split = min(splits, key=lambda s: (cost(s), s))
    n_k = -(-nbk // split)
    co = min(3 if BN == 64 else 2, -(-(gn * split) // sms))   # programs an SM runs at once
    stages = max(2, min(10, (208 * 1024 // co) // stage, n_k + 1))
    return dict(MP=MP, BN=BN, SPLIT=split, STAGES=stages, n_k=n_k,
                RCH=max(16, min(MP, 1 << (128 // split).bit_length() - 1)))


def supported(a: torch.Tensor, b: torch.Tensor, trans_b: bool) -> bool:
    """Whether TMA can read the operands as they are: 2-d, contiguous, 16-byte rows, one
    16-bit dtype, M <= 128 (else the caller takes the main kernel)."""
    M, K = a.shape
    N = b.shape[0] if trans_b else b.shape[1]
    return (a.dtype == b.dtype and a.dtype in (torch.bfloat16, torch.float16)
            and a.is_contiguous() and b.is_contiguous() and 1 <= M <= MAX_M and K > 0
            and K * 2 % 16 == 0 and (trans_b or N * 2 % 16 == 0))


def matmul_skinny(a: torch.Tensor, b: torch.Tensor, trans_b: bool = False,
                  l2_w: int = 0, **config) -> torch.Tensor:
    """a @ b (a @ b.T when trans_b: b is [N, K]) for M <= 128 rows of a; `config`
    overrides skinny_config's choice (BN, SPLIT, STAGES; num_warps follows BN)."""
    M, K = a.shape
    N = b.shape[0] if trans_b else b.shape[1]
    if not supported(a, b, trans_b):
        raise ValueError(f"matmul_skinny: {M}x{N}x{K} {a.dtype} (trans_b={trans_b}) is not "
                         "supported yet (M <= 128, contiguous 16-bit operands, 16-byte rows)")
    cfg = skinny_config(M, N, K, num_sms(a.device), config.get("BN"))
    cfg.update(config)
    if "SPLIT" in config and "n_k" not in config:
        cfg["n_k"] = kit.cdiv(kit.cdiv(K, BK), cfg["SPLIT"])
    MP, BN, SPLIT, n_k = cfg["MP"], cfg["BN"], cfg["SPLIT"], cfg["n_k"]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    gn = -(-N // BN)
    ws = torch.empty(gn * SPLIT * MP * BN if SPLIT > 1 else 1, device=a.device,
                     dtype=torch.float32)
    cnt = tile_counters(a.device, gn)
    skinny_kernel[(gn, SPLIT)](a, b, c, ws, cnt, M, N, K, n_k, MP=MP, BN=BN, BK=BK,
                               STAGES=cfg["STAGES"], SPLIT=SPLIT, TRANS_B=trans_b,
                               L2_W=l2_w, RCH=cfg.get("RCH", 16), num_warps=4 * BN // 64)
    return c
