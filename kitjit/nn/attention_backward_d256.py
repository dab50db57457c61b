"""FlashAttention backward for head dim 256 on Hopper (the D = 64 / 128 kernel is
kitjit/nn/attention_backward.py; read that one first: same preprocess, dQ buffer, masks).

Why a kernel of its own: dK and dV of BN keys x 256 in fp32 are 2 * BN * 256 registers. With
the D = 128 kernel's 128 keys that is 256 registers a thread over two warpgroups, more than a
thread has. Here a program holds BN = 64 keys (128 registers a thread for one of dK or dV in
one warpgroup), and its two consumer warpgroups are two roles with different work, so that
every MMA has 64 rows (one warpgroup's) and no operand needs more than one warpgroup:

- warpgroup 1 (P):  Sᵀ = K Qᵀ, Pᵀ = exp2(Sᵀ·scale − LSE) (masked), Pᵀ to shared memory for
  warpgroup 2, dV += Pᵀ dO (Pᵀ from registers).
- warpgroup 2 (dS): dPᵀ = V dOᵀ, Pᵀ from shared memory, dSᵀ = Pᵀ ∘ (dPᵀ − Δ),
  dK += dSᵀ Q (from registers), dQ = dS K (dSᵀ through shared memory, read transposed),
  reduce-added into the fp32 dQ buffer by TMA in two halves of 128 columns (a 64 x 256 dQ
  would be another 128 registers on top of dK's).

K and Q live in shared memory as two column halves (a stage index each, `k[h]`, the same
bytes as one 256-wide tile: column chunks one after another), so that dQ's B operand can be
one half; Sᵀ is then two MMAs of 128. The producer streams Q (+ LSE, QSTAGES deep) and dO
(+ Δ, DOSTAGES deep) through two rings, released separately: Q after warpgroup 1's Sᵀ and
warpgroup 2's dK, dO after dPᵀ and dV, so each load runs under the other MMAs. Shared memory
with one stage each: K, V 64 KB, Q 32 KB, dO 32 KB, Pᵀ and dSᵀ 16 KB, dQ staging 32 KB:
176 KB, 180 KB with LSE, Δ and the mbarriers (a second stage of either is 32 KB more).
Keys past SK have P = 0 (so dS = 0, and neither dQ nor the unstored dK, dV rows see them).

Pᵀ passes between the roles through shared memory: the writers' kit.barrier() then one
thread's mbarrier arrive (release) and the readers' wait (acquire) order every thread's
stores before every reader's loads. compute-sanitizer's racecheck does not follow that chain
and reports the Pᵀ stores and loads as hazards (benchmarks/NOTES.md, 2026-11-24).
"""

import kitjit as kit


@kit.jit
def p_step(k, q, do, lse_s, pt_s, q_ready, q_empty, do_ready, do_empty, p_full, p_free,
           n0, m0, t, SK, qk_scale, dv, BM: kit.constexpr, BN: kit.constexpr,
           QSTAGES: kit.constexpr, DOSTAGES: kit.constexpr, MASK: kit.constexpr,
           CAUSAL: kit.constexpr):
    """Warpgroup 1, query block t: Sᵀ, Pᵀ (to shared memory for warpgroup 2), dV += Pᵀ dO."""
    s = t % QSTAGES
    kit.mbarrier_wait(q_ready[s], t // QSTAGES % 2)
    st = kit.mma(k[0], q[2 * s].T, kit.zeros((BN, BM), kit.float32))
    st = kit.mma(k[1], q[2 * s + 1].T, st)
    pt = kit.exp2(st * qk_scale - kit.load(lse_s[s]), ftz=True)
    kit.barrier()                                  # every thread has read the LSE
    kit.mbarrier_arrive(q_empty[s])                # warpgroup 1 is done with Q
    if MASK:   # keys past SK; causal (top-left): key j sees query i >= j
        keys = n0 + kit.arange(0, BN)
        keep = (keys < SK)[:, None]
        if CAUSAL:
            keep = keep & (keys[:, None] <= (m0 + kit.arange(0, BM))[None, :])
        pt = kit.where(keep, pt, 0.0)
    ptb = pt.to(q.dtype)
    kit.mbarrier_wait(p_free[0], t % 2 ^ 1)        # warpgroup 2 has read the last Pᵀ
    kit.store(pt_s, ptb)
    kit.barrier()                                  # all 128 threads' rows are written
    kit.mbarrier_arrive(p_full[0])
    u = t % DOSTAGES
    kit.mbarrier_wait(do_ready[u], t // DOSTAGES % 2)
    dv = kit.mma(ptb, do[u], dv)
    kit.mbarrier_arrive(do_empty[u])               # dV's MMA is done with dO
    return dv


@kit.jit
def ds_step(k, v, q, do, dlt_s, pt_s, ds_s, DQA, q_ready, q_empty, do_ready, do_empty, p_full,
            p_free, bh, m0, t, dk0, dk1, BM: kit.constexpr, BN: kit.constexpr,
            DH: kit.constexpr, QSTAGES: kit.constexpr, DOSTAGES: kit.constexpr, S):
    """Warpgroup 2, query block t: dPᵀ, dSᵀ, dK += dSᵀ Q (two column halves), dQ = dS K
    reduce-added in two halves."""
    s = t % QSTAGES
    u = t % DOSTAGES
    kit.mbarrier_wait(do_ready[u], t // DOSTAGES % 2)
    dpt = kit.mma(v, do[u].T, kit.zeros((BN, BM), kit.float32))
    dlt = kit.load(dlt_s[u])
    kit.mbarrier_wait(p_full[0], t % 2)
    pt = kit.load(pt_s)
    kit.barrier()                                  # every thread has read Pᵀ and Δ
    kit.mbarrier_arrive(p_free[0])
    kit.mbarrier_arrive(do_empty[u])               # dPᵀ's MMA is done with dO
    dst = (pt.to(kit.float32) * (dpt - dlt)).to(q.dtype)
    kit.store(ds_s, dst)                           # for dQ (the last dQ MMA has finished)
    kit.mbarrier_wait(q_ready[s], t // QSTAGES % 2)
    dk0 = kit.mma(dst, q[2 * s], dk0, pending=1)
    dk1 = kit.mma(dst, q[2 * s + 1], dk1)
    kit.barrier()                                  # dSᵀ is in shared memory, all rows
    kit.mbarrier_arrive(q_empty[s])                # dK's MMAs are done with Q (after the
    #                  barrier: an arrival right after plain smem stores would first sync)
    dq = kit.mma(ds_s.T, k[0], kit.zeros((BM, DH), kit.float32))
    kit.tma_store(DQA, (bh, m0, 0), dq, reduce="add")     # rows past S: dropped
    dq = kit.mma(ds_s.T, k[1], kit.zeros((BM, DH), kit.float32))
    kit.tma_store(DQA, (bh, m0, DH), dq, reduce="add")
    return dk0, dk1


@kit.jit
def bwd_kernel_d256(Q, K, V, DO, DK, DV, DQA, LSE2, Delta2, S, SK, H, G, SP, HG, sm_scale,
                    qk_scale, BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr,
                    CAUSAL: kit.constexpr, QSTAGES: kit.constexpr, DOSTAGES: kit.constexpr = 1,
                    LPT: kit.constexpr = True):
    """One program per BN keys of one K/V head (grid as `bwd_kernel`'s); num_warps = 12: a
    producer warpgroup and the two consumer roles above. Q, dO: (B*H, S, D), K, V:
    (B*H_kv, SK, D), DQA: dQ (B*H, S, D) fp32, all copied per head (tiles past a head's end
    read zeros, stores there are dropped: no other head's NaN or inf reaches this one's).
    LSE2, Delta2: (B*H, SP)."""
    if CAUSAL and LPT:   # longest first, in groups of HG K/V heads (as bwd_kernel)
        nkv = kit.cdiv(SK, BN)
        pid = kit.program_id(0)
        grp = pid // (nkv * HG)
        nh = kit.minimum(HG, kit.num_programs(0) // nkv - grp * HG)
        n0 = pid % (nkv * HG) // nh * BN
        kvbh = grp * HG + pid % (nkv * HG) % nh
    else:
        n0 = kit.program_id(0) * BN
        kvbh = kit.program_id(1)
    DH = D // 2
    hkv = H // G
    bh0 = kvbh // hkv * H + kvbh % hkv * G         # the group's first query head
    k = kit.shared((2, BN, DH), K.dtype.element_ty)            # column halves
    v = kit.shared((BN, D), V.dtype.element_ty)
    q = kit.shared((2 * QSTAGES, BM, DH), Q.dtype.element_ty)  # halves of each stage
    do = kit.shared((DOSTAGES, BM, D), DO.dtype.element_ty)
    lse_s = kit.shared((QSTAGES, 1, BM), kit.float32)
    dlt_s = kit.shared((DOSTAGES, 1, BM), kit.float32)
    pt_s = kit.shared((BN, BM), Q.dtype.element_ty)
    ds_s = kit.shared((BN, BM), Q.dtype.element_ty)
    kv_ready = kit.mbarriers(1)
    q_ready = kit.mbarriers(QSTAGES)
    q_empty = kit.mbarriers(QSTAGES, arrivals=2)
    do_ready = kit.mbarriers(DOSTAGES)
    do_empty = kit.mbarriers(DOSTAGES, arrivals=2)
    p_full = kit.mbarriers(1)
    p_free = kit.mbarriers(1)
    first = n0 // BM if CAUSAL else 0              # causal: earlier query blocks see no key
    nq = kit.maximum(kit.cdiv(S, BM) - first, 0)
    n = G * nq
    if kit.warpgroup_id() == 0:                    # producer
        kit.setmaxnreg(24)
        kit.tma_load(k[0], K, (kvbh, n0, 0), kv_ready[0])       # keys past SK: zeros
        kit.tma_load(k[1], K, (kvbh, n0, DH), kv_ready[0])
        kit.tma_load(v, V, (kvbh, n0, 0), kv_ready[0])
        for t in range(n):
            s = t % QSTAGES
            bh = bh0 + t // nq
            m0 = (first + t % nq) * BM
            kit.mbarrier_wait(q_empty[s], t // QSTAGES % 2 ^ 1)
            kit.tma_load(q[2 * s], Q, (bh, m0, 0), q_ready[s])  # queries past S: zeros
            kit.tma_load(q[2 * s + 1], Q, (bh, m0, DH), q_ready[s])
            kit.tma_load(lse_s[s], LSE2, (bh, m0), q_ready[s])
            u = t % DOSTAGES
            kit.mbarrier_wait(do_empty[u], t // DOSTAGES % 2 ^ 1)
            kit.tma_load(do[u], DO, (bh, m0, 0), do_ready[u])
            kit.tma_load(dlt_s[u], Delta2, (bh, m0), do_ready[u])
    else:
        kit.setmaxnreg(240)
        kit.mbarrier_wait(kv_ready[0], 0)
        if kit.warpgroup_id() == 1:                # P: Sᵀ, Pᵀ, dV
            dv = kit.zeros((BN, D), kit.float32)
            # masked blocks: the causal diagonal, or every block when keys pass SK
            nmask = kit.minimum(kit.cdiv(n0 + BN - 1, BM) - first, nq) if CAUSAL else 0
            if n0 + BN > SK:
                nmask = nq
            for g in range(G):
                for j in range(nmask):
                    dv = p_step(k, q, do, lse_s, pt_s, q_ready, q_empty, do_ready, do_empty,
                                p_full, p_free, n0, (first + j) * BM, g * nq + j, SK,
                                qk_scale, dv, BM, BN, QSTAGES, DOSTAGES, True, CAUSAL)
                for j in range(nmask, nq):
                    dv = p_step(k, q, do, lse_s, pt_s, q_ready, q_empty, do_ready, do_empty,
                                p_full, p_free, n0, (first + j) * BM, g * nq + j, SK,
                                qk_scale, dv, BM, BN, QSTAGES, DOSTAGES, False, CAUSAL)
            keys = n0 + kit.arange(0, BN)
            offs = (kvbh * SK + keys)[:, None] * D + kit.arange(0, D)[None, :]
            kit.store(DV + offs, dv.to(DV.dtype.element_ty), mask=(keys < SK)[:, None])
        else:                                      # dS: dPᵀ, dSᵀ, dK, dQ
            dk0 = kit.zeros((BN, DH), kit.float32)
            dk1 = kit.zeros((BN, DH), kit.float32)
            for t in range(n):
                dk0, dk1 = ds_step(k, v, q, do, dlt_s, pt_s, ds_s, DQA, q_ready, q_empty,
                                   do_ready, do_empty, p_full, p_free, bh0 + t // nq,
                                   (first + t % nq) * BM, t, dk0, dk1, BM, BN, DH, QSTAGES,
                                   DOSTAGES, S)
            keys = n0 + kit.arange(0, BN)
            offs = (kvbh * SK + keys)[:, None] * D + kit.arange(0, DH)[None, :]
            kmask = (keys < SK)[:, None]
            kit.store(DK + offs, (dk0 * sm_scale).to(DK.dtype.element_ty), mask=kmask)
            kit.store(DK + offs + DH, (dk1 * sm_scale).to(DK.dtype.element_ty), mask=kmask)


def bwd_config_d256(causal: bool = False) -> dict:
    """64 queries x 64 keys a block (registers: see the module docstring). One stage of Q and
    of dO: on an H100 two Q stages measured 8% (causal 11%) slower (benchmarks/NOTES.md)."""
    return dict(BM=64, BN=64, QSTAGES=1, DOSTAGES=1)
