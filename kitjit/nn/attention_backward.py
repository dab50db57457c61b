"""FlashAttention backward on Hopper (FA2's algorithm, on WGMMA and TMA like the forward).

Three kernels, no atomics (deterministic):
- `bwd_preprocess`: delta_i = sum_d dO_id O_id (fp32), one value per query row.
- `dkdv_kernel`: one program per BN keys of one K/V head. K and V stay in shared memory while
  Q and dO stream through a TMA ring over the query blocks of every query head of the GQA
  group (so dK and dV come out summed over the group, no atomics). Everything is computed
  transposed, keys as the MMA rows, so that each product has its A operand in registers in
  the accumulator layout of the previous MMA (as the forward's P V):
      Sᵀ = K Qᵀ, Pᵀ = exp(Sᵀ·scale − L), dV += Pᵀ dO, dPᵀ = V dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − Δ),
      dK += dSᵀ Q.
- `dq_kernel`: one program per BM query rows: Q and dO in shared memory, K and V streaming;
      S = Q Kᵀ, P = exp(S·scale − L), dP = dO Vᵀ, dS = P ∘ (dP − Δ), dQ += dS K.
  (S and dP are recomputed: 7 MMAs per block pair instead of FA2's 5 with fp32 atomics on dQ;
  the price of keeping every A operand in registers without a register transpose.)

P is recomputed from the forward's log-sum-exp L (natural log, (B, H, S) fp32). Causal is
top-left aligned as torch's `is_causal` (query i sees keys 0..i, also for S != SK). Rows past
a head's S (or keys past SK) read the next head's rows through the 2-D descriptors; they are
masked to P = 0 (a select, so an overflowing exp of garbage never leaks) and never stored.
"""

import functools
import math

import torch

import kitjit as kit
from kitjit import launcher as _launcher
from kitjit.nn._host import Rows, Site, int_facts, on_reset, workspace

LOG2E = 1.4426950408889634


@kit.jit
def bwd_preprocess(O, DO, Delta, n_rows, BM: kit.constexpr, D: kit.constexpr):
    """Delta[r] = sum(O[r, :] * dO[r, :]) in fp32 over the (rows, D) views."""
    rows = kit.program_id(0) * BM + kit.arange(0, BM)
    live = rows < n_rows
    offs = rows[:, None] * D + kit.arange(0, D)[None, :]
    o = kit.load(O + offs, mask=live[:, None], other=0.0).to(kit.float32)
    do = kit.load(DO + offs, mask=live[:, None], other=0.0).to(kit.float32)
    kit.store(Delta + rows, kit.sum(o * do, axis=1), mask=live)


@kit.jit
def dkdv_kernel(Q, K, V, DO, DK, DV, L, Delta, S, SK, H, G, sm_scale, qk_scale,
                BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr,
                CAUSAL: kit.constexpr, STAGES: kit.constexpr):
    """Q, dO: (B*H*S, D) rows; K, V, dK, dV: (B*H_kv*SK, D) rows. One program per BN keys of
    one K/V head (BN = 64 per warpgroup: keys are the MMA rows)."""
    n0 = kit.program_id(0) * BN
    kvbh = kit.program_id(1)                       # batch * H_kv + kv head
    hkv = H // G
    bh0 = kvbh // hkv * H + kvbh % hkv * G         # its first query head
    k = kit.shared((BN, D), K.dtype.element_ty)
    v = kit.shared((BN, D), V.dtype.element_ty)
    q = kit.shared((STAGES, BM, D), Q.dtype.element_ty)
    do = kit.shared((STAGES, BM, D), DO.dtype.element_ty)
    kv_ready = kit.mbarriers(1)
    ready = kit.mbarriers(STAGES)
    kit.tma_load(k, K, (kvbh * SK + n0, 0), kv_ready[0])
    kit.tma_load(v, V, (kvbh * SK + n0, 0), kv_ready[0])
    # causal, top-left: query i sees key j iff j <= i, so query blocks before n0 see none
    first = n0 // BM if CAUSAL else 0
    nq = kit.maximum(kit.cdiv(S, BM) - first, 0)   # query blocks per head (0: dK = dV = 0)
    n = G * nq                                     # over every query head of the group
    for s in kit.static_range(STAGES):
        if s < n:
            r = (bh0 + s // nq) * S + (first + s % nq) * BM
            kit.tma_load(q[s], Q, (r, 0), ready[s])
            kit.tma_load(do[s], DO, (r, 0), ready[s])
    keys = n0 + kit.arange(0, BN)
    dk = kit.zeros((BN, D), kit.float32)
    dv = kit.zeros((BN, D), kit.float32)
    kit.mbarrier_wait(kv_ready[0], 0)
    for t in range(n):
        s = t % STAGES
        bh = bh0 + t // nq
        rows = (first + t % nq) * BM + kit.arange(0, BM)
        live = rows < S
        lse = kit.load(L + bh * S + rows, mask=live, other=0.0) * LOG2E
        dlt = kit.load(Delta + bh * S + rows, mask=live, other=0.0)
        keep = live[None, :]
        if CAUSAL:
            keep = keep & (keys[:, None] <= rows[None, :])
        kit.mbarrier_wait(ready[s], t // STAGES % 2)
        st = kit.mma(k, q[s].T, kit.zeros((BN, BM), kit.float32))
        pt = kit.where(keep, kit.exp2(st * qk_scale - lse[None, :]), 0.0)
        dv = kit.mma(pt.to(DO.dtype.element_ty), do[s], dv)
        dpt = kit.mma(v, do[s].T, kit.zeros((BN, BM), kit.float32))
        dst = pt * (dpt - dlt[None, :])
        dk = kit.mma(dst.to(Q.dtype.element_ty), q[s], dk)
        if t + STAGES < n:                         # the MMAs are done with stage s: refill
            u = t + STAGES
            r = (bh0 + u // nq) * S + (first + u % nq) * BM
            kit.tma_load(q[s], Q, (r, 0), ready[s])
            kit.tma_load(do[s], DO, (r, 0), ready[s])
    dcol = kit.arange(0, D)
    offs = (kvbh * SK + keys)[:, None] * D + dcol[None, :]
    kmask = (keys < SK)[:, None]
    kit.store(DK + offs, (dk * sm_scale).to(DK.dtype.element_ty), mask=kmask)
    kit.store(DV + offs, dv.to(DV.dtype.element_ty), mask=kmask)


@kit.jit
def dq_kernel(Q, K, V, DO, DQ, L, Delta, S, SK, H, G, sm_scale, qk_scale,
              BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr,
              CAUSAL: kit.constexpr, STAGES: kit.constexpr):
    """One program per BM query rows of one head; K and V blocks stream through a ring."""
    m0 = kit.program_id(0) * BM
    bh = kit.program_id(1)
    kvh = bh // H * (H // G) + bh % H // G
    q = kit.shared((BM, D), Q.dtype.element_ty)
    do = kit.shared((BM, D), DO.dtype.element_ty)
    k = kit.shared((STAGES, BN, D), K.dtype.element_ty)
    v = kit.shared((STAGES, BN, D), V.dtype.element_ty)
    q_ready = kit.mbarriers(1)
    ready = kit.mbarriers(STAGES)
    kit.tma_load(q, Q, (bh * S + m0, 0), q_ready[0])
    kit.tma_load(do, DO, (bh * S + m0, 0), q_ready[0])
    end = kit.minimum(SK, m0 + BM) if CAUSAL else SK
    n_kv = kit.cdiv(end, BN)
    for s in kit.static_range(STAGES):
        if s < n_kv:
            kit.tma_load(k[s], K, (kvh * SK + s * BN, 0), ready[s])
            kit.tma_load(v[s], V, (kvh * SK + s * BN, 0), ready[s])
    rows = m0 + kit.arange(0, BM)
    live = rows < S
    lse = kit.load(L + bh * S + rows, mask=live, other=0.0) * LOG2E
    dlt = kit.load(Delta + bh * S + rows, mask=live, other=0.0)
    dq = kit.zeros((BM, D), kit.float32)
    kit.mbarrier_wait(q_ready[0], 0)
    for j in range(n_kv):
        s = j % STAGES
        cols = j * BN + kit.arange(0, BN)
        keep = cols[None, :] < SK
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        kit.mbarrier_wait(ready[s], j // STAGES % 2)
        sc = kit.mma(q, k[s].T, kit.zeros((BM, BN), kit.float32))
        p = kit.where(keep, kit.exp2(sc * qk_scale - lse[:, None]), 0.0)
        dp = kit.mma(do, v[s].T, kit.zeros((BM, BN), kit.float32))
        ds = p * (dp - dlt[:, None])
        dq = kit.mma(ds.to(K.dtype.element_ty), k[s], dq)
        if j + STAGES < n_kv:
            kit.tma_load(k[s], K, (kvh * SK + (j + STAGES) * BN, 0), ready[s])
            kit.tma_load(v[s], V, (kvh * SK + (j + STAGES) * BN, 0), ready[s])
    dcol = kit.arange(0, D)
    kit.store(DQ + (bh * S + rows)[:, None] * D + dcol[None, :],
              (dq * sm_scale).to(DQ.dtype.element_ty), mask=live[:, None])


BWD_HEAD_DIMS = (64, 128)


def default_config(D):
    """(dK/dV config, dQ config). Keys are the dK/dV kernel's MMA rows: 64 per warpgroup.
    Measured on an H100 at B4 H32 S4096 (bf16): 64x64 blocks on one warpgroup beat 128-row
    blocks on two (these kernels hold dK and dV, or dQ, in registers: ~240 of 255 at D=128);
    D=64 keeps a third stage of Q and dO in flight (309 against 260 TFLOP/s, non-causal)."""
    return (dict(BM=64, BN=64, STAGES=3 if D <= 64 else 2, num_warps=4),
            dict(BM=64, BN=64, STAGES=2, num_warps=4))


def attention_backward(do, q, k, v, o, lse, causal: bool = False, sm_scale: float | None = None,
                       dkdv_config=None, dq_config=None):
    """Gradients (dq, dk, dv) of `attention(q, k, v, causal, sm_scale)` given its output o,
    its log-sum-exp lse (B, H, S) and the output's gradient do. Shapes as `attention`:
    q, o, do (B, H, S, D), k, v (B, H_kv, SK, D); dk and dv are summed over the query heads
    that share a K/V head (GQA). Gradients are new contiguous tensors of q's dtype."""
    B, H, S, D = q.shape
    Hkv, SK = k.shape[1], k.shape[2]
    if D not in BWD_HEAD_DIMS:
        raise ValueError(f"attention_backward: head dim {D} not supported yet "
                         f"(the kernels take {BWD_HEAD_DIMS})")
    if do.shape != q.shape or o.shape != q.shape or lse.shape != (B, H, S):
        raise ValueError("attention_backward: do and o must be q's shape, lse (B, H, S)")
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    dev = q.device
    if any(t.device != dev for t in (do, k, v, o, lse)):
        raise ValueError(f"attention_backward: do, q, k, v, o, lse must be on one device, got "
                         f"{[str(t.device) for t in (do, q, k, v, o, lse)]}")
    return route(B, H, Hkv, S, SK, D, causal, scale, tuple(sorted((dkdv_config or {}).items())),
                 tuple(sorted((dq_config or {}).items())), q.dtype,
                 -1 if dev.type != "cuda" else dev.index if dev.index is not None
                 else torch.cuda.current_device())(do, q, k, v, o, lse)


class Route:
    """One backward shape, configuration, dtype and device: the three launch sites and the
    numbers of a call, made once (kitjit/nn/_host.py: the first call launches through
    `kernel[grid](...)`, the next through the kernels' own launchers with the TMA operands
    by pointer, delta in the workspace)."""

    def __init__(self, B, H, Hkv, S, SK, D, causal, scale, dkdv_config, dq_config, dtype,
                 device):
        c1, c2 = default_config(D)
        c1 = dict(c1, **dict(dkdv_config))
        c2 = dict(c2, **dict(dq_config))
        G = H // Hkv
        n_rows = B * H * S
        self.dtype, self.device, self.D = dtype, device, D
        self.tdev = torch.device("cuda", device) if device >= 0 else torch.device("cpu")
        self.qshape, self.kshape, self.lshape = (B, H, S, D), (B, Hkv, SK, D), (B, H, S)
        self.empty = B * Hkv * SK * D == 0 or n_rows * D == 0
        self.qrows, self.kvrows, self.n_rows = n_rows, B * Hkv * SK, n_rows
        self.esize = torch.empty((), dtype=dtype).element_size()
        self.pgrid = (kit.cdiv(n_rows, 64),)
        self.kgrid = (kit.cdiv(SK, c1["BN"]), B * Hkv, 1)
        self.qgrid = (kit.cdiv(S, c2["BM"]), B * H, 1)
        ints = (S, SK, H, G)
        self.tail = (*ints, scale, scale * LOG2E)
        facts = (dtype, device, *int_facts(*ints))
        self.pre = Site(bwd_preprocess, dict(BM=64, D=D), (dtype, device, *int_facts(n_rows)),
                        device)
        self.dkdv = Site(dkdv_kernel, dict(D=D, CAUSAL=causal, **c1), facts, device)
        self.dq = Site(dq_kernel, dict(D=D, CAUSAL=causal, **c2), facts, device)
        self.rows = (Rows(-1, 0, 0, 0),) * 4

    def __call__(self, do, q, k, v, o, lse):
        if self.dq.fn is None or self.dkdv.fn is None or self.pre.fn is None or self.empty \
                or _launcher._is_compiling():
            return self.slow(do, q, k, v, o, lse)
        dp, qp, kp, vp, op, lp = (do.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                  o.data_ptr(), lse.data_ptr())
        dt = self.dtype          # (q's: the route's key) every tensor as the first call's
        if (dp | qp | kp | vp | op | lp) & 15 or do.dtype is not dt or k.dtype is not dt or \
                v.dtype is not dt or o.dtype is not dt or lse.dtype is not torch.float32 or \
                not (do.is_contiguous() and q.is_contiguous() and k.is_contiguous() and
                     v.is_contiguous() and o.is_contiguous() and lse.is_contiguous()):
            return self.slow(do, q, k, v, o, lse)
        ps = (dp, qp, kp, vp)
        ws = workspace(self.device, self.n_rows)
        if ws is None:                       # the stream is being captured
            return self.slow(do, q, k, v, o, lse)
        delta = ws[1]
        dq, dk, dv = q.new_empty(self.qshape), k.new_empty(self.kshape), \
            v.new_empty(self.kshape)
        dqp, dkp, dvp = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
        rows = self.rows
        if (rows[0].ptr, rows[1].ptr, rows[2].ptr, rows[3].ptr) != ps:
            D, e = self.D, self.esize
            n = (self.qrows, self.qrows, self.kvrows, self.kvrows)
            self.rows = rows = tuple(r if r.ptr == p else Rows(p, m, D, e)
                                     for r, p, m in zip(rows, ps, n))
        dor, qr, kr, vr = rows
        self.pre.fn(self.pgrid, None, None, None, None, op, dp, delta, self.n_rows)
        self.dkdv.fn(self.kgrid, qr, kr, vr, dor, *(None,) * 10, qp, kp, vp, dp, dkp, dvp,
                     lp, delta, *self.tail)
        self.dq.fn(self.qgrid, qr, kr, vr, dor, *(None,) * 9, qp, kp, vp, dp, dqp, lp, delta,
                   *self.tail)
        return dq, dk, dv

    def slow(self, do, q, k, v, o, lse):
        """Through `kernel[grid](...)`: a route's first call, inputs that are not contiguous,
        aligned or of q's dtype (copied), the interpreter, tracing, graph capture."""
        D = self.D
        dq = torch.empty(self.qshape, device=self.tdev, dtype=q.dtype)
        dk = torch.empty(self.kshape, device=self.tdev, dtype=k.dtype)
        dv = torch.empty(self.kshape, device=self.tdev, dtype=v.dtype)
        if self.empty:
            return dq.zero_(), dk.zero_(), dv.zero_()
        from .attention import _rows

        q2, k2, v2, o2, do2 = (_rows(t, D) for t in (q, k, v, o, do.to(q.dtype)))
        lse = lse.contiguous()
        delta = torch.empty(self.lshape, device=self.tdev, dtype=torch.float32)
        self.pre.slow(self.pgrid, o2, do2, delta, self.n_rows)
        self.dkdv.slow(self.kgrid, q2, k2, v2, do2, dk, dv, lse, delta, *self.tail)
        self.dq.slow(self.qgrid, q2, k2, v2, do2, dq, lse, delta, *self.tail)
        return dq, dk, dv


route = functools.lru_cache(maxsize=1024)(Route)
on_reset(route.cache_clear)
