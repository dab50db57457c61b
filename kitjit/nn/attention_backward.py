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

import functools
import math

import torch

import kitjit as kit
from kitjit import launcher as _launcher
from kitjit.nn._host import Rows, Site, int_facts, on_reset, workspace
from kitjit.nn.attention_backward_d256 import bwd_config_d256, bwd_kernel_d256

LOG2E = 1.4426950408889634


@kit.jit
def bwd_preprocess(O, DO, L, Delta2, LSE2, DQA, S, SP, BM: kit.constexpr, D: kit.constexpr,
                   TRANS: kit.constexpr):
    """Per query row, in (B*H, SP) rows padded past S: Δ = sum(O * dO) (0 in the padding) and
    the LSE in log2 (+inf in the padding, so that P = exp2(S - LSE) is 0 there, unmasked).
    Also zeroes the block's part of the fp32 dQ sums DQA (dQᵀ rows (B*H*D, SP) if TRANS, else
    dQ (B*H, S, D)) that bwd_kernel adds into: no memset launch of its own."""
    m = kit.program_id(0) * BM + kit.arange(0, BM)
    bh = kit.program_id(1)
    live = m < S
    d = kit.arange(0, D)
    offs = (bh * S + m)[:, None] * D + d[None, :]
    o = kit.load(O + offs, mask=live[:, None], other=0.0).to(kit.float32)
    do = kit.load(DO + offs, mask=live[:, None], other=0.0).to(kit.float32)
    lse = kit.load(L + bh * S + m, mask=live, other=float("inf"))
    kit.store(Delta2 + bh * SP + m, kit.sum(o * do, axis=1), mask=m < SP)
    kit.store(LSE2 + bh * SP + m, kit.where(live, lse * LOG2E, float("inf")), mask=m < SP)
    if TRANS:   # (the grid covers the SP columns exactly: no mask, 16-byte stores)
        kit.store(DQA + (bh * D + d)[:, None] * SP + m[None, :], kit.zeros((D, BM), kit.float32))
    else:
        kit.store(DQA + offs, kit.zeros((BM, D), kit.float32), mask=live[:, None])


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
    kit.tma_store(DQA, (bh, m0, 0), dq, reduce="add")   # rows past S: dropped
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
    rows (B*H*D, SP) when KEYS_AS_ROWS, else dQ (B*H, S, D)). LSE2, Delta2: (B*H, SP).
    Q, dO: (B*H, S, D), K, V: (B*H_kv, SK, D), copied per head: a tile past a head's end
    reads zeros (keys past SK then give dQ nothing, queries past S give dK and dV nothing)
    and a dQ store's rows past S are dropped, so no other head's NaN or inf leaks in."""
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
        kit.tma_load(k, K, (kvbh, n0, 0), kv_ready[0])   # keys past SK: zeros
        kit.tma_load(v, V, (kvbh, n0, 0), kv_ready[0])
        for t in range(n):
            s = t % STAGES
            kit.mbarrier_wait(empty[s], t // STAGES % 2 ^ 1)
            bh = bh0 + t // nq
            m0 = (first + t % nq) * BM
            kit.tma_load(q[s], Q, (bh, m0, 0), ready[s])     # queries past S: zeros
            kit.tma_load(do[s], DO, (bh, m0, 0), ready[s])
            kit.tma_load(lse_s[s], LSE2, (bh, m0), ready[s])
            kit.tma_load(dlt_s[s], Delta2, (bh, m0), ready[s])
    else:
        kit.setmaxnreg(240)
        dk = kit.zeros((BN, D), kit.float32)
        dv = kit.zeros((BN, D), kit.float32)
        kit.mbarrier_wait(kv_ready[0], 0)
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
    else dQ (B*H, S, D). One program per BM query rows of one head."""
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
    dev = q.device
    r = route(B, H, Hkv, S, SK, D, bool(causal), scale,
              tuple(sorted(config.items())) if config else (), q.dtype,
              -1 if dev.type != "cuda" else dev.index if dev.index is not None
              else torch.cuda.current_device())
    return r(do, q, k, v, o, lse)


class Route:
    """One backward shape, configuration, dtype and device: the three launch sites
    (preprocess, bwd_kernel, dq_convert) and every number of a call, made once
    (kitjit/nn/_host.py: the first call launches through `kernel[grid](...)`, the next ones
    through the kernels' own launchers, TMA operands by pointer, Δ, the log2 LSE and the dQ
    sums in the workspace). A training step calls the same shapes every step, and at small
    shapes the host cost of three generic launches and five allocations is what it waits on.
    Calling it with (do, q, k, v, o, lse) returns (dq, dk, dv)."""

    def __init__(self, B, H, Hkv, S, SK, D, causal, scale, config, dtype, device):
        d256 = D > 128   # kitjit/nn/attention_backward_d256.py: 64 keys a program, two roles
        cfg = dict(bwd_config_d256(causal) if d256 else bwd_config(D, causal), **dict(config))
        BM = cfg["BM"]
        G = H // Hkv
        SP = kit.cdiv(S, BM) * BM   # rows of LSE, Δ (and dQᵀ) padded to whole blocks for TMA
        trans = cfg.get("KEYS_AS_ROWS", False)
        nkv = kit.cdiv(SK, cfg["BN"])
        lpt = causal and cfg.get("LPT", True)
        # causal, longest first in groups of HG K/V heads whose Q and dO (G*S*D*4 bytes) share
        # ~24 MB of the 50 MB L2
        hg = cfg.pop("HG", None) or max(1, min(B * Hkv, (24 << 20) // max(1, G * S * D * 4)))
        self.dtype, self.device, self.D = dtype, device, D
        self.tdev = torch.device("cuda", device) if device >= 0 else torch.device("cpu")
        self.qshape, self.kshape, self.lshape = (B, H, S, D), (B, Hkv, SK, D), (B, H, S)
        self.empty = B * H * S * D == 0 or B * Hkv * SK * D == 0
        self.S, self.SK, self.kvheads, self.bh, self.SP = S, SK, B * Hkv, B * H, SP
        self.esize = torch.empty((), dtype=dtype).element_size()
        # dQ sums: dQᵀ rows, or dQ per head (3-d: a store's rows past S are dropped)
        self.dqa_shape = (B * H * D, SP) if trans else (B * H, S, D)
        self.pre_grid = (SP // BM, B * H)
        self.pre_ints = (S, SP)
        self.pre = Site(bwd_preprocess, dict(BM=BM, D=D, TRANS=trans),
                        (dtype, device, *int_facts(S, SP)), device)
        self.grid = (nkv * B * Hkv,) if lpt else (nkv, B * Hkv)
        self.ints = (S, SK, H, G, SP, hg)
        self.tail = (*self.ints, scale, scale * LOG2E)
        self.main = Site(bwd_kernel_d256 if d256 else bwd_kernel,
                         dict(D=D, CAUSAL=causal, num_warps=12, **cfg),
                         (dtype, device, *int_facts(*self.ints)), device)
        self.conv_grid = (kit.cdiv(S, 64), B * H)
        self.conv_tail = (S, SP, scale)
        self.conv = Site(dq_convert, dict(BM=64, D=D, TRANS=trans),
                         (dtype, device, *int_facts(S, SP)), device)
        # workspace (fp32 elements): dQ sums, then Δ, then the log2 LSE
        n = B * H * S * D if not trans else B * H * D * SP
        self.delta_off = 4 * _up(n)
        self.lse_off = self.delta_off + 4 * _up(B * H * SP)
        self.ws_numel = self.lse_off // 4 + _up(B * H * SP)
        self.pre_pad = (None,) * 8
        self.main_pad = (None,) * 8
        self.conv_pad = (None,) * 5
        self.rows = (Rows(-1, 0, 0, 0),) * 4       # the last call's Q, K, V, dO
        self.wrows = (-1, None, None, None)        # the workspace's dQ sums, Δ, LSE

    def __call__(self, do, q, k, v, o, lse):
        pre, main, conv = self.pre, self.main, self.conv
        if pre.fn is None or main.fn is None or conv.fn is None or self.empty \
                or _launcher._is_compiling():
            return self.slow(do, q, k, v, o, lse)
        dop, qp, kp, vp, op, lp = (do.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                   o.data_ptr(), lse.data_ptr())
        dt = self.dtype
        if (dop | qp | kp | vp | op | lp) & 15 or do.dtype != dt or o.dtype != dt \
                or q.dtype != dt or k.dtype != dt or v.dtype != dt or lse.dtype != torch.float32 \
                or not (do.is_contiguous() and q.is_contiguous() and k.is_contiguous()
                        and v.is_contiguous() and o.is_contiguous() and lse.is_contiguous()):
            return self.slow(do, q, k, v, o, lse)
        ws = workspace(self.device, self.ws_numel)
        if ws is None:                       # the stream is being captured
            return self.slow(do, q, k, v, o, lse)
        wp = ws[1]
        dq = q.new_empty(self.qshape)
        dk = q.new_empty(self.kshape)
        dv = q.new_empty(self.kshape)
        qr, kr, vr, dor = self.rows
        if qr.ptr != qp or kr.ptr != kp or vr.ptr != vp or dor.ptr != dop:
            D, e = self.D, self.esize
            qr = qr if qr.ptr == qp else Rows(qp, self.S, D, e, self.bh)
            kr = kr if kr.ptr == kp else Rows(kp, self.SK, D, e, self.kvheads)
            vr = vr if vr.ptr == vp else Rows(vp, self.SK, D, e, self.kvheads)
            dor = dor if dor.ptr == dop else Rows(dop, self.S, D, e, self.bh)
            self.rows = qr, kr, vr, dor
        w = self.wrows
        if w[0] != wp:
            dqa = Rows(wp, *self.dqa_shape, 4) if len(self.dqa_shape) == 2 else \
                Rows(wp, *self.dqa_shape[1:], 4, self.dqa_shape[0])
            w = self.wrows = (wp, dqa,
                              Rows(wp + self.delta_off, self.bh, self.SP, 4),
                              Rows(wp + self.lse_off, self.bh, self.SP, 4))
        _, dqar, dltr, lser = w
        dlt, l2 = wp + self.delta_off, wp + self.lse_off
        pre.fn(self.pre_grid, *self.pre_pad, op, dop, lp, dlt, l2, wp, *self.pre_ints)
        main.fn(self.grid, qr, kr, vr, dor, None, None, dqar, lser, dltr, *self.main_pad,
                qp, kp, vp, dop, dk.data_ptr(), dv.data_ptr(), wp, l2, dlt, *self.tail)
        conv.fn(self.conv_grid, *self.conv_pad, wp, dq.data_ptr(), *self.conv_tail)
        return dq, dk, dv

    def slow(self, do, q, k, v, o, lse):
        """Through `kernel[grid](...)`: a route's first call, inputs that are not contiguous,
        aligned or of the route's dtypes (copied), the interpreter, torch.compile's tracing,
        graph capture (every buffer from torch)."""
        from .attention import _heads, _rows

        D, dev = self.D, self.tdev
        dq = torch.empty(self.qshape, device=dev, dtype=self.dtype)
        dk = torch.empty(self.kshape, device=dev, dtype=self.dtype)
        dv = torch.empty(self.kshape, device=dev, dtype=self.dtype)
        if self.empty:
            return dq.zero_(), dk.zero_(), dv.zero_()
        # (in the route's dtype: the sites' direct launchers are made by this launch)
        q2, k2, v2, do2 = (_heads(t.to(self.dtype), D) for t in (q, k, v, do))
        o2 = _rows(o.to(self.dtype), D)
        lse = lse.to(torch.float32).contiguous()
        lse2 = torch.empty((self.bh, self.SP), device=dev, dtype=torch.float32)
        delta2 = torch.empty((self.bh, self.SP), device=dev, dtype=torch.float32)
        dqa = torch.empty(self.dqa_shape, device=dev, dtype=torch.float32)  # zeroed by pre
        self.pre.slow(self.pre_grid, o2, do2, lse, delta2, lse2, dqa, *self.pre_ints)
        self.main.slow(self.grid, q2, k2, v2, do2, dk, dv, dqa, lse2, delta2, *self.tail)
        self.conv.slow(self.conv_grid, dqa, dq, *self.conv_tail)
        return dq, dk, dv


_WS_ALIGN = 64   # workspace regions start on 256-byte boundaries


def _up(n: int) -> int:
    return -(-n // _WS_ALIGN) * _WS_ALIGN


route = functools.lru_cache(maxsize=1024)(Route)
on_reset(route.cache_clear)
