"""FlashAttention backward on Hopper: FA3's algorithm (flash-attention's hopper/
mainloop_bwd_sm90_tma_gmma_ws.hpp and the FA3 paper), written in kitjit's level-2 language.

- `bwd_preprocess`: per query row, Δ = sum(O ∘ dO) and the LSE in log2, in (B*H, SP) rows
  padded to whole blocks (Δ = 0, LSE = +inf there, so padded rows give P = 0 unmasked).
- `bwd_kernel`: one program per BN = 128 keys of one K/V head, warp-specialized. A producer
  warpgroup loads K and V once, then streams Q, dO, LSE and Δ blocks of every query head of
  the GQA group through a TMA ring (dK and dV come out summed over the group). Two consumer
  warpgroups recompute P = exp2(S·scale − LSE) from the forward's LSE, and
      dP = dO Vᵀ, dS = P ∘ (dP − Δ), dV += Pᵀ dO, dK += dSᵀ Q, dQ += dS K,
  five WGMMAs per block of queries (FA2 needs seven or atomics), dK and dV in registers, dQ
  reduce-added by TMA (`kit.tma_store(..., reduce="add")`) into an fp32 buffer: every program
  adds into every query block, with no second pass over K and V.
  D = 128 (`keys_as_rows`): Sᵀ = K Qᵀ, keys as the MMA rows (each warpgroup 64 keys), so Pᵀ
  and dSᵀ are register A operands of dV and dK; dQᵀ = Kᵀ dSᵀ reads dSᵀ (both warpgroups'
  rows) from shared memory, Kᵀ as a transposed A operand (`kit.mma(k.T, ...)`).
  D = 64 (`queries_as_rows`): 128 queries as rows, P and dS through shared memory as the
  transposed A operands of dV and dK, dQ = dS K from registers.
- `dq_convert`: dQ = scale · the fp32 sums, in q's dtype.

Causal is top-left aligned as torch's `is_causal` (query i sees keys 0..i, also for S != SK).
Rows past a head's S (or keys past SK) read the next head's rows through the 2-D descriptors:
padded rows have P = 0, keys past SK have their K rows zeroed in shared memory (so they add
nothing to dQ), and neither is stored.
"""

import math

import torch

import kitjit as kit
from kitjit.nn.attention_backward_d256 import bwd_config_d256, bwd_kernel_d256

LOG2E = 1.4426950408889634


@kit.jit
def bwd_preprocess(O, DO, L, Delta2, LSE2, S, SP, BM: kit.constexpr, D: kit.constexpr):
    """Per query row, in (B*H, SP) rows padded past S: Δ = sum(O * dO) (0 in the padding) and
    the LSE in log2 (+inf in the padding, so that P = exp2(S - LSE) is 0 there, unmasked)."""
    m = kit.program_id(0) * BM + kit.arange(0, BM)
    bh = kit.program_id(1)
    live = m < S
    offs = (bh * S + m)[:, None] * D + kit.arange(0, D)[None, :]
    o = kit.load(O + offs, mask=live[:, None], other=0.0).to(kit.float32)
    do = kit.load(DO + offs, mask=live[:, None], other=0.0).to(kit.float32)
    lse = kit.load(L + bh * S + m, mask=live, other=float("inf"))
    kit.store(Delta2 + bh * SP + m, kit.sum(o * do, axis=1), mask=m < SP)
    kit.store(LSE2 + bh * SP + m, kit.where(live, lse * LOG2E, float("inf")), mask=m < SP)


@kit.jit
def keys_as_rows(k, v, q, do, lse_s, dlt_s, ds, DQA, n0, bh, m0, t, s, phase, ready, empty,
                 qk_scale, dk, dv, BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr,
                 MASK: kit.constexpr, STAGES: kit.constexpr, REORDER: kit.constexpr,
                 DSB: kit.constexpr):
    """One block of BM queries against the CTA's BN keys (two warpgroups, 64 keys each), for
    D >= 128 (FA3's SdP_swapAB): Sᵀ = K Qᵀ and dPᵀ = V dOᵀ keep the keys as MMA rows, so Pᵀ and
    dSᵀ are register A operands of dV += Pᵀ dO and dK += dSᵀ Q; dQᵀ = Kᵀ dSᵀ reads dSᵀ from
    shared memory (both warpgroups' rows) and is reduce-added into the fp32 dQᵀ buffer.
    LSE and Δ come from shared memory right where they are used: with dK and dV (128
    registers a thread) live, there is no room to hold both for a whole iteration."""
    rows = m0 + kit.arange(0, BM)
    kit.mbarrier_wait(ready[s], phase)
    st = kit.mma(k, q[s].T, kit.zeros((BN, BM), kit.float32), pending=1)
    if REORDER and t > 0:   # issuing Sᵀ waited for the last iteration's dK MMA: stage free
        kit.mbarrier_arrive(empty[(t - 1) % STAGES])
    dpt = kit.mma(v, do[s].T, kit.zeros((BN, BM), kit.float32), pending=1)
    pt = kit.exp2(st * qk_scale - kit.load(lse_s[s]), ftz=True)   # under dPᵀ's MMA
    if MASK:                                       # causal, top-left: key j sees query i >= j
        keys = n0 + kit.arange(0, BN)
        pt = kit.where(keys[:, None] <= rows[None, :], pt, 0.0)
    dst = (pt * (dpt - kit.load(dlt_s[s]))).to(q.dtype)
    dv = kit.mma(pt.to(do.dtype), do[s], dv, pending=1)
    kit.store(ds[t % DSB], dst)                    # this warpgroup's 64 rows of dSᵀ
    kit.barrier()                                  # ... and the other's, for dQᵀ
    if REORDER:
        dqt = kit.mma(k.T, ds[t % DSB], kit.zeros((D, BM), kit.float32), pending=1)
        dk = kit.mma(dst, q[s], dk, pending=1)     # runs while dQᵀ goes out
    else:
        dk = kit.mma(dst, q[s], dk, pending=1)
        dqt = kit.mma(k.T, ds[t % DSB], kit.zeros((D, BM), kit.float32), pending=1)
        kit.mbarrier_arrive(empty[s])              # dV's and dK's MMAs are done with stage s
    kit.tma_store(DQA, (bh * D, m0), dqt, reduce="add")
    return dk, dv


@kit.jit
def queries_as_rows(k, v, q, do, lse_s, dlt_s, ds, DQA, n0, bh, m0, t, s, phase, ready,
                    empty, qk_scale, dk, dv, BM: kit.constexpr, BN: kit.constexpr,
                    D: kit.constexpr, MASK: kit.constexpr, S):
    """The same for D = 64 with BM = 128 queries (two warpgroups, 64 queries each): S = Q Kᵀ
    keeps one LSE and Δ per row; P and dS go to shared memory and come back transposed as the
    A operands of dV += Pᵀ dO and dK += dSᵀ Q; dQ = dS K takes dS from registers."""
    rows = m0 + kit.arange(0, BM)
    kit.mbarrier_wait(ready[s], phase)
    sc = kit.mma(q[s], k.T, kit.zeros((BM, BN), kit.float32), pending=1)
    dp = kit.mma(do[s], v.T, kit.zeros((BM, BN), kit.float32), pending=1)
    p = kit.exp2(sc * qk_scale - kit.load(lse_s[s].T), ftz=True)
    if MASK:
        keys = n0 + kit.arange(0, BN)
        p = kit.where(keys[None, :] <= rows[:, None], p, 0.0)
    dsc = (p * (dp - kit.load(dlt_s[s].T))).to(q.dtype)
    kit.store(ds[0], p.to(q.dtype))
    kit.store(ds[1], dsc)
    kit.barrier()
    dv = kit.mma(ds[0].T, do[s], dv, pending=1)
    dk = kit.mma(ds[1].T, q[s], dk, pending=1)
    dq = kit.mma(dsc, k, kit.zeros((BM, D), kit.float32), pending=1)
    kit.mbarrier_arrive(empty[s])
    # (the TMA store's barriers also order the next iteration's kit.store after these MMAs)
    kit.tma_store(DQA, (bh * S + m0, 0), dq, reduce="add")
    return dk, dv


@kit.jit
def bwd_step(k, v, q, do, lse_s, dlt_s, ds, DQA, n0, bh, m0, t, ready, empty, S, qk_scale,
             dk, dv, BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr,
             STAGES: kit.constexpr, MASK: kit.constexpr, KEYS_AS_ROWS: kit.constexpr,
             REORDER: kit.constexpr, DSB: kit.constexpr):
    if KEYS_AS_ROWS:
        return keys_as_rows(k, v, q, do, lse_s, dlt_s, ds, DQA, n0, bh, m0, t, t % STAGES,
                            t // STAGES % 2, ready, empty, qk_scale, dk, dv, BM, BN, D, MASK,
                            STAGES, REORDER, DSB)
    else:
        return queries_as_rows(k, v, q, do, lse_s, dlt_s, ds, DQA, n0, bh, m0, t,
                               t % STAGES, t // STAGES % 2, ready, empty, qk_scale, dk, dv, BM,
                               BN, D, MASK, S)


@kit.jit
def bwd_kernel(Q, K, V, DO, DK, DV, DQA, LSE2, Delta2, S, SK, H, G, SP, HG, sm_scale, qk_scale,
               BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr, CAUSAL: kit.constexpr,
               STAGES: kit.constexpr, KEYS_AS_ROWS: kit.constexpr, LPT: kit.constexpr = True,
               REORDER: kit.constexpr = True, DSB: kit.constexpr = 2):
    """FA3's backward: one program per BN keys of one K/V head; a producer warpgroup streams
    Q, dO, LSE and Δ blocks (of every query head of the GQA group) through a TMA ring, two
    consumer warpgroups accumulate dK and dV in registers and reduce-add dQ into fp32 DQA (dQᵀ
    rows (B*H*D, SP) when KEYS_AS_ROWS, else dQ rows (B*H*S, D)). LSE2, Delta2: (B*H, SP)."""
    if CAUSAL and LPT:   # longest first: key block 0 of HG heads, then block 1, ... (L2 holds
        # their Q and dO)
        nkv = kit.cdiv(SK, BN)
        pid = kit.program_id(0)
        grp = pid // (nkv * HG)
        nh = kit.minimum(HG, kit.num_programs(0) // nkv - grp * HG)   # heads in this group
        n0 = pid % (nkv * HG) // nh * BN
        kvbh = grp * HG + pid % (nkv * HG) % nh
    else:
        n0 = kit.program_id(0) * BN
        kvbh = kit.program_id(1)                   # batch * H_kv + kv head
    hkv = H // G
    bh0 = kvbh // hkv * H + kvbh % hkv * G         # its first query head
    k = kit.shared((BN, D), K.dtype.element_ty)
    v = kit.shared((BN, D), V.dtype.element_ty)
    q = kit.shared((STAGES, BM, D), Q.dtype.element_ty)
    do = kit.shared((STAGES, BM, D), DO.dtype.element_ty)
    lse_s = kit.shared((STAGES, 1, BM), kit.float32)
    dlt_s = kit.shared((STAGES, 1, BM), kit.float32)
    if KEYS_AS_ROWS:   # dSᵀ in DSB buffers (one is enough: each kit.tma_store's barrier
        # comes after this iteration's dQᵀ MMAs, in both warpgroups)
        ds = kit.shared((DSB, BN, BM), Q.dtype.element_ty)
    else:
        ds = kit.shared((2, BM, BN), Q.dtype.element_ty)     # P and dS
    kv_ready = kit.mbarriers(1)
    ready = kit.mbarriers(STAGES)
    empty = kit.mbarriers(STAGES, arrivals=2)
    # causal, top-left: query i sees key j iff j <= i, so query blocks before n0 see none
    first = n0 // BM if CAUSAL else 0
    nq = kit.maximum(kit.cdiv(S, BM) - first, 0)   # query blocks per head (0: dK = dV = 0)
    n = G * nq                                     # over every query head of the group
    if kit.warpgroup_id() == 0:                    # producer: K, V once, then the ring
        kit.setmaxnreg(24)
        kit.tma_load(k, K, (kvbh * SK + n0, 0), kv_ready[0])
        kit.tma_load(v, V, (kvbh * SK + n0, 0), kv_ready[0])
        for t in range(n):
            s = t % STAGES
            kit.mbarrier_wait(empty[s], t // STAGES % 2 ^ 1)
            bh = bh0 + t // nq
            m0 = (first + t % nq) * BM
            kit.tma_load(q[s], Q, (bh * S + m0, 0), ready[s])
            kit.tma_load(do[s], DO, (bh * S + m0, 0), ready[s])
            kit.tma_load(lse_s[s], LSE2, (bh, m0), ready[s])
            kit.tma_load(dlt_s[s], Delta2, (bh, m0), ready[s])
    else:
        kit.setmaxnreg(240)
        dk = kit.zeros((BN, D), kit.float32)
        dv = kit.zeros((BN, D), kit.float32)
        kit.mbarrier_wait(kv_ready[0], 0)
        if n0 + BN > SK:   # keys past SK (the next head's): zero K's rows, so P dS and dQ see 0
            kit.store(k, kit.where((n0 + kit.arange(0, BN) < SK)[:, None], kit.load(k), 0.0))
            kit.barrier()
        # per query head: the blocks on the diagonal (causal) masked, then the rest; in two
        # loops, so that each holds one copy of the step's registers
        nmask = kit.minimum(kit.cdiv(n0 + BN - 1, BM) - first, nq) if CAUSAL else 0
        for g in range(G):
            if CAUSAL:
                for j in range(nmask):
                    dk, dv = bwd_step(k, v, q, do, lse_s, dlt_s, ds, DQA, n0, bh0 + g,
                                      (first + j) * BM, g * nq + j, ready, empty, S, qk_scale,
                                      dk, dv, BM, BN, D, STAGES, True, KEYS_AS_ROWS, REORDER, DSB)
            for j in range(nmask, nq):
                dk, dv = bwd_step(k, v, q, do, lse_s, dlt_s, ds, DQA, n0, bh0 + g,
                                  (first + j) * BM, g * nq + j, ready, empty, S, qk_scale,
                                  dk, dv, BM, BN, D, STAGES, False, KEYS_AS_ROWS, REORDER, DSB)
        keys = n0 + kit.arange(0, BN)
        offs = (kvbh * SK + keys)[:, None] * D + kit.arange(0, D)[None, :]
        kmask = (keys < SK)[:, None]
        kit.store(DK + offs, (dk * sm_scale).to(DK.dtype.element_ty), mask=kmask)
        kit.store(DV + offs, dv.to(DV.dtype.element_ty), mask=kmask)


@kit.jit
def dq_convert(DQA, DQ, S, SP, scale, BM: kit.constexpr, D: kit.constexpr,
               TRANS: kit.constexpr):
    """dQ = scale * the fp32 sums, as DQ's dtype: DQA holds dQᵀ rows (B*H*D, SP) if TRANS,
    else dQ rows (B*H*S, D). One program per BM query rows of one head."""
    m = kit.program_id(0) * BM + kit.arange(0, BM)
    bh = kit.program_id(1)
    d = kit.arange(0, D)
    live = (m < S)[:, None]
    if TRANS:   # read along the rows of dQᵀ (coalesced), then transpose in the CTA
        x = kit.trans(kit.load(DQA + (bh * D + d)[:, None] * SP + m[None, :],
                               mask=(m < S)[None, :], other=0.0))
    else:
        x = kit.load(DQA + (bh * S + m)[:, None] * D + d[None, :], mask=live, other=0.0)
    kit.store(DQ + (bh * S + m)[:, None] * D + d[None, :], (x * scale).to(DQ.dtype.element_ty),
              mask=live)


BWD_HEAD_DIMS = (64, 128, 256)


def bwd_config(D: int, causal: bool = False) -> dict:
    """Blocks of `bwd_kernel`: FA3's for sm90 (flash-attention hopper/
    flash_bwd_launch_template.h): D=128 64 queries x 128 keys, keys as the MMA rows; D=64
    128 x 128, queries as rows (one LSE a row keeps the registers in budget). Measured on an
    H100 (benchmarks/NOTES.md): the dQ store overlapped with dK's MMA (REORDER) is 2-4% faster
    without a mask and 8-10% slower with one, so causal keeps the plain order; 3 stages (one
    dS buffer) measured within noise of 2."""
    if D <= 64:
        return dict(BM=128, BN=128, STAGES=2, KEYS_AS_ROWS=False)
    return dict(BM=64, BN=128, STAGES=2, KEYS_AS_ROWS=True, REORDER=not causal)


def attention_backward(do, q, k, v, o, lse, causal: bool = False, sm_scale: float | None = None,
                       config: dict | None = None):
    """Gradients (dq, dk, dv) of `attention(q, k, v, causal, sm_scale)` given its output o,
    its log-sum-exp lse (B, H, S) and the output's gradient do. Shapes as `attention`:
    q, o, do (B, H, S, D), k, v (B, H_kv, SK, D); dk and dv are summed over the query heads
    that share a K/V head (GQA). Gradients are new contiguous tensors of q's dtype. `config`
    overrides `bwd_config`'s blocks (and HG, the K/V heads a causal group holds).
    Workspace: fp32 dQ sums (B*H*S*D*4 bytes) and per-row Δ and LSE."""
    B, H, S, D = q.shape
    Hkv, SK = k.shape[1], k.shape[2]
    if D not in BWD_HEAD_DIMS:
        raise ValueError(f"attention_backward: head dim {D} not supported yet "
                         f"(the kernels take {BWD_HEAD_DIMS})")
    if do.shape != q.shape or o.shape != q.shape or lse.shape != (B, H, S):
        raise ValueError("attention_backward: do and o must be q's shape, lse (B, H, S)")
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    dq = torch.empty((B, H, S, D), device=q.device, dtype=q.dtype)
    dk = torch.empty((B, Hkv, SK, D), device=q.device, dtype=k.dtype)
    dv = torch.empty((B, Hkv, SK, D), device=q.device, dtype=v.dtype)
    if dk.numel() == 0 or dq.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    from .attention import _rows

    q2, k2, v2, o2, do2 = (_rows(t, D) for t in (q, k, v, o, do.to(q.dtype)))
    lse = lse.contiguous()
    G = H // Hkv
    d256 = D > 128   # kitjit/nn/attention_backward_d256.py: 64 keys a program, two roles
    cfg = dict(bwd_config_d256(causal) if d256 else bwd_config(D, causal), **(config or {}))
    BM = cfg["BM"]
    SP = kit.cdiv(S, BM) * BM   # rows of LSE, Δ (and dQᵀ) padded to whole blocks for TMA
    lse2 = torch.empty((B * H, SP), device=q.device, dtype=torch.float32)
    delta2 = torch.empty((B * H, SP), device=q.device, dtype=torch.float32)
    bwd_preprocess[(SP // BM, B * H)](o2, do2, lse, delta2, lse2, S, SP, BM=BM, D=D)
    trans = cfg.get("KEYS_AS_ROWS", False)
    if trans:
        dqa = torch.zeros((B * H * D, SP), device=q.device, dtype=torch.float32)
    else:
        dqa = torch.zeros((B * H * S, D), device=q.device, dtype=torch.float32)
    nkv = kit.cdiv(SK, cfg["BN"])
    lpt = causal and cfg.get("LPT", True)
    # causal, longest first in groups of HG K/V heads whose Q and dO (G*S*D*4 bytes) share
    # ~24 MB of the 50 MB L2
    hg = cfg.pop("HG", None) or max(1, min(B * Hkv, (24 << 20) // (G * S * D * 4)))
    kernel = bwd_kernel_d256 if d256 else bwd_kernel
    kernel[(nkv * B * Hkv,) if lpt else (nkv, B * Hkv)](
        q2, k2, v2, do2, dk, dv, dqa, lse2, delta2, S, SK, H, G, SP, hg, scale, scale * LOG2E,
        D=D, CAUSAL=causal, num_warps=12, **cfg)
    dq_convert[(kit.cdiv(S, 64), B * H)](dqa, dq, S, SP, scale, BM=64, D=D, TRANS=trans)
    return dq, dk, dv
