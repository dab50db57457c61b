"""FlashAttention forward on Hopper: Q stays in shared memory, K and V stream through a TMA
ring; S = Q Kᵀ and O += P V run on WGMMA, with P kept in registers (the accumulator layout
of the first MMA is the A-operand layout of the second, so P never touches shared memory).
Online softmax in exp2 with the scale folded in; causal masking; GQA; ragged lengths.
Returns O and the log-sum-exp per row (what a backward pass needs)."""

import math

import torch

import kitjit as kit
from kitjit.testing import bench, check, device, has_gpu


@kit.jit
def softmax(sc, m_i, l_i, rows, j, S, qk_scale, BN: kit.constexpr, MASK: kit.constexpr,
            CAUSAL: kit.constexpr):
    """Online softmax of raw scores block j: P, the rescale of what came before, m, l."""
    if MASK:                                       # ragged tail or causal diagonal only
        cols = j * BN + kit.arange(0, BN)
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        sc = kit.where(keep, sc, -float("inf"))
    m_new = kit.maximum(m_i, kit.max(sc, axis=1) * qk_scale)      # log2 domain (scale > 0)
    p = kit.exp2(sc * qk_scale - m_new[:, None], ftz=True)        # one FFMA + MUFU.EX2 each
    alpha = kit.exp2(m_i - m_new, ftz=True)
    return p, alpha, m_new, l_i * alpha + kit.sum(p, axis=1)


@kit.jit
def attend(q, k, v, ready, empty, K, V, acc, m_i, l_i, rows, j, n_kv, kvh, S, qk_scale,
           BM: kit.constexpr, BN: kit.constexpr, STAGES: kit.constexpr, MASK: kit.constexpr,
           CAUSAL: kit.constexpr, WS: kit.constexpr):
    """One K/V block: S = Q Kᵀ, online softmax, O += P V; then hand the stage back to the
    producer warpgroup (WS), or refill it with block j+STAGES ourselves."""
    s = j % STAGES
    kit.mbarrier_wait(ready[s], j // STAGES % 2)
    sc = kit.mma(q, k[s].T, kit.zeros((BM, BN), kit.float32))   # raw scores
    p, alpha, m_new, l_i = softmax(sc, m_i, l_i, rows, j, S, qk_scale, BN, MASK, CAUSAL)
    acc = kit.mma(p.to(v.dtype), v[s], acc * alpha[:, None])   # P straight from registers
    if WS:
        kit.mbarrier_arrive(empty[s])              # both MMAs are done with stage s
    elif j + STAGES < n_kv:                        # both MMAs are done with stage s: refill
        kit.tma_load(k[s], K, (kvh * S + (j + STAGES) * BN, 0), ready[s])
        kit.tma_load(v[s], V, (kvh * S + (j + STAGES) * BN, 0), ready[s])
    return acc, m_new, l_i


@kit.jit
def overlapped(q, k, v, ready, empty, acc, p, m_i, l_i, rows, j, S, qk_scale,
               BM: kit.constexpr, BN: kit.constexpr, STAGES: kit.constexpr,
               MASK: kit.constexpr, CAUSAL: kit.constexpr):
    """Block j, FA3-style: S_j = Q K_jᵀ and O += P_{j-1} V_{j-1} issued together; the
    softmax of S_j runs under the second MMA."""
    s = j % STAGES
    kit.mbarrier_wait(ready[s], j // STAGES % 2)
    sc = kit.mma(q, k[s].T, kit.zeros((BM, BN), kit.float32), pending=1)
    acc = kit.mma(p, v[(j - 1) % STAGES], acc, pending=1)      # S_j is done on return
    p, alpha, m_i, l_i = softmax(sc, m_i, l_i, rows, j, S, qk_scale, BN, MASK, CAUSAL)
    acc = acc * alpha[:, None]                     # waits for P_{j-1} V_{j-1}
    kit.mbarrier_arrive(empty[(j - 1) % STAGES])
    return acc, p.to(v.dtype), m_i, l_i


@kit.jit
def consume_overlapped(q, k, v, ready, empty, O, L, m0, bh, S, n_full, n_kv, qk_scale,
                       BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr,
                       CAUSAL: kit.constexpr, STAGES: kit.constexpr):
    """consume(), overlapped: 3 stages keep the loads ahead (stage j-1 is freed late)."""
    rows = m0 + kit.arange(0, BM)
    kit.mbarrier_wait(ready[0], 0)
    sc = kit.mma(q, k[0].T, kit.zeros((BM, BN), kit.float32))
    p, _, m_i, l_i = softmax(sc, kit.full((BM,), -float("inf"), kit.float32),
                             kit.zeros((BM,), kit.float32), rows, 0, S, qk_scale, BN, True,
                             CAUSAL)
    p, acc = p.to(v.dtype), kit.zeros((BM, D), kit.float32)
    for j in range(1, n_full):
        acc, p, m_i, l_i = overlapped(q, k, v, ready, empty, acc, p, m_i, l_i, rows, j, S,
                                      qk_scale, BM, BN, STAGES, False, CAUSAL)
    for j in range(kit.maximum(n_full, 1), n_kv):
        acc, p, m_i, l_i = overlapped(q, k, v, ready, empty, acc, p, m_i, l_i, rows, j, S,
                                      qk_scale, BM, BN, STAGES, True, CAUSAL)
    acc = kit.mma(p, v[(n_kv - 1) % STAGES], acc)
    kit.mbarrier_arrive(empty[(n_kv - 1) % STAGES])
    store_out(O, L, acc, m_i, l_i, rows, bh, S, D)


@kit.jit
def store_out(O, L, acc, m_i, l_i, rows, bh, S, D: kit.constexpr):
    out = acc / l_i[:, None]
    live = rows < S
    dcol = kit.arange(0, D)
    kit.store(O + (bh * S + rows)[:, None] * D + dcol[None, :], out.to(O.dtype.element_ty),
              mask=live[:, None])
    kit.store(L + bh * S + rows, (m_i + kit.log2(l_i)) * 0.6931471805599453, mask=live)


@kit.jit
def consume(q, k, v, ready, empty, K, V, O, L, m0, bh, kvh, S, n_full, n_kv, qk_scale,
            BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr, CAUSAL: kit.constexpr,
            STAGES: kit.constexpr, WS: kit.constexpr):
    """All K/V blocks for BM query rows (unmasked ones first), then O and the LSE."""
    rows = m0 + kit.arange(0, BM)
    m_i = kit.full((BM,), -float("inf"), kit.float32)
    l_i = kit.zeros((BM,), kit.float32)
    acc = kit.zeros((BM, D), kit.float32)
    for j in range(n_full):
        acc, m_i, l_i = attend(q, k, v, ready, empty, K, V, acc, m_i, l_i, rows, j, n_kv,
                               kvh, S, qk_scale, BM, BN, STAGES, False, CAUSAL, WS)
    for j in range(n_full, n_kv):
        acc, m_i, l_i = attend(q, k, v, ready, empty, K, V, acc, m_i, l_i, rows, j, n_kv,
                               kvh, S, qk_scale, BM, BN, STAGES, True, CAUSAL, WS)
    store_out(O, L, acc, m_i, l_i, rows, bh, S, D)


@kit.jit
def attention_kernel(Q, K, V, O, L, S, H, G, qk_scale, BM: kit.constexpr, BN: kit.constexpr,
                     D: kit.constexpr, CAUSAL: kit.constexpr, STAGES: kit.constexpr):
    # causal: the longest rows first, so the short ones fill the tail of the grid
    m0 = (kit.num_programs(0) - 1 - kit.program_id(0) if CAUSAL else kit.program_id(0)) * BM
    bh = kit.program_id(1)                         # batch * H + head
    kvh = bh // H * (H // G) + bh % H // G         # G query heads share one K/V head
    q = kit.shared((BM, D), Q.dtype.element_ty)
    k = kit.shared((STAGES, BN, D), K.dtype.element_ty)
    v = kit.shared((STAGES, BN, D), V.dtype.element_ty)
    q_ready = kit.mbarriers(1)
    ready = kit.mbarriers(STAGES)
    kit.tma_load(q, Q, (bh * S + m0, 0), q_ready[0])
    end = kit.minimum(S, m0 + BM) if CAUSAL else S
    n_kv = kit.cdiv(end, BN)
    # blocks that need no mask: fully below the diagonal (causal) and inside the sequence
    n_full = kit.minimum(m0 // BN if CAUSAL else n_kv, S // BN)
    for s in kit.static_range(STAGES):
        if s < n_kv:
            kit.tma_load(k[s], K, (kvh * S + s * BN, 0), ready[s])
            kit.tma_load(v[s], V, (kvh * S + s * BN, 0), ready[s])
    kit.mbarrier_wait(q_ready[0], 0)
    consume(q, k, v, ready, ready, K, V, O, L, m0, bh, kvh, S, n_full, n_kv, qk_scale, BM, BN,
            D, CAUSAL, STAGES, False)


@kit.jit
def attention_ws_kernel(Q, K, V, O, L, S, H, G, qk_scale, BM: kit.constexpr,
                        BN: kit.constexpr, D: kit.constexpr, CAUSAL: kit.constexpr,
                        STAGES: kit.constexpr, CONSUMERS: kit.constexpr,
                        OVERLAP: kit.constexpr = False):
    m0 = (kit.num_programs(0) - 1 - kit.program_id(0) if CAUSAL else kit.program_id(0)) * BM
    bh = kit.program_id(1)
    kvh = bh // H * (H // G) + bh % H // G
    q = kit.shared((BM, D), Q.dtype.element_ty)
    k = kit.shared((STAGES, BN, D), K.dtype.element_ty)
    v = kit.shared((STAGES, BN, D), V.dtype.element_ty)
    q_ready = kit.mbarriers(1)
    ready = kit.mbarriers(STAGES)
    empty = kit.mbarriers(STAGES, arrivals=CONSUMERS)
    end = kit.minimum(S, m0 + BM) if CAUSAL else S
    n_kv = kit.cdiv(end, BN)
    n_full = kit.minimum(m0 // BN if CAUSAL else n_kv, S // BN)
    if kit.warpgroup_id() == 0:                    # producer: Q once, then the K/V ring
        kit.setmaxnreg(24)
        kit.tma_load(q, Q, (bh * S + m0, 0), q_ready[0])
        for j in range(n_kv):
            s = j % STAGES
            kit.mbarrier_wait(empty[s], j // STAGES % 2 ^ 1)
            kit.tma_load(k[s], K, (kvh * S + j * BN, 0), ready[s])
            kit.tma_load(v[s], V, (kvh * S + j * BN, 0), ready[s])
    else:                                          # consumers: 64 query rows each
        kit.setmaxnreg(240)
        kit.mbarrier_wait(q_ready[0], 0)
        if OVERLAP:
            consume_overlapped(q, k, v, ready, empty, O, L, m0, bh, S, n_full, n_kv, qk_scale,
                               BM, BN, D, CAUSAL, STAGES)
        else:
            consume(q, k, v, ready, empty, K, V, O, L, m0, bh, kvh, S, n_full, n_kv,
                    qk_scale, BM, BN, D, CAUSAL, STAGES, True)


def attention(q, k, v, causal: bool = False, sm_scale: float | None = None, **config):
    """q: (B, H, S, D), k and v: (B, H_kv, S, D) with H a multiple of H_kv.
    Returns (o, lse): o like q, lse (B, H, S) fp32 (natural log)."""
    B, H, S, D = q.shape
    # measured on an H100 (benchmarks/NOTES.md): for D=128 a producer warpgroup and two
    # consumer warpgroups on 128 query rows, each overlapping P V with the next softmax;
    # for D=64 one warpgroup on 64 rows, so several CTAs share an SM and one's softmax
    # overlaps another's MMAs; for D=256 the producer and two plain consumers (registers)
    cfg = dict(BM=128, BN=64, STAGES=2, num_warps=8, ws=True) if D > 128 else \
        dict(BM=128, BN=128, STAGES=3, num_warps=8, ws=True, OVERLAP=True) if D > 64 else \
        dict(BM=64, BN=128, STAGES=2, num_warps=4)
    if "BM" in config:   # a whole config: nothing inherited from the default
        cfg = dict(STAGES=2, num_warps=4 if config["BM"] == 64 else 8)
    cfg.update(config)
    ws = cfg.pop("ws", False)  # producer warpgroup + consumers (kit.warpgroup_id roles)
    if not ws and cfg.pop("OVERLAP", False):
        raise ValueError("attention: OVERLAP needs the warp-specialized kernel (ws=True)")
    Hkv = k.shape[1]
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    if not scale > 0:
        raise ValueError(f"attention: the softmax scale must be positive, got {scale}")
    q2, k2, v2 = (t.contiguous().view(-1, D) for t in (q, k, v))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, device=q.device, dtype=torch.float32)
    grid = (kit.cdiv(S, cfg["BM"]), B * H)
    if ws:
        cfg["num_warps"] = cfg["num_warps"] + 4
        attention_ws_kernel[grid](q2, k2, v2, o, lse, S, H, H // Hkv,
                                  scale * 1.4426950408889634, D=D, CAUSAL=causal,
                                  CONSUMERS=cfg["num_warps"] // 4 - 1, **cfg)
    else:
        attention_kernel[grid](q2, k2, v2, o, lse, S, H, H // Hkv,
                               scale * 1.4426950408889634, D=D, CAUSAL=causal, **cfg)
    return o, lse


def sdpa(q, k, v, is_causal: bool = False, scale: float | None = None):
    """Drop-in for torch.nn.functional.scaled_dot_product_attention (forward, no mask)."""
    return attention(q, k, v, causal=is_causal, sm_scale=scale)[0]


def reference(q, k, v, causal, scale=None):
    B, H, S, D = q.shape
    rep = H // k.shape[1]
    kk = k.double().repeat_interleave(rep, dim=1)
    vv = v.double().repeat_interleave(rep, dim=1)
    s = (q.double() @ kk.transpose(-1, -2)) * (scale or 1.0 / math.sqrt(D))
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1),
                          float("-inf"))
    return torch.softmax(s, -1) @ vv, torch.logsumexp(s, -1)


def main() -> None:
    dev = device()
    cases = [(1, 2, 200, 64, False, 2), (1, 4, 257, 128, True, 2)] if has_gpu() else \
        [(1, 2, 130, 64, True, 1)]
    for B, H, S, D, causal, g in cases:
        q = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, H // g, S, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(B, H // g, S, D, device=dev, dtype=torch.bfloat16)
        o, lse = attention(q, k, v, causal)
        ro, rl = reference(q, k, v, causal)
        err = check(o, ro, 1e-2)
        check(lse, rl, 1e-4, "lse")
        print(f"attention B{B} H{H} S{S} D{D} causal={causal} gqa={g}: rel err {err:.2e} "
              f"({'GPU' if has_gpu() else 'interpreter'})")
    if has_gpu():
        for B, H, S, D, causal in ((4, 32, 4096, 128, False), (4, 32, 4096, 128, True)):
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            flop = 4 * B * H * S * S * D / (2 if causal else 1) / 1e9
            ms_k = bench(lambda: attention(q, k, v, causal))
            ms_t = bench(lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal))
            print(f"  B{B} H{H} S{S} D{D} causal={causal}: kitjit {flop / ms_k:.0f} TFLOP/s, "
                  f"torch SDPA {flop / ms_t:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
