"""Opt-in variants of the split-KV decode kernel (kitjit/nn/attention_decode.py), chosen by
`attention_decode(..., persistent=n)` (and `swap=True`) and timed against cuDNN by
`benchmarks/decode_sweep.py --variants` (issue 12: the B64 and B8 32K decode shapes at
0.92-0.97x cuDNN on an H200). Each takes decode_kernel's arguments and writes its outputs.

- decode_persistent_kernel: a 1-d grid of n programs per SM, each walking (K/V head, row tile,
  key chunk) items with one ring of K/V stages for all of them: the next item's first blocks
  and its Q fly while this item's last blocks are computed (no pipeline fill per item, no
  wave tail of short programs).
- decode_swap_kernel: decode_kernel with the MMAs' operands swapped, Sᵀ = K Qᵀ and
  Oᵀ += Vᵀ Pᵀ: a block's 64 keys on the MMA's rows, the tile's 8-64 query rows on its N. With
  Sq 1 and 4 query heads per K/V head, decode_kernel's 64-row S has 60 dead rows; here the
  tensor work and the softmax per key block are an eighth, P goes through shared memory (the
  B operand), and the smaller footprint (Q 8 rows, 48 registers) fits 3 programs per SM.
"""

from __future__ import annotations

import kitjit as kit

# absolute: kitjit.compile_aot loads this file by its path
from kitjit.nn.attention import softmax, store_out
from kitjit.nn.attention_decode import combine_rows


@kit.jit
def item_span(w, SK, Sq, chunk, n_splits, BN: kit.constexpr, CAUSAL: kit.constexpr):
    """Work item w of the persistent kernel (w = (K/V head * row tiles + row tile) * splits +
    split): its keys start .. end-1 and their block count."""
    start = w % n_splits * chunk
    end = kit.minimum(SK, start + chunk)
    if CAUSAL:
        end = kit.minimum(end, Sq)
    return start, end, kit.cdiv(end - start, BN)


@kit.jit
def locate(w, t, step, n_items, SK, Sq, chunk, n_splits, BN: kit.constexpr,
           CAUSAL: kit.constexpr):
    """Block t counted from the first block of item w, walked over the items w, w + step ...
    of this program (an item may hold fewer blocks than the ring has stages): the item that
    holds it (n_items or past when there is none), its first key and the block in it."""
    start, end, nk = item_span(w, SK, Sq, chunk, n_splits, BN, CAUSAL)
    while (t >= nk) & (w < n_items):
        t -= nk
        w += step
        start, end, nk = item_span(w, SK, Sq, chunk, n_splits, BN, CAUSAL)
    return w, start, t


@kit.jit
def issue_kv(k, v, ready, K, V, bkv, key0, pos, STAGES: kit.constexpr, SEPKV: kit.constexpr,
             WHICH: kit.constexpr):
    """Keys key0 .. key0+BN-1 of K/V head bkv into stage pos % STAGES; WHICH 0: K and V,
    1: K alone, 2: V alone (SEPKV: V on its own barrier)."""
    s = pos % STAGES
    if WHICH != 2:
        kit.tma_load(k[s], K, (bkv, key0, 0), ready[s])
    if WHICH != 1:
        kit.tma_load(v[s], V, (bkv, key0, 0), ready[STAGES + s if SEPKV else s])


@kit.jit
def refill_kv(k, v, ready, K, V, w, bkv, start, n_kv, j, pos, step, n_items, SK, Sq, chunk,
              n_splits, row_tiles, BN: kit.constexpr, STAGES: kit.constexpr,
              CAUSAL: kit.constexpr, SEPKV: kit.constexpr, WHICH: kit.constexpr):
    """Refill the stage of ring position pos (block j of item w) with position pos + STAGES:
    block j + STAGES of this item, or one of this program's next items (the ring streams on
    across items: their first blocks fly while this one's last are computed)."""
    jj = j + STAGES
    if jj < n_kv:
        issue_kv(k, v, ready, K, V, bkv, start + jj * BN, pos, STAGES, SEPKV, WHICH)
    else:
        w2, start2, t2 = locate(w + step, jj - n_kv, step, n_items, SK, Sq, chunk, n_splits, BN,
                                CAUSAL)
        if w2 < n_items:
            issue_kv(k, v, ready, K, V, w2 // n_splits // row_tiles, start2 + t2 * BN, pos,
                     STAGES, SEPKV, WHICH)


@kit.jit
def persistent_block(q, k, v, ready, K, V, acc, m_i, l_i, qpos, w, bkv, j, pos, start, end,
                     n_kv, step, n_items, SK, Sq, chunk, n_splits, row_tiles, qk_scale,
                     BM: kit.constexpr, BN: kit.constexpr, STAGES: kit.constexpr,
                     MASK: kit.constexpr, CAUSAL: kit.constexpr, SEPKV: kit.constexpr):
    """decode_block for the persistent kernel: ring position pos (counted over all of this
    program's items) holds block j of item w; its stage is refilled by refill_kv."""
    s = pos % STAGES
    kit.mbarrier_wait(ready[s], pos // STAGES % 2)
    sc = kit.mma(q, k[s].T, kit.zeros((BM, BN), kit.float32))
    if SEPKV:
        refill_kv(k, v, ready, K, V, w, bkv, start, n_kv, j, pos, step, n_items, SK, Sq, chunk,
                  n_splits, row_tiles, BN, STAGES, CAUSAL, SEPKV, 1)
    p, alpha, m_i, l_i = softmax(sc, m_i, l_i, qpos, start // BN + j, end, qk_scale, BN, MASK,
                                 CAUSAL)
    if SEPKV:
        kit.mbarrier_wait(ready[STAGES + s], pos // STAGES % 2)
    acc = kit.mma(p.to(V.dtype.element_ty), v[s], acc * alpha[:, None])
    refill_kv(k, v, ready, K, V, w, bkv, start, n_kv, j, pos, step, n_items, SK, Sq, chunk,
              n_splits, row_tiles, BN, STAGES, CAUSAL, SEPKV, 2 if SEPKV else 0)
    return acc, m_i, l_i


@kit.jit
def decode_persistent_kernel(Q, K, V, O, L, Out, Lse, Cnt, n_rows, R, SK, Sq, H, G, chunk,
                             qk_scale, BM: kit.constexpr, BN: kit.constexpr,
                             D: kit.constexpr, CAUSAL: kit.constexpr, STAGES: kit.constexpr,
                             SPLIT: kit.constexpr, FUSED: kit.constexpr, NS: kit.constexpr,
                             RB: kit.constexpr, SEPKV: kit.constexpr = False):
    """decode_kernel's work (same arguments and outputs) on a persistent 1-d grid: program p
    takes the items p, p + step, ... (item = (K/V head, row tile, key chunk)), with one ring
    of K/V stages for all of them, so the next item's first blocks (and its Q, in a second Q
    buffer) are in flight while this item's last blocks are computed: no pipeline fill per
    item, and no wave tail of short programs (issue 12, the B64 decode shapes)."""
    if SPLIT and not FUSED:
        kit.gdc_launch_dependents()
    hkv = H // G
    row_tiles = kit.cdiv(R, BM)
    keys = kit.minimum(SK, Sq) if CAUSAL else SK
    n_splits = kit.cdiv(keys, chunk)
    n_items = n_rows // R * row_tiles * n_splits   # n_rows // R: batch * K/V heads
    step = kit.num_programs(0)
    first = kit.program_id(0)
    q = kit.shared((2, BM, D), Q.dtype.element_ty)  # this item's Q and the next one's
    k = kit.shared((STAGES, BN, D), K.dtype.element_ty)
    v = kit.shared((STAGES, BN, D), V.dtype.element_ty)
    q_ready = kit.mbarriers(2)
    ready = kit.mbarriers(2 * STAGES if SEPKV else STAGES)
    if first < n_items:
        b0 = first // n_splits // row_tiles
        kit.tma_load(q[0], Q, ((b0 // hkv * H + b0 % hkv * G) * Sq
                               + first // n_splits % row_tiles * BM, 0), q_ready[0])
    for s in kit.static_range(STAGES):              # the ring's first fill, for all items
        w1, start1, t1 = locate(first, s, step, n_items, SK, Sq, chunk, n_splits, BN, CAUSAL)
        if w1 < n_items:
            issue_kv(k, v, ready, K, V, w1 // n_splits // row_tiles, start1 + t1 * BN, s,
                     STAGES, SEPKV, 0)
    pos = 0                                         # ring positions consumed so far
    i = 0                                           # items done so far
    for w in range(first, n_items, step):
        split = w % n_splits
        bkv = w // n_splits // row_tiles
        r0 = w // n_splits % row_tiles * BM
        g0 = (bkv // hkv * H + bkv % hkv * G) * Sq
        wn = w + step
        if wn < n_items:                            # the next item's Q: its buffer is free
            bn_ = wn // n_splits // row_tiles
            kit.tma_load(q[(i + 1) % 2], Q, ((bn_ // hkv * H + bn_ % hkv * G) * Sq
                                             + wn // n_splits % row_tiles * BM, 0),
                         q_ready[(i + 1) % 2])
        rows = r0 + kit.arange(0, BM)
        qpos = rows % Sq
        start, end, n_kv = item_span(w, SK, Sq, chunk, n_splits, BN, CAUSAL)
        n_full = 0 if CAUSAL else (end - start) // BN
        m_i = kit.full((BM,), -float("inf"), kit.float32)
        l_i = kit.zeros((BM,), kit.float32)
        acc = kit.zeros((BM, D), kit.float32)
        kit.mbarrier_wait(q_ready[i % 2], i // 2 % 2)
        qi = q[i % 2]
        for j in range(n_full):
            acc, m_i, l_i = persistent_block(qi, k, v, ready, K, V, acc, m_i, l_i, qpos, w, bkv,
                                             j, pos + j, start, end, n_kv, step, n_items, SK,
                                             Sq, chunk, n_splits, row_tiles, qk_scale, BM, BN,
                                             STAGES, False, CAUSAL, SEPKV)
        for j in range(n_full, n_kv):
            acc, m_i, l_i = persistent_block(qi, k, v, ready, K, V, acc, m_i, l_i, qpos, w, bkv,
                                             j, pos + j, start, end, n_kv, step, n_items, SK,
                                             Sq, chunk, n_splits, row_tiles, qk_scale, BM, BN,
                                             STAGES, True, CAUSAL, SEPKV)
        pos += n_kv
        i += 1
        if SPLIT:
            store_out(O + (split * n_rows + g0) * D, L + split * n_rows + g0, acc, m_i, l_i,
                      rows, 0, R, D)
            if FUSED:   # as decode_kernel: partial stores, then one acq_rel count per item
                kit.debug_barrier()
                tile = bkv * row_tiles + r0 // BM
                done = kit.atomic_add(Cnt + tile, 1, sem="acq_rel", scope="gpu")
                if done == n_splits - 1:
                    kit.store(Cnt + tile, 0)
                    combine_rows(O, L, Out, Lse, n_rows, g0 + r0, kit.minimum(R - r0, BM),
                                 n_splits, NS, RB, D)
        else:
            store_out(O + g0 * D, L + g0, acc, m_i, l_i, rows, 0, R, D)


@kit.jit
def swap_block(q, k, vs, pt, ready, K, V, acc0, acc1, m_i, l_t, qpos, j, start, end, bkv,
               n_kv, qk_scale, NQ: kit.constexpr, BN: kit.constexpr, D: kit.constexpr,
               STAGES: kit.constexpr, MASK: kit.constexpr, CAUSAL: kit.constexpr):
    """Block j with the operands swapped: Sᵀ = K Qᵀ (keys on the MMA's 64 rows, the tile's NQ
    query rows on its N), the online softmax down the columns, Pᵀ through shared memory,
    Oᵀ += Vᵀ Pᵀ in 64-row halves of D (acc0, acc1; acc1 unused at D 64). The row sums stay
    a (BN, NQ) tile l_t, summed down the columns once after the last block: a reduction
    across the warps (shared memory, two barriers) fewer per block."""
    s = j % STAGES
    kit.mbarrier_wait(ready[s], j // STAGES % 2)
    st = kit.mma(k[s], q.T, kit.zeros((BN, NQ), kit.float32))
    if MASK:
        keys = start + j * BN + kit.arange(0, BN)
        keep = keys[:, None] < end
        if CAUSAL:
            keep = keep & (keys[:, None] <= qpos[None, :])
        st = kit.where(keep, st, -float("inf"))
    m_new = kit.maximum(m_i, kit.max(st, axis=0) * qk_scale)
    p = kit.exp2(st * qk_scale - m_new[None, :], ftz=True)
    alpha = kit.exp2(m_i - m_new, ftz=True)
    l_t = l_t * alpha[None, :] + p
    kit.store(pt, p)                                # Pᵀ: the B operand of Oᵀ += Vᵀ Pᵀ
    kit.barrier()
    # (D 128: both halves issued before one wait)
    acc0 = kit.mma(vs[s * (D // 64)].T, pt, acc0 * alpha[None, :], pending=D // 128)
    if D == 128:
        acc1 = kit.mma(vs[s * 2 + 1].T, pt, acc1 * alpha[None, :])
    if j + STAGES < n_kv:                           # both MMAs are done with stage s: refill
        key0 = start + (j + STAGES) * BN
        kit.tma_load(k[s], K, (bkv, key0, 0), ready[s])
        for h in kit.static_range(D // 64):
            kit.tma_load(vs[s * (D // 64) + h], V, (bkv, key0, h * 64), ready[s])
    return acc0, acc1, m_new, l_t


@kit.jit
def store_out_t(O, L, acc, m_i, l_i, rows, live, col0, D: kit.constexpr):
    """Columns col0 .. col0+63 of the output rows `rows` from Oᵀ (64, NQ), and (col0 == 0)
    their natural-log LSE."""
    d = col0 + kit.arange(0, 64)
    kit.store(O + rows[None, :] * D + d[:, None], (acc / l_i[None, :]).to(O.dtype.element_ty),
              mask=live[None, :])
    if col0 == 0:
        kit.store(L + rows, (m_i + kit.log2(l_i)) * 0.6931471805599453, mask=live)


@kit.jit
def decode_swap_kernel(Q, K, V, O, L, Out, Lse, Cnt, n_rows, R, SK, Sq, H, G, chunk, qk_scale,
                       BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr,
                       CAUSAL: kit.constexpr, STAGES: kit.constexpr, SPLIT: kit.constexpr,
                       FUSED: kit.constexpr, NS: kit.constexpr, RB: kit.constexpr):
    """decode_kernel (same grid, arguments and outputs) with the MMAs' operands swapped: the
    keys of a block fill the MMA's 64 rows and the tile's BM (8 to 64) query rows its N, so a
    4-row group computes an 8-column Sᵀ, not a 64-row S of which 60 rows are dead: an eighth
    of the tensor work and of the softmax per key block (BN 64; D 64 or 128)."""
    if SPLIT and not FUSED:
        kit.gdc_launch_dependents()
    split = kit.program_id(0)
    bkv = kit.program_id(2)
    hkv = H // G
    g0 = (bkv // hkv * H + bkv % hkv * G) * Sq
    r0 = kit.program_id(1) * BM
    rows = r0 + kit.arange(0, BM)
    qpos = rows % Sq
    start = split * chunk
    end = kit.minimum(SK, start + chunk)
    if CAUSAL:
        end = kit.minimum(end, Sq)
    n_kv = kit.cdiv(end - start, BN)
    n_full = 0 if CAUSAL else (end - start) // BN
    q = kit.shared((BM, D), Q.dtype.element_ty)
    k = kit.shared((STAGES, BN, D), K.dtype.element_ty)
    vs = kit.shared((STAGES * (D // 64), BN, 64), V.dtype.element_ty)   # 64-column parts
    pt = kit.shared((BN, BM), Q.dtype.element_ty)
    q_ready = kit.mbarriers(1)
    ready = kit.mbarriers(STAGES)
    kit.tma_load(q, Q, (g0 + r0, 0), q_ready[0])   # rows past the group: masked at the store
    for s in kit.static_range(STAGES):
        if s < n_kv:
            kit.tma_load(k[s], K, (bkv, start + s * BN, 0), ready[s])
            for h in kit.static_range(D // 64):
                kit.tma_load(vs[s * (D // 64) + h], V, (bkv, start + s * BN, h * 64), ready[s])
    m_i = kit.full((BM,), -float("inf"), kit.float32)
    l_t = kit.zeros((BN, BM), kit.float32)
    acc0 = kit.zeros((64, BM), kit.float32)
    acc1 = kit.zeros((64, BM), kit.float32)
    kit.mbarrier_wait(q_ready[0], 0)
    for j in range(n_full):
        acc0, acc1, m_i, l_t = swap_block(q, k, vs, pt, ready, K, V, acc0, acc1, m_i, l_t,
                                          qpos, j, start, end, bkv, n_kv, qk_scale, BM, BN, D,
                                          STAGES, False, CAUSAL)
    for j in range(n_full, n_kv):
        acc0, acc1, m_i, l_t = swap_block(q, k, vs, pt, ready, K, V, acc0, acc1, m_i, l_t,
                                          qpos, j, start, end, bkv, n_kv, qk_scale, BM, BN, D,
                                          STAGES, True, CAUSAL)
    l_i = kit.sum(l_t, axis=0)
    live = rows < R
    if SPLIT:
        o_part = O + split * n_rows * D
        l_part = L + split * n_rows
    else:
        o_part = O
        l_part = L
    store_out_t(o_part, l_part, acc0, m_i, l_i, g0 + rows, live, 0, D)
    if D == 128:
        store_out_t(o_part, l_part, acc1, m_i, l_i, g0 + rows, live, 64, D)
    if SPLIT:
        if FUSED:   # as decode_kernel: the partial stores, then one acq_rel count per tile
            kit.debug_barrier()
            tile = bkv * kit.num_programs(1) + kit.program_id(1)
            done = kit.atomic_add(Cnt + tile, 1, sem="acq_rel", scope="gpu")
            if done == kit.num_programs(0) - 1:
                kit.store(Cnt + tile, 0)
                combine_rows(O, L, Out, Lse, n_rows, g0 + r0, kit.minimum(R - r0, BM),
                             kit.num_programs(0), NS, RB, D)
