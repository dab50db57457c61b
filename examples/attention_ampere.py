"""FlashAttention-2 forward for Ampere and Ada (A100, A10, L4, L40S, RTX 30/40: sm_80 / sm_86 /
sm_89), in kitjit's level 2.

The same calls as the Hopper kernels (kitjit/nn/attention.py): Q, K and V go to shared tiles
with `kit.tma_load`, and S = Q Kᵀ and O += P V run on `kit.mma`. Below sm_90 the compiler
makes those copies `cp.async` by every thread (completing on the same mbarriers) and the
MMAs `ldmatrix` + `mma.sync.m16n8k16`, with the accumulator split over the warps by rows
(each warp owns 32 query rows, so the softmax never leaves the warp) and P kept in
registers. K's stage is refilled right after S = Q Kᵀ and V's after P V, as FA2 does, so
with one stage (64 KB of shared memory at D = 128) the next K loads under this block's
softmax and P V, and the next V under the next S. The kernel text compiles for sm_90a too
(WGMMA and TMA).

On an H100 the Ampere code path runs with `arch="sm_80"` (the driver assembles the
compute_80 PTX): that is how this file is checked on a real GPU.
"""

import math

import torch

import kitjit as kit
from kitjit.testing import bench, check, device, has_gpu


@kit.jit
def fa2_block(q, k, v, k_ready, v_ready, K, V, acc, m_i, l_i, m0, j, n_full, n_kv, kvh, SK,
              qk_scale, BM: kit.constexpr, BN: kit.constexpr, STAGES: kit.constexpr,
              CAUSAL: kit.constexpr):
    """Keys j*BN .. j*BN+BN-1: S = Q Kᵀ, online softmax (exp2, the scale folded in), O += P V."""
    s, phase = j % STAGES, j // STAGES % 2
    kit.mbarrier_wait(k_ready[s], phase)
    sc = kit.mma(q, k[s].T, kit.zeros((BM, BN), kit.float32))
    if j + STAGES < n_kv:                           # k[s] is read: load block j+STAGES
        kit.tma_load(k[s], K, (kvh * SK + (j + STAGES) * BN, 0), k_ready[s])
    if j >= n_full:                                 # the ragged end, or the causal diagonal
        cols = j * BN + kit.arange(0, BN)
        keep = cols[None, :] < SK
        if CAUSAL:                                  # top-left aligned: key c <= query r
            keep = keep & (cols[None, :] <= (m0 + kit.arange(0, BM))[:, None])
        sc = kit.where(keep, sc, -float("inf"))
    m_new = kit.maximum(m_i, kit.max(sc, axis=1) * qk_scale)
    p = kit.exp2(sc * qk_scale - m_new[:, None], ftz=True)
    alpha = kit.exp2(m_i - m_new, ftz=True)
    kit.mbarrier_wait(v_ready[s], phase)
    acc = kit.mma(p.to(v.dtype), v[s], acc * alpha[:, None])   # P from registers
    if j + STAGES < n_kv:
        kit.tma_load(v[s], V, (kvh * SK + (j + STAGES) * BN, 0), v_ready[s])
    return acc, m_new, l_i * alpha + kit.sum(p, axis=1)


@kit.jit
def fa2_kernel(Q, K, V, O, L, S, SK, H, G, qk_scale, BM: kit.constexpr, BN: kit.constexpr,
               D: kit.constexpr, CAUSAL: kit.constexpr, STAGES: kit.constexpr):
    """Q, O: (B*H*S, D) rows; K, V: (B*H_kv*SK, D) rows; L: (B*H*S) log-sum-exp. One program
    per BM query rows of one head; G query heads share a K/V head."""
    # causal: the longest rows first, so the short ones fill the tail of the grid
    m0 = (kit.num_programs(0) - 1 - kit.program_id(0) if CAUSAL else kit.program_id(0)) * BM
    bh = kit.program_id(1)
    kvh = bh // H * (H // G) + bh % H // G
    q = kit.shared((BM, D), Q.dtype.element_ty)
    k = kit.shared((STAGES, BN, D), K.dtype.element_ty)
    v = kit.shared((STAGES, BN, D), V.dtype.element_ty)
    q_ready, k_ready, v_ready = kit.mbarriers(1), kit.mbarriers(STAGES), kit.mbarriers(STAGES)
    end = kit.minimum(SK, m0 + BM) if CAUSAL else SK
    n_kv = kit.cdiv(end, BN)
    n_full = kit.minimum(m0 // BN if CAUSAL else n_kv, SK // BN)   # blocks needing no mask
    kit.tma_load(q, Q, (bh * S + m0, 0), q_ready[0])
    for s in kit.static_range(STAGES):
        if s < n_kv:
            kit.tma_load(k[s], K, (kvh * SK + s * BN, 0), k_ready[s])
            kit.tma_load(v[s], V, (kvh * SK + s * BN, 0), v_ready[s])
    m_i = kit.full((BM,), -float("inf"), kit.float32)
    l_i = kit.zeros((BM,), kit.float32)
    acc = kit.zeros((BM, D), kit.float32)
    kit.mbarrier_wait(q_ready[0], 0)
    for j in range(n_kv):   # one loop body (a masked copy would double the code)
        acc, m_i, l_i = fa2_block(q, k, v, k_ready, v_ready, K, V, acc, m_i, l_i, m0, j,
                                  n_full, n_kv, kvh, SK, qk_scale, BM, BN, STAGES, CAUSAL)
    rows = m0 + kit.arange(0, BM)
    live = rows < S
    dcol = kit.arange(0, D)
    kit.store(O + (bh * S + rows)[:, None] * D + dcol[None, :],
              (acc / l_i[:, None]).to(O.dtype.element_ty), mask=live[:, None])
    kit.store(L + bh * S + rows, (m_i + kit.log2(l_i)) * 0.6931471805599453, mask=live)


def default_config(D: int, causal: bool = False) -> dict:
    """BM x BN tiles and stages for head dim D: FA2's tiles (128 query rows on 4 warps; 64
    keys a block at D 128, 128 at D 64), the stages measured best on an H100 running this
    code path (benchmarks/NOTES.md). One stage is 64 KB of shared memory at D 128 (two CTAs
    per SM on an A100 too)."""
    if D > 64:
        return dict(BM=128, BN=64, STAGES=1, num_warps=4)
    return dict(BM=128, BN=128, STAGES=1 if causal else 2, num_warps=4)


def attention(q, k, v, causal: bool = False, sm_scale: float | None = None,
              arch: str | None = None, **config):
    """q: (B, H, S, D), k and v: (B, H_kv, SK, D), fp16 or bf16, D 64 or 128 (any multiple
    of 16 up to 256 whose tiles fit). Returns (o, lse) as kitjit.nn.attention.attention.
    `arch`: the target to compile for (None: the GPU's own; "sm_80" on a Hopper runs the
    Ampere code path)."""
    B, H, S, D = q.shape
    Hkv, SK = k.shape[1], k.shape[2]
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D or H % Hkv or SK == 0:
        raise ValueError(f"attention: q {tuple(q.shape)} and k, v {tuple(k.shape)} do not fit "
                         "(B, H, S, D) and (B, H_kv, SK > 0, D) with H a multiple of H_kv")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError("attention: q, k, v must all be fp16 or all bf16")
    cfg = dict(default_config(D, causal), **config)
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    q2, k2, v2 = (t.contiguous().view(-1, D) for t in (q, k, v))
    o = torch.empty((B, H, S, D), device=q.device, dtype=q.dtype)
    lse = torch.empty((B, H, S), device=q.device, dtype=torch.float32)
    if o.numel():
        fa2_kernel[(kit.cdiv(S, cfg["BM"]), B * H)](
            q2, k2, v2, o, lse, S, SK, H, H // Hkv, scale * 1.4426950408889634, D=D,
            CAUSAL=causal, arch=arch, **cfg)
    return o, lse


def reference(q, k, v, causal):
    """O and the LSE in float64 (causal top-left aligned, as torch's is_causal)."""
    rep = q.shape[1] // k.shape[1]
    kk, vv = (t.double().repeat_interleave(rep, dim=1) for t in (k, v))
    s = q.double() @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).triu(1),
                          float("-inf"))
    return torch.softmax(s, -1) @ vv, torch.logsumexp(s, -1)


def main() -> None:
    dev = device()
    arch = "sm_80" if has_gpu() else None   # the Ampere code path, whatever the GPU
    cases = [(1, 4, 200, 64, False, 2), (1, 2, 257, 128, True, 1)] if has_gpu() else \
        [(1, 2, 130, 64, True, 2)]
    for B, H, S, D, causal, g in cases:
        q = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16)
        k, v = (torch.randn(B, H // g, S, D, device=dev, dtype=torch.bfloat16) for _ in "kv")
        o, lse = attention(q, k, v, causal, arch=arch)
        ro, rl = reference(q, k, v, causal)
        err = check(o, ro, 1e-2)
        check(lse, rl, 1e-4, "lse")
        print(f"FA2 B{B} H{H} S{S} D{D} causal={causal} gqa={g}: rel err {err:.2e} "
              f"({'GPU, ' + arch if has_gpu() else 'interpreter'})")
    if has_gpu():
        for D, causal in ((128, False), (128, True), (64, False), (64, True)):
            q, k, v = (torch.randn(4, 32, 4096, D, device="cuda", dtype=torch.bfloat16)
                       for _ in "qkv")
            flop = 4 * 4 * 32 * 4096 * 4096 * D / (2 if causal else 1) / 1e9
            ms_k = bench(lambda: attention(q, k, v, causal, arch=arch))
            ms_t = bench(lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal))
            print(f"  B4 H32 S4096 D{D} causal={causal}: kitjit ({arch}) "
                  f"{flop / ms_k:.0f} TFLOP/s, torch SDPA {flop / ms_t:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
