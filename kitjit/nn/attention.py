"""FlashAttention forward on Hopper: Q stays in shared memory, K and V stream through a TMA
ring; S = Q Kᵀ and O += P V run on WGMMA, with P kept in registers (the accumulator layout
of the first MMA is the A-operand layout of the second, so P never touches shared memory).
Online softmax in exp2 with the scale folded in; causal masking (top-left aligned, as torch's
`is_causal`); GQA; ragged lengths; a query length S and a key length SK of their own (decode
against a KV cache, cross-attention). Returns O and the log-sum-exp per row (what a backward
pass needs). `kitjit.nn.functional.scaled_dot_product_attention` is the torch-facing entry."""

import functools
import math

import torch

import kitjit as kit
from kitjit import launcher as _launcher
from kitjit.nn._host import Rows, Site, int_facts, on_reset, workspace


@kit.jit
def softmax(sc, m_i, l_i, rows, j, SK, qk_scale, BN: kit.constexpr, MASK: kit.constexpr,
            CAUSAL: kit.constexpr, BOUND: kit.constexpr = False):
    """Online softmax of raw scores block j: P, the rescale of what came before, m, l.
    Keys at or past SK are masked; causal is top-left aligned (query i sees keys 0..i).
    BOUND: the causal mask as one bound a row, key <= min(row, SK - 1) (SASS, D=128, a
    diagonal block: ISETP 96 -> 64, FSEL 128 -> 64 a thread)."""
    if MASK:                                       # ragged tail or causal diagonal only
        cols = j * BN + kit.arange(0, BN)
        if CAUSAL and BOUND:
            keep = cols[None, :] <= kit.minimum(rows, SK - 1)[:, None]
        else:
            keep = cols[None, :] < SK
        if CAUSAL and not BOUND:
            keep = keep & (cols[None, :] <= rows[:, None])
        sc = kit.where(keep, sc, -float("inf"))
    m_new = kit.maximum(m_i, kit.max(sc, axis=1) * qk_scale)      # log2 domain (scale > 0)
    p = kit.exp2(sc * qk_scale - m_new[:, None], ftz=True)        # one FFMA + MUFU.EX2 each
    alpha = kit.exp2(m_i - m_new, ftz=True)
    return p, alpha, m_new, l_i * alpha + kit.sum(p, axis=1)


@kit.jit
def attend(q, k, v, ready, empty, K, V, acc, m_i, l_i, rows, j, n_kv, kvh, SK, qk_scale,
           BM: kit.constexpr, BN: kit.constexpr, STAGES: kit.constexpr, MASK: kit.constexpr,
           CAUSAL: kit.constexpr, WS: kit.constexpr):
    """One K/V block: S = Q Kᵀ, online softmax, O += P V; then hand the stage back to the
    producer warpgroup (WS), or refill it with block j+STAGES ourselves."""
    s = j % STAGES
    kit.mbarrier_wait(ready[s], j // STAGES % 2)
    sc = kit.mma(q, k[s].T, kit.zeros((BM, BN), kit.float32))   # raw scores
    p, alpha, m_new, l_i = softmax(sc, m_i, l_i, rows, j, SK, qk_scale, BN, MASK, CAUSAL)
    acc = kit.mma(p.to(v.dtype), v[s], acc * alpha[:, None])   # P straight from registers
    if WS:
        kit.mbarrier_arrive(empty[s])              # both MMAs are done with stage s
    elif j + STAGES < n_kv:                        # both MMAs are done with stage s: refill
        kit.tma_load(k[s], K, (kvh, (j + STAGES) * BN, 0), ready[s])
        kit.tma_load(v[s], V, (kvh, (j + STAGES) * BN, 0), ready[s])
    return acc, m_new, l_i


@kit.jit
def pack_p(p, dtype: kit.constexpr, PACKED: kit.constexpr):
    """P in the MMA's 16-bit type. PACKED: spelled fp_downcast_rounding='rtne' (the same
    rounding), which kitjit lowers to one cvt.rn an element kept where written; LLVM moves
    the plain conversion of the loop-carried P to the loop's top (an fp32 phi), and ptxas
    packs it there into swapped halves: 32 PRMT a block (SASS, D=128: 517 -> 488
    instructions a block, the causal diagonal's 681 -> 620)."""
    if PACKED:
        return p.to(dtype, fp_downcast_rounding="rtne")
    return p.to(dtype)


@kit.jit
def overlapped(q, k, v, ready, empty, acc, p, m_i, l_i, rows, j, SK, qk_scale, wg,
               BM: kit.constexpr, BN: kit.constexpr, STAGES: kit.constexpr,
               MASK: kit.constexpr, CAUSAL: kit.constexpr, TURNS: kit.constexpr,
               CONSUMERS: kit.constexpr, SPLIT: kit.constexpr, PACKED: kit.constexpr,
               BOUND: kit.constexpr):
    """Block j, FA3-style: S_j = Q K_jᵀ and O += P_{j-1} V_{j-1} issued together; the
    softmax of S_j runs under the second MMA. TURNS: consumer warpgroup wg issues both only
    in its turn and passes the turn on before waiting for them. SPLIT: K and V stages have
    barriers of their own (V's at STAGES + s): K_j's stage is freed once S_j is done.
    PACKED: P is converted where written (pack_p); BOUND: see softmax."""
    s, vs = j % STAGES, (j - 1) % STAGES
    kit.mbarrier_wait(ready[s], j // STAGES % 2)
    if SPLIT:
        kit.mbarrier_wait(ready[STAGES + vs], (j - 1) // STAGES % 2)
    if TURNS:
        kit.named_barrier_wait(wg, 256)
        sc = kit.mma(q, k[s].T, kit.zeros((BM, BN), kit.float32), pending=1)
        acc = kit.mma(p, v[vs], acc, pending=2)   # both in flight
        kit.named_barrier_arrive((wg + 1) % CONSUMERS, 256)
    else:
        sc = kit.mma(q, k[s].T, kit.zeros((BM, BN), kit.float32), pending=1)
        acc = kit.mma(p, v[vs], acc, pending=1)   # S_j is done on return
    p, alpha, m_i, l_i = softmax(sc, m_i, l_i, rows, j, SK, qk_scale, BN, MASK, CAUSAL,
                                 BOUND)
    if SPLIT:
        kit.mbarrier_arrive(empty[s])              # K_j: S_j is done
        acc = acc * alpha[:, None]                 # waits for P_{j-1} V_{j-1}
        kit.mbarrier_arrive(empty[STAGES + vs])
    else:
        acc = acc * alpha[:, None]                 # waits for P_{j-1} V_{j-1}
        kit.mbarrier_arrive(empty[vs])
    return acc, pack_p(p, v.dtype, PACKED), m_i, l_i


@kit.jit
def consume_overlapped(q, k, v, ready, empty, O, L, m0, bh, S, SK, n_full, n_kv, qk_scale,
                       BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr,
                       CAUSAL: kit.constexpr, STAGES: kit.constexpr,
                       TURNS: kit.constexpr = False, CONSUMERS: kit.constexpr = 2,
                       SPLIT: kit.constexpr = False, PACKED: kit.constexpr = False,
                       BOUND: kit.constexpr = False):
    """consume(), overlapped: 3 stages keep the loads ahead (stage j-1 is freed late).

    TURNS (FA3's scheduler barrier): the consumer warpgroups issue their MMAs in turn, so
    one's softmax (FMA and MUFU units) runs while the tensor cores work through the
    others' MMAs. Warpgroup wg waits at named barrier wg (256 threads: itself and the one
    before it, which arrives there after issuing); warpgroup 0 opens with its own arrival.
    The code is the same for all of them (one role: a role per warpgroup would put two
    copies of the loop in the instruction cache)."""
    wg = kit.warpgroup_id() - 1                    # consumer 0 .. CONSUMERS-1
    rows = m0 + kit.arange(0, BM)
    kit.mbarrier_wait(ready[0], 0)
    if TURNS:
        if wg == 0:
            kit.named_barrier_arrive(0, 256)
        kit.named_barrier_wait(wg, 256)
        sc = kit.mma(q, k[0].T, kit.zeros((BM, BN), kit.float32), pending=1)
        kit.named_barrier_arrive((wg + 1) % CONSUMERS, 256)
    else:
        sc = kit.mma(q, k[0].T, kit.zeros((BM, BN), kit.float32))
    p, _, m_i, l_i = softmax(sc, kit.full((BM,), -float("inf"), kit.float32),
                             kit.zeros((BM,), kit.float32), rows, 0, SK, qk_scale, BN, True,
                             CAUSAL, BOUND)
    if SPLIT:
        kit.mbarrier_arrive(empty[0])
    p, acc = pack_p(p, v.dtype, PACKED), kit.zeros((BM, D), kit.float32)
    for j in range(1, n_full):
        acc, p, m_i, l_i = overlapped(q, k, v, ready, empty, acc, p, m_i, l_i, rows, j, SK,
                                      qk_scale, wg, BM, BN, STAGES, False, CAUSAL, TURNS,
                                      CONSUMERS, SPLIT, PACKED, BOUND)
    for j in range(kit.maximum(n_full, 1), n_kv):
        acc, p, m_i, l_i = overlapped(q, k, v, ready, empty, acc, p, m_i, l_i, rows, j, SK,
                                      qk_scale, wg, BM, BN, STAGES, True, CAUSAL, TURNS,
                                      CONSUMERS, SPLIT, PACKED, BOUND)
    vs = (n_kv - 1) % STAGES
    if SPLIT:
        kit.mbarrier_wait(ready[STAGES + vs], (n_kv - 1) // STAGES % 2)
    if TURNS:
        kit.named_barrier_wait(wg, 256)
        acc = kit.mma(p, v[vs], acc, pending=1)
        kit.named_barrier_arrive((wg + 1) % CONSUMERS, 256)
        if wg == 0:                                # the last warpgroup's final pass
            kit.named_barrier_wait(0, 256)
    else:
        acc = kit.mma(p, v[vs], acc)
    store_out(O, L, acc, m_i, l_i, rows, bh, S, D)   # waits for the last P V
    if SPLIT:
        kit.mbarrier_arrive(empty[STAGES + vs])
    else:
        kit.mbarrier_arrive(empty[vs])


@kit.jit
def store_out(O, L, acc, m_i, l_i, rows, bh, S, D: kit.constexpr):
    out = acc / l_i[:, None]
    live = rows < S
    dcol = kit.arange(0, D)
    kit.store(O + (bh * S + rows)[:, None] * D + dcol[None, :], out.to(O.dtype.element_ty),
              mask=live[:, None])
    kit.store(L + bh * S + rows, (m_i + kit.log2(l_i)) * 0.6931471805599453, mask=live)


@kit.jit
def consume(q, k, v, ready, empty, K, V, O, L, m0, bh, kvh, S, SK, n_full, n_kv, qk_scale,
            BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr, CAUSAL: kit.constexpr,
            STAGES: kit.constexpr, WS: kit.constexpr):
    """All K/V blocks for BM query rows (unmasked ones first), then O and the LSE."""
    rows = m0 + kit.arange(0, BM)
    m_i = kit.full((BM,), -float("inf"), kit.float32)
    l_i = kit.zeros((BM,), kit.float32)
    acc = kit.zeros((BM, D), kit.float32)
    for j in range(n_full):
        acc, m_i, l_i = attend(q, k, v, ready, empty, K, V, acc, m_i, l_i, rows, j, n_kv,
                               kvh, SK, qk_scale, BM, BN, STAGES, False, CAUSAL, WS)
    for j in range(n_full, n_kv):
        acc, m_i, l_i = attend(q, k, v, ready, empty, K, V, acc, m_i, l_i, rows, j, n_kv,
                               kvh, SK, qk_scale, BM, BN, STAGES, True, CAUSAL, WS)
    store_out(O, L, acc, m_i, l_i, rows, bh, S, D)


@kit.jit
def attention_kernel(Q, K, V, O, L, S, SK, H, G, qk_scale, BM: kit.constexpr,
                     BN: kit.constexpr, D: kit.constexpr, CAUSAL: kit.constexpr,
                     STAGES: kit.constexpr):
    """Q and O: (B*H*S, D) rows, K and V: (B*H_kv, SK, D), copied per head (a tile past a
    head's last key reads zeros, never the next head's keys: 0 * NaN there would be NaN);
    one program per BM query rows of one head. S query rows attend to SK keys (S != SK:
    decode, cross-attention). (Q's rows past S are the next head's: each output row reads
    its own row of Q only, and those are not stored.)"""
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
    end = kit.minimum(SK, m0 + BM) if CAUSAL else SK   # causal: top-left, key j <= row
    n_kv = kit.cdiv(end, BN)
    # blocks that need no mask: fully below the diagonal (causal) and inside the sequence
    n_full = kit.minimum(m0 // BN if CAUSAL else n_kv, SK // BN)
    for s in kit.static_range(STAGES):
        if s < n_kv:
            kit.tma_load(k[s], K, (kvh, s * BN, 0), ready[s])
            kit.tma_load(v[s], V, (kvh, s * BN, 0), ready[s])
    kit.mbarrier_wait(q_ready[0], 0)
    consume(q, k, v, ready, ready, K, V, O, L, m0, bh, kvh, S, SK, n_full, n_kv, qk_scale, BM,
            BN, D, CAUSAL, STAGES, False)


@kit.jit
def attention_ws_kernel(Q, K, V, O, L, S, SK, H, G, qk_scale, BM: kit.constexpr,
                        BN: kit.constexpr, D: kit.constexpr, CAUSAL: kit.constexpr,
                        STAGES: kit.constexpr, CONSUMERS: kit.constexpr,
                        OVERLAP: kit.constexpr = False, TURNS: kit.constexpr = False,
                        SPLIT: kit.constexpr = False, PACKED: kit.constexpr = False,
                        BOUND: kit.constexpr = False):
    """A producer warpgroup (TMA) and CONSUMERS warpgroups of 64 query rows each; OVERLAP:
    FA3's intra-warpgroup overlap, TURNS: that and its scheduler barrier, SPLIT: with K and
    V on barriers of their own (consume_overlapped)."""
    m0 = (kit.num_programs(0) - 1 - kit.program_id(0) if CAUSAL else kit.program_id(0)) * BM
    bh = kit.program_id(1)
    kvh = bh // H * (H // G) + bh % H // G
    q = kit.shared((BM, D), Q.dtype.element_ty)
    k = kit.shared((STAGES, BN, D), K.dtype.element_ty)
    v = kit.shared((STAGES, BN, D), V.dtype.element_ty)
    q_ready = kit.mbarriers(1)
    if SPLIT:                                      # K stage s: [s], V stage s: [STAGES + s]
        ready = kit.mbarriers(2 * STAGES)
        empty = kit.mbarriers(2 * STAGES, arrivals=CONSUMERS)
    else:
        ready = kit.mbarriers(STAGES)
        empty = kit.mbarriers(STAGES, arrivals=CONSUMERS)
    end = kit.minimum(SK, m0 + BM) if CAUSAL else SK   # causal: top-left, key j <= row
    n_kv = kit.cdiv(end, BN)
    n_full = kit.minimum(m0 // BN if CAUSAL else n_kv, SK // BN)
    if kit.warpgroup_id() == 0:                    # producer: Q once, then the K/V ring
        if CONSUMERS == 3:                         # 32 + 3 x 160 registers a thread (FA4)
            kit.setmaxnreg(32)
        else:
            kit.setmaxnreg(24)
        kit.tma_load(q, Q, (bh * S + m0, 0), q_ready[0])
        if SPLIT:    # FA3's order: K_{j+1} before V_j, which the consumers use a block later
            kit.tma_load(k[0], K, (kvh, 0, 0), ready[0])
        for j in range(n_kv):
            s = j % STAGES
            if SPLIT:
                if j + 1 < n_kv:
                    s1 = (j + 1) % STAGES
                    kit.mbarrier_wait(empty[s1], (j + 1) // STAGES % 2 ^ 1)
                    kit.tma_load(k[s1], K, (kvh, (j + 1) * BN, 0), ready[s1])
                kit.mbarrier_wait(empty[STAGES + s], j // STAGES % 2 ^ 1)
                kit.tma_load(v[s], V, (kvh, j * BN, 0), ready[STAGES + s])
            else:
                kit.mbarrier_wait(empty[s], j // STAGES % 2 ^ 1)
                kit.tma_load(k[s], K, (kvh, j * BN, 0), ready[s])
                kit.tma_load(v[s], V, (kvh, j * BN, 0), ready[s])
    else:                                          # consumers: 64 query rows each
        if CONSUMERS == 3:
            kit.setmaxnreg(160)
        else:
            kit.setmaxnreg(240)
        kit.mbarrier_wait(q_ready[0], 0)
        if OVERLAP or TURNS or SPLIT:
            consume_overlapped(q, k, v, ready, empty, O, L, m0, bh, S, SK, n_full, n_kv,
                               qk_scale, BM, BN, D, CAUSAL, STAGES, TURNS, CONSUMERS, SPLIT,
                               PACKED, BOUND)
        else:
            consume(q, k, v, ready, empty, K, V, O, L, m0, bh, kvh, S, SK, n_full, n_kv,
                    qk_scale, BM, BN, D, CAUSAL, STAGES, True)


def attention(q, k, v, causal: bool = False, sm_scale: float | None = None, **config):
    """q: (B, H, S, D), k and v: (B, H_kv, SK, D) with H a multiple of H_kv, fp16 or bf16.
    Returns (o, lse): o a new contiguous (B, H, S, D) tensor of q's dtype, lse (B, H, S) fp32
    (natural log). Causal masking is top-left aligned (query i sees keys 0..i), as torch's.

    Any strides are accepted: the kernels read rows of TMA descriptors over
    `t.contiguous()` (Q as (B*H*S, D) rows, K and V as (B*H_kv, SK, D), so a tile never
    reads another head's keys), so an input that is not contiguous (e.g. the (B, S, H, D)
    layout of LLMs, transposed to (B, H, S, D)) is first copied: one extra read and write of
    that tensor in device memory, outside the kernel."""
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError(f"attention: q must be (B, H, S, D) and k, v (B, H_kv, SK, D) alike, "
                         f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, H, S, D = q.shape
    Hkv, SK = k.shape[1], k.shape[2]
    if k.shape[0] != B or k.shape[3] != D or H % Hkv:
        raise ValueError(f"attention: k and v {tuple(k.shape)} do not fit q {tuple(q.shape)} "
                         "(same batch and head dim, H a multiple of H_kv)")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"attention: q, k, v must all be fp16 or all bf16, got {q.dtype}, "
                        f"{k.dtype}, {v.dtype}")
    if SK == 0:
        raise ValueError("attention: no keys (SK = 0): every softmax row would be empty")
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    if not scale > 0:
        raise ValueError(f"attention: the softmax scale must be positive, got {scale}")
    dev = q.device
    if k.device != dev or v.device != dev:
        raise ValueError(f"attention: q, k, v must be on one device, got {q.device}, "
                         f"{k.device}, {v.device}")
    return route(B, H, Hkv, S, SK, D, causal, scale, tuple(sorted(config.items())), q.dtype,
                 -1 if dev.type != "cuda" else dev.index if dev.index is not None
                 else torch.cuda.current_device())(q, k, v, True)


class Route:
    """One forward shape, configuration, dtype and device: the kernel's launch site and the
    numbers of a call, made once (kitjit/nn/_host.py: the first call launches through
    `kernel[grid](...)`, the next ones through the kernel's own launcher, with the TMA
    operands by pointer). Calling it with (q, k, v, want_lse) returns (o, lse); lse is None
    when not wanted (sdpa without autograd), then written to scratch memory."""

    def __init__(self, B, H, Hkv, S, SK, D, causal, scale, config, dtype, device):
        config = dict(config)
        # measured on an H100 (benchmarks/NOTES.md, session 5): for D=128 a producer
        # warpgroup and two consumer warpgroups on 128 query rows, each overlapping P V with
        # the next softmax and taking turns on the tensor cores (TURNS); for D=256 the same
        # on 128x64 tiles, 2 stages, with K and V stages freed separately (SPLIT: +7-12%
        # over plain consumers); for D=64 one warpgroup on 64 rows, so several CTAs share an
        # SM and one's softmax overlaps another's MMAs (ahead of 2 consumers by ~10%).
        # BM=192 (three consumer warpgroups, FA4's D=64 tile; ws=True, num_warps=12) is a
        # config only: compiled and interpreter-checked, not yet timed on a GPU
        cfg = dict(BM=128, BN=64, STAGES=2, num_warps=8, ws=True, TURNS=True, SPLIT=True) \
            if D > 128 else \
            dict(BM=128, BN=128, STAGES=3, num_warps=8, ws=True, TURNS=True) if D > 64 else \
            dict(BM=64, BN=128, STAGES=2, num_warps=4)
        if "BM" in config:   # a whole config: nothing inherited from the default
            cfg = dict(STAGES=2, num_warps={64: 4, 192: 12}.get(config["BM"], 8))
        cfg.update(config)
        ws = cfg.pop("ws", False)  # producer warpgroup + consumers (kit.warpgroup_id roles)
        if not ws and any(cfg.pop(n, False) for n in ("OVERLAP", "TURNS", "SPLIT", "PACKED",
                                                      "BOUND")):
            raise ValueError("attention: OVERLAP, TURNS, SPLIT, PACKED and BOUND need the "
                             "warp-specialized kernel (ws=True)")
        if (cfg.get("PACKED") or cfg.get("BOUND")) and not any(
                cfg.get(n) for n in ("OVERLAP", "TURNS", "SPLIT")):
            raise ValueError("attention: PACKED and BOUND act on the overlapped consumers "
                             "(OVERLAP, TURNS or SPLIT), not the plain warp-specialized one")
        if cfg.get("TURNS") and (cfg["BM"], cfg["num_warps"]) not in ((128, 8), (192, 12)):
            raise ValueError("attention: TURNS takes two or three consumer warpgroups of 64 "
                             f"rows (BM=128, num_warps=8 or BM=192, num_warps=12), got {cfg}")
        if cfg["BM"] == 192 and not (ws and cfg["num_warps"] == 12):
            raise ValueError("attention: BM=192 takes three consumer warpgroups (ws=True, "
                             f"num_warps=12), got {cfg}")
        self.grid = (kit.cdiv(S, cfg["BM"]), B * H, 1)
        self.ints = (S, SK, H, H // Hkv)
        if ws:
            cfg["num_warps"] = cfg["num_warps"] + 4
            kernel = attention_ws_kernel
            meta = dict(D=D, CAUSAL=causal, CONSUMERS=cfg["num_warps"] // 4 - 1, **cfg)
        else:
            kernel = attention_kernel
            meta = dict(D=D, CAUSAL=causal, **cfg)
        self.dtype, self.device, self.D = dtype, device, D
        self.tdev = torch.device("cuda", device) if device >= 0 else torch.device("cpu")
        self.oshape, self.lshape = (B, H, S, D), (B, H, S)
        self.empty = B * H * S * D == 0
        self.qrows, self.kvheads, self.SK = B * H * S, B * Hkv, SK
        self.esize = torch.empty((), dtype=dtype).element_size()
        self.tail = (*self.ints, scale * 1.4426950408889634)
        self.site = Site(kernel, meta, (dtype, device, *int_facts(*self.ints)), device)
        self.pad = (None,) * (len(self.tail) + 2)
        self.rows = (Rows(-1, 0, 0, 0),) * 3

    def __call__(self, q, k, v, want_lse: bool):
        fn = self.site.fn
        if fn is None or self.empty or _launcher._is_compiling():
            return self.slow(q, k, v)
        qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
        if (qp | kp | vp) & 15 or not (q.is_contiguous() and k.is_contiguous()
                                       and v.is_contiguous()):
            return self.slow(q, k, v)
        if want_lse:
            lse = q.new_empty(self.lshape, dtype=torch.float32)
            lp = lse.data_ptr()
        else:
            ws = workspace(self.device, self.qrows)
            if ws is None:                   # the stream is being captured
                return self.slow(q, k, v)
            lse, lp = None, ws[1]
        o = q.new_empty(self.oshape)
        qr, kr, vr = self.rows
        if qr.ptr != qp or kr.ptr != kp or vr.ptr != vp:
            D, e = self.D, self.esize
            qr = qr if qr.ptr == qp else Rows(qp, self.qrows, D, e)
            kr = kr if kr.ptr == kp else Rows(kp, self.SK, D, e, self.kvheads)
            vr = vr if vr.ptr == vp else Rows(vp, self.SK, D, e, self.kvheads)
            self.rows = qr, kr, vr
        fn(self.grid, qr, kr, vr, *self.pad, qp, kp, vp, o.data_ptr(), lp, *self.tail)
        return o, lse

    def out(self, q, k, v):
        """sdpa's call: the output alone."""
        return self(q, k, v, False)[0]

    def slow(self, q, k, v):
        """Through `kernel[grid](...)`: a route's first call, inputs that are not contiguous
        or aligned (copied), the interpreter, torch.compile's tracing, graph capture."""
        D = self.D
        q2 = _rows(q, D)
        k2, v2 = (_heads(t, D) for t in (k, v))
        o = torch.empty(self.oshape, device=self.tdev, dtype=self.dtype)  # contiguous
        lse = torch.empty(self.lshape, device=self.tdev, dtype=torch.float32)
        if not self.empty:
            self.site.slow(self.grid, q2, k2, v2, o, lse, *self.tail)
        return o, lse


route = functools.lru_cache(maxsize=1024)(Route)
on_reset(route.cache_clear)


def _rows(t, D):
    """t as (rows, D) for a TMA descriptor: contiguous (a copy unless it already is) and
    16-byte aligned (a contiguous view at an odd offset is copied too)."""
    t = t.contiguous()
    if t.data_ptr() % 16:
        t = t.clone()
    return t.view(-1, D)


def _heads(t, D):
    """t (B, H, S, D) as (B*H, S, D) for a 3-d TMA descriptor (copies by (head, row, col):
    a tile past a head's last row reads zeros, not the next head's rows), contiguous and
    16-byte aligned as `_rows`."""
    return _rows(t, D).view(-1, t.shape[-2], D)
