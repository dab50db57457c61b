"""Attention for a few query rows against a long KV cache (decode): split-KV, FlashDecoding.

With 1 to 16 query rows per head, the forward's grid (query blocks x heads) has one program per
head and each streams the whole cache alone: a B=1 step fills 32 of an H100's 132 SMs. Here
the keys of each K/V head are cut into `splits` chunks, one program per chunk, and the partial
results are merged by their log-sum-exps:

    O = sum_s exp(lse_s - lse) O_s,   lse = log sum_s exp(lse_s).

With few splits the last program of a group to finish (an atomic counter per group) merges
them itself: one launch (FUSED). With many, a combine kernel launched with PDL, one program
per row, merges faster than one program reading all the partials alone (FUSE_MAX).

GQA: the query rows of all G heads that share a K/V head are contiguous in (B, H, Sq, D), so
one program takes the G*Sq rows of a group as the rows of its tile (Sq=1, G=4: 4 live rows of
a 64-row WGMMA tile) and every K/V block it loads serves the whole group: the cache is read
once per K/V head, not once per query head. Decode is bound by that read (the MMAs on mostly
idle rows cost a fifth of a block's load time on an H100), so what matters is enough programs
in flight to keep HBM busy: `num_splits` picks the split count from the SM count.

Causal is top-left aligned, as torch's `is_causal` (and the forward, kitjit/nn/attention.py):
query i sees keys 0..i, so with Sq <= 16 a causal call reads at most Sq keys.
"""

from __future__ import annotations

import functools
import math

import torch

import kitjit as kit
from kitjit import launcher as _launcher

# absolute: kitjit.compile_aot loads this file by its path
from kitjit.nn._host import Rows, Site, int_facts, on_reset, workspace
from kitjit.nn.attention import _heads, _rows, softmax, store_out

LOG2E = 1.4426950408889634
MAX_SPLITS = 128          # the combine kernel holds all splits of a row in registers
# The last program merges in-kernel when its (NS, RB, D) tile has at most this many elements.
# H100, bench.py decode (benchmarks/NOTES.md): with 4 splits x 4 rows (D 128) one launch beat
# the PDL combine kernel by 1-5 us a call; with 29-32 splits x 4 rows it lost ~1 us (one
# program then reads 64 KB of partials alone, where the combine kernel spreads them over a
# program per row). The bound sits between the two (16 splits x 4 rows, not measured).
FUSE_MAX = 8192


@kit.jit
def decode_block(q, k, v, ready, K, V, acc, m_i, l_i, qpos, j, start, end, bkv, n_kv,
                 qk_scale, BM: kit.constexpr, BN: kit.constexpr, STAGES: kit.constexpr,
                 MASK: kit.constexpr, CAUSAL: kit.constexpr, SEPKV: kit.constexpr = False,
                 L2: kit.constexpr = 0):
    """Block j of the chunk (keys start + j*BN ...): S = Q Kᵀ, online softmax (keys at or past
    `end` masked when MASK), O += P V; then refill stage j % STAGES with block j + STAGES.
    SEPKV: K and V of a stage land on barriers of their own (ready[s], ready[STAGES + s]), K's
    slot is refilled as soon as S = Q Kᵀ is done and only P V waits for V (the copy of the
    next K flies during the softmax and P V). L2: the K/V copies' L2 promotion (bytes)."""
    s = j % STAGES
    kit.mbarrier_wait(ready[s], j // STAGES % 2)
    sc = kit.mma(q, k[s].T, kit.zeros((BM, BN), kit.float32))
    if SEPKV:
        if j + STAGES < n_kv:                      # S = Q Kᵀ is done with k[s]: refill it
            kit.tma_load(k[s], K, (bkv, start + (j + STAGES) * BN, 0), ready[s],
                         l2_promotion=L2)
    p, alpha, m_i, l_i = softmax(sc, m_i, l_i, qpos, start // BN + j, end, qk_scale, BN, MASK,
                                 CAUSAL)
    if SEPKV:
        kit.mbarrier_wait(ready[STAGES + s], j // STAGES % 2)
    acc = kit.mma(p.to(V.dtype.element_ty), v[s], acc * alpha[:, None])
    if SEPKV:
        if j + STAGES < n_kv:
            kit.tma_load(v[s], V, (bkv, start + (j + STAGES) * BN, 0), ready[STAGES + s],
                         l2_promotion=L2)
    elif j + STAGES < n_kv:                        # both MMAs are done with stage s: refill
        kit.tma_load(k[s], K, (bkv, start + (j + STAGES) * BN, 0), ready[s],
                     l2_promotion=L2)
        kit.tma_load(v[s], V, (bkv, start + (j + STAGES) * BN, 0), ready[s],
                     l2_promotion=L2)
    return acc, m_i, l_i


@kit.jit
def decode_kernel(Q, K, V, O, L, Out, Lse, Cnt, n_rows, R, SK, Sq, H, G, chunk, qk_scale,
                  BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr,
                  CAUSAL: kit.constexpr, STAGES: kit.constexpr, SPLIT: kit.constexpr,
                  FUSED: kit.constexpr, NS: kit.constexpr, RB: kit.constexpr,
                  SEPKV: kit.constexpr = False, L2: kit.constexpr = 0):
    """Q: (B*H*Sq, D) rows, K and V: (B*H_kv, SK, D), copied per K/V head (the last chunk's
    tile past SK reads zeros, not the next head's keys). One program per (key chunk, tile of
    the R = G*Sq query rows of a group, batch * K/V head). SPLIT: O and L are fp32 partials
    (splits, B*H*Sq, D) and (splits, B*H*Sq), else the output and its LSE. FUSED (with
    SPLIT): the last program of a (row tile, K/V head) to finish, counted in Cnt (int32, one
    per tile, 0 before the launch and left 0), merges the partials into Out and Lse
    (`combine_rows`: NS >= splits, RB >= the tile's live rows): one launch, no combine
    kernel. Out, Lse and Cnt are not read otherwise. SEPKV: K and V on barriers of their own
    (decode_block). L2: the K/V cache's L2 promotion: 0 (none) streams it ~7% faster than
    TMA's usual 256 bytes on an H200 at B64 (benchmarks/NOTES.md, session 9)."""
    if SPLIT and not FUSED:   # the combine kernel (launched with PDL) may take its SMs' spare
        kit.gdc_launch_dependents()   # room now: it waits in kit.gdc_wait for this grid
    split = kit.program_id(0)
    bkv = kit.program_id(2)                        # batch * H_kv + K/V head
    hkv = H // G
    g0 = (bkv // hkv * H + bkv % hkv * G) * Sq     # the group's first query row
    r0 = kit.program_id(1) * BM
    rows = r0 + kit.arange(0, BM)                  # rows of the group: head-major, then query
    qpos = rows % Sq                               # the query's position (causal mask)
    start = split * chunk                          # a multiple of BN
    end = kit.minimum(SK, start + chunk)
    if CAUSAL:                                     # top-left: no row sees key Sq or later
        end = kit.minimum(end, Sq)
    n_kv = kit.cdiv(end - start, BN)
    n_full = 0 if CAUSAL else (end - start) // BN  # blocks that need no mask
    q = kit.shared((BM, D), Q.dtype.element_ty)
    k = kit.shared((STAGES, BN, D), K.dtype.element_ty)
    v = kit.shared((STAGES, BN, D), V.dtype.element_ty)
    q_ready = kit.mbarriers(1)
    ready = kit.mbarriers(2 * STAGES if SEPKV else STAGES)
    kit.tma_load(q, Q, (g0 + r0, 0), q_ready[0])   # rows past the group: masked at the store
    for s in kit.static_range(STAGES):
        if s < n_kv:
            kit.tma_load(k[s], K, (bkv, start + s * BN, 0), ready[s], l2_promotion=L2)
            kit.tma_load(v[s], V, (bkv, start + s * BN, 0), ready[STAGES + s if SEPKV else s],
                         l2_promotion=L2)
    m_i = kit.full((BM,), -float("inf"), kit.float32)
    l_i = kit.zeros((BM,), kit.float32)
    acc = kit.zeros((BM, D), kit.float32)
    kit.mbarrier_wait(q_ready[0], 0)
    for j in range(n_full):
        acc, m_i, l_i = decode_block(q, k, v, ready, K, V, acc, m_i, l_i, qpos, j, start, end,
                                     bkv, n_kv, qk_scale, BM, BN, STAGES, False, CAUSAL,
                                     SEPKV, L2)
    for j in range(n_full, n_kv):
        acc, m_i, l_i = decode_block(q, k, v, ready, K, V, acc, m_i, l_i, qpos, j, start, end,
                                     bkv, n_kv, qk_scale, BM, BN, STAGES, True, CAUSAL, SEPKV,
                                     L2)
    if SPLIT:
        store_out(O + (split * n_rows + g0) * D, L + split * n_rows + g0, acc, m_i, l_i, rows,
                  0, R, D)
        if FUSED:
            # every thread's partial stores come before the count (bar.sync, then one
            # thread's acq_rel atomic: a release of them at GPU scope, the acquire of the
            # others' for the last program, whose threads read after the broadcast's bar.sync)
            kit.debug_barrier()
            tile = bkv * kit.num_programs(1) + kit.program_id(1)
            done = kit.atomic_add(Cnt + tile, 1, sem="acq_rel", scope="gpu")
            if done == kit.num_programs(0) - 1:
                kit.store(Cnt + tile, 0)           # ready for the next launch
                combine_rows(O, L, Out, Lse, n_rows, g0 + r0, kit.minimum(R - r0, BM),
                             kit.num_programs(0), NS, RB, D)
    else:
        store_out(O + g0 * D, L + g0, acc, m_i, l_i, rows, 0, R, D)


@kit.jit
def combine_rows(Op, Lp, O, L, n_rows, row0, live, n_splits, NS: kit.constexpr,
                 RB: kit.constexpr, D: kit.constexpr):
    """Rows row0 .. row0+live-1 (live <= RB) merged over their n_splits (<= NS) partials:
    O = sum_s w_s O_s / sum_s w_s with w_s = exp(lse_s - max), as combine_kernel, all
    (split, row) partials loaded as one (NS, RB, D) tile (one memory latency)."""
    s = kit.arange(0, NS)
    r = kit.arange(0, RB)
    ok = (s[:, None] < n_splits) & (r[None, :] < live)
    idx = s[:, None] * n_rows + (row0 + r)[None, :]
    lse = kit.load(Lp + idx, mask=ok, other=-float("inf"))
    m = kit.max(lse, axis=0)
    w = kit.exp(lse - m[None, :])                  # 0 for padding splits; NaN on dead rows
    w = kit.where(ok, w, 0.0)
    total = kit.sum(w, axis=0)
    d = kit.arange(0, D)
    o = kit.load(Op + idx[:, :, None] * D + d[None, None, :], mask=ok[:, :, None], other=0.0)
    o = kit.where(w[:, :, None] > 0, o * w[:, :, None], 0.0)   # an empty split's 0/0 never leaks
    live_r = r < live
    kit.store(O + (row0 + r)[:, None] * D + d[None, :],
              (kit.sum(o, axis=0) / total[:, None]).to(O.dtype.element_ty),
              mask=live_r[:, None])
    kit.store(L + row0 + r, m + kit.log(total), mask=live_r)


@kit.jit
def combine_kernel(Op, Lp, O, L, n_rows, n_splits, NS: kit.constexpr, D: kit.constexpr):
    """One program per query row: O = sum_s w_s O_s / sum_s w_s with w_s = exp(lse_s - max),
    all splits' partials of the row loaded at once (one memory latency). Launched with PDL
    (programmatic dependent launch) behind decode_kernel: it starts while that one runs and
    waits here until the partials are written and visible."""
    kit.gdc_wait()
    r = kit.program_id(0)
    s = kit.arange(0, NS)
    ok = s < n_splits
    lse = kit.load(Lp + s * n_rows + r, mask=ok, other=-float("inf"))
    m = kit.max(lse, axis=0)
    w = kit.exp(lse - m)                           # 0 for the padding splits
    total = kit.sum(w, axis=0)
    d = kit.arange(0, D)
    o = kit.load(Op + (s * n_rows + r)[:, None] * D + d[None, :], mask=ok[:, None], other=0.0)
    o = kit.where(w[:, None] > 0, o * w[:, None], 0.0)   # an empty split's 0/0 never leaks
    kit.store(O + r * D + d, (kit.sum(o, axis=0) / total).to(O.dtype.element_ty))
    kit.store(L + r, m + kit.log(total))


@functools.lru_cache(maxsize=1024)
def num_splits(n_programs: int, n_blocks: int, n_sms: int) -> int:
    """How many key chunks per (group tile, K/V head): `n_programs` programs without a split,
    `n_blocks` key blocks each, `n_sms` SMs. Enough programs for about one per SM, no more
    (each split costs a Q load, a partial store and the combine's read), and the count whose
    last wave is fullest when several come close. Two programs fit on an SM, but one per SM
    streams as fast and halves the splits: on an H200 (2026-11-29, benchmarks/NOTES.md)
    B1 Skv 4K/16K/32K went 37.1/31.6/40.4 -> 27.9/25.0/39.2 us and B8 38.0/135.4/263.5 ->
    37.1/127.5/247.8 us against the earlier two-per-SM target (not re-measured on an H100)."""
    slots = n_sms
    if n_programs >= slots or n_blocks <= 1:
        return 1
    best, best_eff = 1, 0.0
    for s in range(1, min(n_blocks, MAX_SPLITS) + 1):
        per = math.ceil(n_blocks / s)              # blocks per split ...
        s_eff = math.ceil(n_blocks / per)          # ... and the splits that has
        waves = n_programs * s_eff / slots
        eff = waves / math.ceil(waves)             # how full the waves are
        if eff > best_eff + 0.05 or (eff >= 0.85 and best_eff < 0.85):
            best, best_eff = s_eff, eff
        if eff >= 0.85 and waves >= 0.8:
            break
    return best


_SMS: dict = {}


def _sm_count(device: int) -> int:
    """Multiprocessors of cuda:`device` (132 for -1, the interpreter's CPU tensors: an
    H100's)."""
    if device < 0:
        return 132
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SMS[device]


def attention_decode(q, k, v, causal: bool = False, sm_scale: float | None = None,
                     splits: int | None = None, BN: int | None = None,
                     STAGES: int | None = None, pdl: bool = True, fused: bool | None = None,
                     kv_barriers: bool = False, persistent: int = 0, swap: bool = False):
    """Attention of q (B, H, Sq, D) against k, v (B, H_kv, SK, D), H a multiple of H_kv,
    fp16/bf16, head dim 64, 128 or 256: as `kitjit.nn.attention.attention` (same (o, lse),
    same top-left causal, same copy of inputs that are not contiguous), by split-KV; made for
    Sq <= 16. `splits`: key chunks per K/V head (default: `num_splits` for this GPU; causal
    calls take one); 1 writes the output directly, with no combine kernel. `pdl`: launch the
    combine kernel as a programmatic dependent of the split kernel (it starts early and waits
    on the GPU; a CUDA-graph capture keeps that edge). `fused`: the last program of each
    group merges the partials itself (one launch; default: when its tile fits, FUSE_MAX),
    False: the combine kernel. Variants (issue 12, timed by benchmarks/decode_sweep.py):
    `kv_barriers`: K and V of a stage on barriers of their own, K refilled right after S = Q Kᵀ;
    `persistent`: that many programs per SM, each walking (K/V head, row tile, chunk) items
    with one K/V ring streaming across them (0: one program per item); `swap`: the MMAs'
    operands swapped (Sᵀ = K Qᵀ: keys on the MMA's rows, the group's query rows on its N;
    head dim 64 or 128)."""
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape or k.shape[0] != q.shape[0] \
            or k.shape[3] != q.shape[3] or k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"attention_decode: q must be (B, H, S, D) and k, v (B, H_kv, SK, D) "
                         f"alike, H a multiple of H_kv; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"attention_decode: q, k, v must all be fp16 or all bf16, got "
                        f"{q.dtype}, {k.dtype}, {v.dtype}")
    D = q.shape[3]
    if D not in (64, 128, 256):
        raise ValueError(f"attention_decode: head dim {D} not supported (64, 128, 256)")
    if k.shape[2] == 0:
        raise ValueError("attention_decode: no keys (SK = 0): every softmax row would be empty")
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    if not scale > 0:
        raise ValueError(f"attention_decode: the softmax scale must be positive, got {scale}")
    if int(persistent) < 0:
        raise ValueError(f"attention_decode: persistent is programs per SM (>= 0), got "
                         f"{persistent}")
    if swap and (kv_barriers or persistent or D == 256):
        raise ValueError("attention_decode: swap=True with kv_barriers, persistent or head dim "
                         "256 is not supported yet")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"attention_decode: q, k, v must be on one device, got {q.device}, "
                         f"{k.device}, {v.device}")
    return decode(q, k, v, causal, scale, splits, BN, STAGES, pdl, fused, bool(kv_barriers),
                  int(persistent), bool(swap))


@functools.lru_cache(maxsize=1024)
def _plan(B: int, H: int, Hkv: int, S: int, SK: int, D: int, causal: bool, splits, BN, STAGES,
          sms: int, fused=None, kv_barriers: bool = False, persistent: int = 0,
          swap: bool = False) -> tuple:
    """Launch parameters of one shape (cached: decoding calls the same shapes over and over,
    and the host cost of a call is what small batches wait on)."""
    G = H // Hkv
    R = G * S                                      # query rows per K/V head
    BM = 64                                        # one warpgroup's WGMMA rows
    # two programs per SM (Q 64 x D and the K/V stages in shared memory, < 113 KB each);
    # long caches over more programs than SMs: 128-key blocks, one program per SM (144 KB),
    # half the loop steps (H200, session 9: B64 Skv16K/32K 931/1860 -> 923/1840 us)
    long = D <= 128 and not (swap or causal or persistent) and SK >= 16384 and \
        B * Hkv * kit.cdiv(R, BM) > sms
    BN = BN or (128 if long else 64 if D <= 128 else 32)
    if swap:         # the keys on the MMA's 64 rows, the tile's query rows (8 to 64) on its N
        BM, BN = min(64, max(8, kit.next_power_of_2(R))), 64
    keys = min(SK, S) if causal else SK            # top-left causal: keys 0..Sq-1 at most
    n_blocks = kit.cdiv(keys, BN)
    row_tiles = kit.cdiv(R, BM)
    if splits is None:
        splits = num_splits(B * Hkv * row_tiles, n_blocks, sms)
    if causal:       # one chunk: every row then sees key 0 (a chunk no key of which a row
        splits = 1   # sees would leave that row's softmax empty)
    splits = max(1, min(int(splits), n_blocks, MAX_SPLITS))
    chunk = kit.cdiv(n_blocks, splits) * BN
    splits = kit.cdiv(keys, chunk)                 # every split holds at least one key
    # one program per SM or fewer: a third stage (115 KB, which would halve two-per-SM
    # occupancy) keeps more of the stream in flight. H200, session 9, us: B1 Skv32K 39.2 ->
    # 37.6, B8 Skv16K 126.2 -> 121.6, Skv32K 247.0 -> 237.4; B64 (two per SM) 237.7 -> 240.3
    STAGES = STAGES or (3 if splits * row_tiles * B * Hkv <= sms and D <= 128
                        and not (swap or persistent)
                        else 2)
    n_rows = B * H * S
    grid = (splits, row_tiles, B * Hkv)
    if persistent:   # one 1-d grid of programs walking the splits * row_tiles * B*Hkv items
        grid = (min(splits * row_tiles * B * Hkv, sms * persistent),)
    ns = kit.next_power_of_2(splits)
    rb = kit.next_power_of_2(min(R, BM))           # live rows of a tile, padded
    if fused is None:
        fused = ns * rb * D <= FUSE_MAX
    fused = bool(fused) and splits > 1
    meta = dict(BM=BM, BN=BN, D=D, CAUSAL=causal, STAGES=STAGES, SPLIT=splits > 1,
                FUSED=fused, NS=ns if fused else 1, RB=rb if fused else 1, num_warps=4)
    if kv_barriers:   # (the default's meta, and so its cache key, stay as they were)
        meta["SEPKV"] = True
    # (a fused route captured into a CUDA graph launches the split kernel with this meta and
    # the combine kernel: no counters, so no memset node in the graph)
    return grid, splits, (n_rows, R, SK, S, H, G, chunk), meta, \
        dict(NS=ns, D=D, num_warps=8 if ns * D >= 8192 else 4)


def decode(q, k, v, causal: bool, scale: float, splits=None, BN=None, STAGES=None,
           pdl: bool = True, fused: bool | None = None, kv_barriers: bool = False,
           persistent: int = 0, swap: bool = False):
    """attention_decode without its argument checks: for callers that made them; scale is
    the softmax scale."""
    B, H, S, D = q.shape
    Hkv, SK = k.shape[1], k.shape[2]
    dev = q.device
    return route(B, H, Hkv, S, SK, D, causal, scale, splits, BN, STAGES, pdl, q.dtype,
                 -1 if dev.type != "cuda" else dev.index if dev.index is not None
                 else torch.cuda.current_device(), fused, kv_barriers, persistent,
                 swap)(q, k, v, True)


_WS_ALIGN = 64   # workspace regions start on 256-byte boundaries


def _up(n: int) -> int:
    return -(-n // _WS_ALIGN) * _WS_ALIGN


class Route:
    """One decode shape, dtype and device: the plan, the launch sites and every number of a
    call, made once (a decode loop calls the same shapes over and over, and the host cost of
    a call is what small batches wait on: kitjit/nn/_host.py). Calling it with (q, k, v,
    want_lse) runs the kernels and returns (o, lse); lse is None when not wanted (sdpa
    without autograd), then written to scratch memory nobody reads. One launch when the
    split kernel merges its partials itself (FUSED), else the split kernel and the combine
    kernel."""

    def __init__(self, B, H, Hkv, S, SK, D, causal, scale, splits, BN, STAGES, pdl, dtype,
                 device, fused=None, kv_barriers=False, persistent=0, swap=False):
        grid, splits, args, meta, cmeta = _plan(B, H, Hkv, S, SK, D, causal, splits, BN,
                                                STAGES, _sm_count(device), fused, kv_barriers,
                                                persistent, swap)
        kernel = decode_kernel
        if persistent:
            from kitjit.nn.decode_variants import decode_persistent_kernel as kernel
        elif swap:
            from kitjit.nn.decode_variants import decode_swap_kernel as kernel
        self.grid, self.splits, self.D = grid, splits, D
        self.fused = meta["FUSED"]
        self.dtype, self.device = dtype, device
        self.tdev = torch.device("cuda", device) if device >= 0 else torch.device("cpu")
        self.oshape, self.lshape = (B, H, S, D), (B, H, S)
        self.empty = B * H * S * D == 0
        self.qrows, self.kvheads, self.SK = B * H * S, B * Hkv, SK
        self.esize = torch.empty((), dtype=dtype).element_size()
        n_rows = args[0]
        self.n_rows = n_rows
        self.tail = (*args, scale * LOG2E)          # decode_kernel's ints and its scale
        facts = (dtype, device, *int_facts(*args))
        self.split = Site(kernel, meta, facts, device)
        self.pad = (None,) * (len(self.tail) + 5)   # no tensor behind O .. Cnt and numbers
        self.combine = None
        self.n_tiles = kit.cdiv(args[1], meta["BM"]) * B * Hkv   # FUSED: a counter per (row
        # tile, K/V head)
        if splits > 1:
            combine = Site(combine_kernel, dict(cmeta, launch_pdl=pdl and device >= 0),
                           (dtype, device, *int_facts(n_rows, splits)), device)
            self.cgrid = (n_rows,)
            self.cpad = (None,) * 6
            self.cn = (n_rows, splits)
            if self.fused:   # graph capture: the split kernel's partials and the combine
                self.captured = (Site(kernel, dict(meta, FUSED=False, NS=1, RB=1),
                                      facts, device), combine)
            else:
                self.combine = combine
        if splits > 1:
            self.lp_off = 4 * _up(splits * n_rows * D)      # bytes into the workspace
            self.sink_off = self.lp_off + 4 * _up(splits * n_rows)
        else:
            self.lp_off = self.sink_off = 0
        self.ws_numel = self.sink_off // 4 + _up(n_rows)
        self.rows = (Rows(-1, 0, 0, 0),) * 3     # the last call's TMA operands

    def __call__(self, q, k, v, want_lse: bool):
        split, combine = self.split, self.combine
        if split.fn is None or (combine is not None and combine.fn is None) or self.empty \
                or _launcher._is_compiling():
            return self.slow(q, k, v, want_lse)
        qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
        if (qp | kp | vp) & 15 or not (q.is_contiguous() and k.is_contiguous()
                                       and v.is_contiguous()):
            return self.slow(q, k, v, want_lse)
        ws = workspace(self.device, self.ws_numel, self.n_tiles if self.fused else 0) \
            if self.splits > 1 or not want_lse else (None, 0, 0)
        if ws is None:                       # the stream is being captured
            return self.slow(q, k, v, want_lse)
        wp = ws[1]
        o = q.new_empty(self.oshape)
        if want_lse:
            lse = q.new_empty(self.lshape, dtype=torch.float32)
            lp = lse.data_ptr()
        else:
            lse, lp = None, wp + self.sink_off
        op = o.data_ptr()
        # the TMA operands as pointer + rows (no views); the K/V cache's are kept, as it
        # stays put from one step to the next
        qr, kr, vr = self.rows
        if qr.ptr != qp or kr.ptr != kp or vr.ptr != vp:
            D, e = self.D, self.esize
            qr = qr if qr.ptr == qp else Rows(qp, self.qrows, D, e)
            kr = kr if kr.ptr == kp else Rows(kp, self.SK, D, e, self.kvheads)
            vr = vr if vr.ptr == vp else Rows(vp, self.SK, D, e, self.kvheads)
            self.rows = qr, kr, vr
        if self.splits == 1:
            split.fn(self.grid, qr, kr, vr, *self.pad, qp, kp, vp, op, lp, op, lp, lp,
                     *self.tail)
            return o, lse
        if self.fused:
            split.fn(self.grid, qr, kr, vr, *self.pad, qp, kp, vp, wp, wp + self.lp_off, op,
                     lp, ws[2], *self.tail)
            return o, lse
        split.fn(self.grid, qr, kr, vr, *self.pad, qp, kp, vp, wp, wp + self.lp_off, wp,
                 wp, wp, *self.tail)
        combine.fn(self.cgrid, *self.cpad, wp, wp + self.lp_off, op, lp, *self.cn)
        return o, lse

    def out(self, q, k, v):
        """sdpa's call: the output alone (its log-sum-exp goes to scratch)."""
        return self(q, k, v, False)[0]

    def slow(self, q, k, v, want_lse: bool):
        """The call through `kernel[grid](...)`: the first of a route (it makes the sites'
        launchers), inputs that are not contiguous or aligned (copied), the interpreter,
        torch.compile's tracing, CUDA graph capture (every buffer from torch; a fused route
        launches the split and combine kernels there, as zeroed counters would need a memset
        node in the graph)."""
        D = self.D
        q2 = _rows(q, D)
        k2, v2 = (_heads(t, D) for t in (k, v))
        o = torch.empty(self.oshape, device=self.tdev, dtype=self.dtype)
        lse = torch.empty(self.lshape, device=self.tdev, dtype=torch.float32)
        if self.empty:
            return o, lse
        if self.splits == 1:
            self.split.slow(self.grid, q2, k2, v2, o, lse, o, lse, lse, *self.tail)
            return o, lse
        n_rows = self.n_rows
        op = torch.empty((self.splits, n_rows, D), device=self.tdev, dtype=torch.float32)
        lp = torch.empty((self.splits, n_rows), device=self.tdev, dtype=torch.float32)
        split, combine = self.split, self.combine
        if self.fused:
            if self.device < 0 or not torch.cuda.is_current_stream_capturing():
                cnt = torch.zeros(self.n_tiles, device=self.tdev, dtype=torch.int32)
                split.slow(self.grid, q2, k2, v2, op, lp, o, lse, cnt, *self.tail)
                return o, lse
            split, combine = self.captured   # zeroed counters would need a memset node
        split.slow(self.grid, q2, k2, v2, op, lp, op, lp, lp, *self.tail)
        combine.slow(self.cgrid, op, lp, o, lse, *self.cn)
        return o, lse


route = functools.lru_cache(maxsize=1024)(Route)
on_reset(route.cache_clear)
