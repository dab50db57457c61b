"""Triton's tutorial attention (06-fused-attention, Triton 3.6), forward and backward: a peer
timed beside kitjit's backward in `benchmarks/bench_attn.py`, not kitjit code.

Written for this benchmark from the public tutorial's algorithm and launch configuration
(python/tutorials/06-fused-attention.py in triton-lang/triton, MIT license, credits: OpenAI
kernel team; FlashAttention-2 by Tri Dao), not copied from it:
- forward: one program per 128 query rows and head, online softmax in exp2, the base-2
  log-sum-exp M saved per row (the forward is not timed: it makes O and M for the backward);
- backward: a preprocess (Delta = rowsum(O * dO)), then one program per 128 keys and head
  that accumulates dK, dV over query blocks of 32 rows (16 on the causal diagonal) and then
  dQ of the 128 query rows of the same index over key blocks of 32 (16 on the diagonal); K
  pre-scaled by sm_scale / ln 2 on the host, dQ scaled by ln 2 at the end; 4 warps, 5
  stages; sequence lengths a multiple of 128, contiguous (B, H, S, D) inputs.
Two departures, said where the table prints: P and dS are cast to the inputs' dtype (the
tutorial casts to fp16, so it runs fp16 inputs only) and the non-causal backward loops over
every query/key block without a mask (the tutorial's backward is causal only).

`import triton` must be the real Triton (tests may pass kitjit under that name: the import
swap runs these kernels in kitjit's interpreter).
"""

from __future__ import annotations

import math

import torch

try:
    import triton
    import triton.language as tl
except ImportError:          # pragma: no cover  (the table says "not installed")
    triton = tl = None

RCP_LN2 = 1.0 / math.log(2.0)
LN2 = math.log(2.0)
FWD_BM, FWD_BN = 128, 64
BWD_M1, BWD_N1, BWD_M2, BWD_N2, SLICE = 32, 128, 128, 32, 2   # the tutorial's launch
BWD_WARPS, BWD_STAGES = 4, 5


def available() -> bool:
    return triton is not None


if triton is not None:
    @triton.jit
    def _fwd(Q, K, V, M, Out, sm_scale, N_CTX, D: tl.constexpr, BM: tl.constexpr,
             BN: tl.constexpr, CAUSAL: tl.constexpr):
        pid_m = tl.program_id(0)
        bh = tl.program_id(1).to(tl.int64)
        base = bh * N_CTX * D
        rows = pid_m * BM + tl.arange(0, BM)
        cols_d = tl.arange(0, D)
        q = tl.load(Q + base + rows[:, None] * D + cols_d[None, :])
        m_i = tl.full([BM], -float("inf"), tl.float32)
        l_i = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, D], tl.float32)
        qk_scale = sm_scale * 1.4426950408889634
        hi = (pid_m + 1) * BM if CAUSAL else N_CTX
        for start in range(0, hi, BN):
            keys = start + tl.arange(0, BN)
            kt = tl.load(K + base + keys[None, :] * D + cols_d[:, None])
            s = tl.dot(q, kt) * qk_scale
            if CAUSAL:
                s = tl.where(rows[:, None] >= keys[None, :], s, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(V + base + keys[:, None] * D + cols_d[None, :])
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m_i = m_new
        tl.store(M + bh * N_CTX + rows, m_i + tl.math.log2(l_i))
        tl.store(Out + base + rows[:, None] * D + cols_d[None, :],
                 (acc / l_i[:, None]).to(Out.dtype.element_ty))

    @triton.jit
    def _preprocess(O, DO, Delta, N_CTX, D: tl.constexpr, BM: tl.constexpr):
        bh = tl.program_id(1).to(tl.int64)
        rows = tl.program_id(0) * BM + tl.arange(0, BM)
        offs = bh * N_CTX * D + rows[:, None] * D + tl.arange(0, D)[None, :]
        o = tl.load(O + offs).to(tl.float32)
        do = tl.load(DO + offs).to(tl.float32)
        tl.store(Delta + bh * N_CTX + rows, tl.sum(o * do, 1))

    @triton.jit
    def _dkdv(dk, dv, Q, DO, M, Delta, k, v, start_n, start_m, n_steps, D: tl.constexpr,
              BM: tl.constexpr, BN: tl.constexpr, MASK: tl.constexpr):
        """dK, dV of keys start_n..+BN over n_steps query blocks of BM from start_m."""
        keys = start_n + tl.arange(0, BN)
        cols_d = tl.arange(0, D)
        curr = start_m
        for _ in range(n_steps):
            rows = curr + tl.arange(0, BM)
            qt = tl.load(Q + rows[None, :] * D + cols_d[:, None])
            m = tl.load(M + rows)
            pt = tl.math.exp2(tl.dot(k, qt) - m[None, :])
            if MASK:
                pt = tl.where(rows[None, :] >= keys[:, None], pt, 0.0)
            do = tl.load(DO + rows[:, None] * D + cols_d[None, :])
            dv += tl.dot(pt.to(do.dtype), do)
            di = tl.load(Delta + rows)
            dpt = tl.dot(v, tl.trans(do)).to(tl.float32)
            dst = pt * (dpt - di[None, :])
            dk += tl.dot(dst.to(qt.dtype), tl.trans(qt))
            curr += BM
        return dk, dv

    @triton.jit
    def _dq(dq, q, do, m, di, K, V, start_m, start_n, n_steps, D: tl.constexpr,
            BM: tl.constexpr, BN: tl.constexpr, MASK: tl.constexpr):
        """dQ of query rows start_m..+BM over n_steps key blocks of BN from start_n."""
        rows = start_m + tl.arange(0, BM)
        cols_d = tl.arange(0, D)
        curr = start_n
        for _ in range(n_steps):
            keys = curr + tl.arange(0, BN)
            kt = tl.load(K + keys[None, :] * D + cols_d[:, None])
            vt = tl.load(V + keys[None, :] * D + cols_d[:, None])
            p = tl.math.exp2(tl.dot(q, kt) - m)
            if MASK:
                p = tl.where(rows[:, None] >= keys[None, :], p, 0.0)
            dp = tl.dot(do, vt).to(tl.float32)
            ds = p * (dp - di[:, None])
            dq += tl.dot(ds.to(kt.dtype), tl.trans(kt))
            curr += BN
        return dq

    @triton.jit
    def _bwd(Q, K, V, DO, DQ, DK, DV, M, Delta, sm_scale, N_CTX, D: tl.constexpr,
             BM1: tl.constexpr, BN1: tl.constexpr, BM2: tl.constexpr, BN2: tl.constexpr,
             SLICE: tl.constexpr, CAUSAL: tl.constexpr):
        pid = tl.program_id(0)
        bh = tl.program_id(2).to(tl.int64)
        base = bh * N_CTX * D
        Q += base
        K += base
        V += base
        DO += base
        DQ += base
        DK += base
        DV += base
        M += bh * N_CTX
        Delta += bh * N_CTX
        cols_d = tl.arange(0, D)

        # dK, dV of keys start_n..+BN1: the diagonal in slices of BM1 // SLICE rows (causal)
        start_n = pid * BN1
        keys = start_n + tl.arange(0, BN1)
        k = tl.load(K + keys[:, None] * D + cols_d[None, :])
        v = tl.load(V + keys[:, None] * D + cols_d[None, :])
        dk = tl.zeros([BN1, D], tl.float32)
        dv = tl.zeros([BN1, D], tl.float32)
        if CAUSAL:
            dk, dv = _dkdv(dk, dv, Q, DO, M, Delta, k, v, start_n, start_n,
                           BN1 // (BM1 // SLICE), D, BM1 // SLICE, BN1, True)
            first = start_n + BN1
        else:
            first = 0
        dk, dv = _dkdv(dk, dv, Q, DO, M, Delta, k, v, start_n, first,
                       (N_CTX - first) // BM1, D, BM1, BN1, False)
        tl.store(DV + keys[:, None] * D + cols_d[None, :], dv.to(DV.dtype.element_ty))
        tl.store(DK + keys[:, None] * D + cols_d[None, :],
                 (dk * sm_scale).to(DK.dtype.element_ty))

        # dQ of query rows start_m..+BM2: the diagonal in slices of BN2 // SLICE keys (causal)
        start_m = pid * BM2
        rows = start_m + tl.arange(0, BM2)
        q = tl.load(Q + rows[:, None] * D + cols_d[None, :])
        do = tl.load(DO + rows[:, None] * D + cols_d[None, :])
        m = tl.load(M + rows)[:, None]
        di = tl.load(Delta + rows)
        dq = tl.zeros([BM2, D], tl.float32)
        if CAUSAL:
            dq = _dq(dq, q, do, m, di, K, V, start_m, start_m, BM2 // (BN2 // SLICE), D, BM2,
                     BN2 // SLICE, True)
            dq = _dq(dq, q, do, m, di, K, V, start_m, 0, start_m // BN2, D, BM2, BN2, False)
        else:
            dq = _dq(dq, q, do, m, di, K, V, start_m, 0, N_CTX // BN2, D, BM2, BN2, False)
        tl.store(DQ + rows[:, None] * D + cols_d[None, :], (dq * 0.6931471805599453).to(
            DQ.dtype.element_ty))


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if triton is None:
        raise RuntimeError("triton is not installed")
    if not (q.shape == k.shape == v.shape) or q.dim() != 4 or q.shape[2] % 128:
        raise ValueError("the tutorial's kernels take (B, H, S, D) q, k, v of one shape, "
                         "S a multiple of 128")


def forward(q, k, v, causal: bool, sm_scale: float):
    """(O, M): the output and the base-2 log-sum-exp of the scaled scores per row."""
    _check(q, k, v)
    q, k, v = (t.contiguous() for t in (q, k, v))
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    m = torch.empty(B, H, S, device=q.device, dtype=torch.float32)
    _fwd[(S // FWD_BM, B * H)](q, k, v, m, o, sm_scale, S, D, FWD_BM, FWD_BN, causal,
                               num_warps=8 if D >= 128 else 4, num_stages=3)
    return o, m


def backward(do, q, k, v, o, m, causal: bool, sm_scale: float):
    """(dQ, dK, dV) as the tutorial's backward makes them (K pre-scaled on the host)."""
    _check(q, k, v)
    B, H, S, D = q.shape
    do = do.contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty_like(m)
    _preprocess[(S // 128, B * H)](o, do, delta, S, D, 128)
    arg_k = k * (sm_scale * RCP_LN2)
    _bwd[(S // BWD_N1, 1, B * H)](q, arg_k, v, do, dq, dk, dv, m, delta, sm_scale, S, D,
                                   BWD_M1, BWD_N1, BWD_M2, BWD_N2, SLICE, causal,
                                   num_warps=BWD_WARPS, num_stages=BWD_STAGES)
    return dq, dk, dv


def backward_runner(q, k, v, do, causal: bool, sm_scale: float | None = None):
    """A zero-argument callable timing the tutorial's backward alone (its forward runs once
    here), as the torch backends' backward is timed beside it."""
    sm = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    o, m = forward(q, k, v, causal, sm)
    return lambda: backward(do, q, k, v, o, m, causal, sm)
