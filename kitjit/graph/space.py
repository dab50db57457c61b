"""The search space of each group (tile shapes, warps, splits, prefetch, GQA packing, the
FMA form for single rows) and the cost model that ranks and prunes it before anything is
timed.

The model is a roofline with occupancy, of the GPU the search runs on (an H100 SXM's
without one): time = max(bytes / achieved bandwidth, FLOPs / rate) + a memory latency per
wave of programs + a launch per extra kernel. Achieved bandwidth is HBM's (~3.35 TB/s on
an H100, ~4.8 on an H200: level 2 scales by bandwidth()), or less when too few SMs have
work (each pulls at most ~1/96 of it) or too few bytes are in flight (Little's law:
programs resident at once x bytes each loads per step x stages, over the ~1 us latency of a
loaded memory system); residency comes from a register estimate (and the rings' shared
memory). A level-2 matmul is also bound by its busiest SM: the programs it runs stream
their bytes through it at ~38 GB/s (L2_SM_BPS), so a skinny matmul fills the SMs in whole
waves by its split count. The level-2 attention
loop is also bound by its own chain of dependent steps (wait for a tile, S = Q Kᵀ, softmax,
O += P V, a refill), one key tile a step: long key chunks of short tiles are step-bound,
not bandwidth-bound (ATTN_STEP_S). FLOPs go at ~800 TFLOP/s (dense bf16/fp16 WGMMA) times
LEVEL1_MMA (kit.dot is mma.sync) or at the CUDA cores' FMA rate. It ranks candidates: the
GPU's timing picks among the best."""

from __future__ import annotations

import functools
import itertools
import math

from . import codegen_attn_wgmma, codegen_wgmma
from .codegen import p2
from .codegen_attn import layout, packable
from .codegen_mm import FUSED_UNROLL
from .plan import Group

HBM_BPS = 3.35e12          # H100 SXM HBM3: the figures below are an H100's, scaled by
                           # bandwidth() on another GPU (an H200's HBM3e: ~4.8 TB/s)
TENSOR_FLOPS = 800e12      # dense fp16/bf16 on WGMMA
LEVEL1_MMA = 0.5           # kit.dot (mma.sync, operands through registers): share of that
CUDA_FLOPS = 25e12         # fp32 FMA with fp16 conversion in the loop, effective
SMS = 132
LATENCY_S = 1.0e-6         # a load's round trip in a loaded memory system
SM_BPS = 35e9              # what one SM pulls at most: HBM's peak needs ~96 SMs busy
LAUNCH_S = 2.5e-6          # one more kernel in the chain (launch gap + its ramp)
REGS_SM, MAX_REGS, WARPS_SM, CTAS_SM = 65536, 255, 64, 32
REG_LIMIT = 280            # estimates over this are dropped (the estimate is ~20% off)
SMEM_BYTES = 227 * 1024
KEEP = 3.0                 # candidates modelled within KEEP x the best survive pruning
# level 2 with x * w as a register A operand (rms_norm prologue) ran 2.4-4.5x its roofline
# on the H100 (48-76 us against 17-20, 2026-11-24: x's tile is re-laid out for WGMMA at every
# k-step); the swapped TMA form ran within 8% of it
NORM_A_SLOWDOWN = 3.5
# the swapped form with the norm (NORM "smem": x * w written over a copy of x's shared tile
# each k-step, a bar.sync before the MMA) streams the same bytes as the swapped form after a
# row kernel; its k-step's chain is ~0.1-0.2 us longer (shared round trip, fence, barrier),
# which a ring of 3+ stages hides when the stream is the bound. Not measured yet: a guess
NORM_SMEM_COST = 1.05
# (level 1 ran 2-6x its modelled time too, unevenly: a flat factor on it pushed the measured
# winners of GQA B1 and LoRA out of the timed set, so none is applied; NOTES.md, session 5)
# Where a skinny matmul group also has the level-2 form, its level-1 forms ran 4-6x their
# model on an H200 (rms_norm + linear 16x4096x6144: 71-97 us against 17-20; gated MLP
# 8x4096x4096: 84-147 against 22-25; 2026-11-29) and took half the timed set from level 2's
# variants: this much more for them there (LoRA, which level 2 does not take, keeps none)
LEVEL1_BESIDE_L2 = 3.0
# Attention: the hand-written level-2 decode (kitjit/nn/attention_decode.py, TMA ring + WGMMA)
# streams K/V at ~3.0 TB/s on the H100; the generated level-1 forms reached 0.8-1.4 (the FMA
# form 1.2-1.4, mma.sync 0.3-0.8; NOTES.md, session 5): their ceilings in the model
ATTN_L2_BPS = 3.0e12
ATTN_L1_BPS = 1.4e12
# One step of the level-2 attention loop (a key tile: barrier wait, two dependent WGMMAs,
# the row max / sum shuffles, the refill) takes ATTN_STEP_S plus ATTN_TILE_S per 32 keys of
# D + Dv = 256, the latter shared by the programs resident on an SM. H200 (2026-11-29,
# graph_bench): BN 32, D 128 ran 0.68-0.70 us a step (GQA B8 S32K, 512 steps a program:
# 348 us; seed decode 64 steps: 44.9 us) where the bytes alone would take 250 and 31 us;
# the hand kernel's BN 64 ran <= 0.97 us a step (248 us, 256 steps, bandwidth-bound)
ATTN_STEP_S = 0.40e-6
ATTN_TILE_S = 0.28e-6
# A level-2 matmul's TMA ring: what one SM pulls at most, whatever the GPU's HBM (so not
# scaled by bandwidth()). H200, 2026-11-29: rms_norm + linear 16x4096x6144, BN 128 split 2
# (96 programs of 576 KB, one an SM) took ~14.5 us of its 16.7; the gated MLP 8x4096x4096,
# BN 64 split 2 (128 programs of 576 KB) 18.9: 34-40 GB/s a program. So a skinny matmul
# whose column blocks leave SMs idle is bound by its busiest SM, whose programs (co-resident
# ones share it) stream their bytes at this rate: more splits or narrower blocks fill the
# SMs, in whole waves or not at all (144 programs on 132 SMs: the busiest SM has two).
L2_SM_BPS = 38e9
# A level-2 matmul's weights are read once (one program per weight tile), so their copies
# may skip L2's 256-byte promotion (L2W 0): the decode kernel's stream gained ~7% that way
# on an H200 (NOTES.md, session 9). The model has no term for it: both are timed (search.py
# keys the families by L2W), and 0 wins a modelled tie by this much
L2W_TIE = 0.005
# the step chain and the memory stream overlap, not perfectly: the smaller of the two
# counts this much on top of the larger (so fewer, longer steps win a bandwidth-bound tie)
ATTN_OVERLAP = 0.15
# A level-2 attention grid of one program an SM or fewer: a third stage of the ring keeps
# more of the stream in flight (the tile being consumed is not). The hand decode kernel,
# H200, session 9 (NOTES.md): 2 -> 3 stages, B1 S32K 39.2 -> 37.6 us, B8 S16K 126.2 -> 121.6,
# B8 S32K 247.0 -> 237.4 (~4%); with two programs an SM it lost (237.7 -> 240.3)
ATTN_DEEP_RING = 0.04


@functools.cache
def bandwidth() -> float:
    """DRAM bytes/s of the GPU the search runs on (HBM_BPS without one): the model's
    bandwidths scale by bandwidth() / HBM_BPS."""
    from ..testing import get_dram_gbps, has_gpu

    if not has_gpu():
        return HBM_BPS
    try:
        bps = get_dram_gbps() * 1e9
    except Exception:  # noqa: BLE001 (a driver that does not say: the H100's figures)
        return HBM_BPS
    return bps if 1e11 < bps < 1e14 else HBM_BPS


def _nbytes(t) -> int:
    return math.prod(t.shape) * t.dtype.itemsize


def choices(grp: Group) -> list[dict]:
    """Every parameter set of `grp` that fits the register and shared-memory budgets."""
    if grp.kind == "row":
        return _row_choices(grp)
    if grp.kind == "matmul":
        return _mm_choices(grp)
    return _attn_choices(grp)


def _row_choices(grp: Group) -> list[dict]:
    out = []
    C = grp.space[grp.axis]
    R = math.prod(grp.space) // C
    block = p2(C)
    for rows in (1, 2, 4, 8, 16):
        if rows > p2(R):
            break
        for nw in (1, 2, 4, 8, 16):
            p = dict(ROWS=rows, num_warps=nw)
            if registers(grp, p) <= 200 and rows * block >= 32 * nw // 4:
                out.append(p)
    return out


def _mm_choices(grp: Group) -> list[dict]:
    out = []
    *batch, M, N = grp.mms[0].shape
    K = grp.mms[0].inputs[0].shape[-1]
    n = len(grp.mms)
    lr = grp.lowrank
    norms = ("pro", "epi") if grp.prologue is not None else (None,)
    for BM, BN, BK, nw, split, stages, norm in itertools.product(
            (16, 32, 64, 128), (32, 64, 128, 256), (32, 64, 128, 256), (2, 4, 8),
            (1, 2, 4, 8, 16), (1, 2), norms):
        if BM > p2(M, 16) or BN > p2(N, 32) or BK > p2(K, 32):
            continue
        nbk = -(-K // BK)
        if split > 1 and (lr or split > nbk or (split - 1) * -(-nbk // split) >= nbk):
            continue
        if stages == 2 and -(-nbk // split) < 2:
            continue     # a prefetch needs two K tiles per program
        p = dict(BM=BM, BN=BN, BK=BK, SPLIT=split, STAGES=stages, num_warps=nw)
        if norm:
            p["NORM"] = norm
        if registers(grp, p) <= REG_LIMIT and (BM * BK + n * BK * BN) * 2 <= SMEM_BYTES:
            out.append(p)
    return out + codegen_wgmma.choices(grp)


def _attn_choices(grp: Group) -> list[dict]:
    out = []
    N = grp.mm1.shape[-1]
    can_pack = bool(packable(grp))
    for pack, form in itertools.product((False, True) if can_pack else (False,),
                                        ("mma", "fma")):
        grp.params = dict(PACK=pack)
        R = layout(grp)["R"]
        if form == "fma" and R > 8:
            continue
        for BM, BN, split, stages, nw in itertools.product(
                (1,) if form == "fma" else (16, 32, 64, 128), (16, 32, 64, 128),
                (1, 2, 4, 8, 16, 32, 64), (1, 2), (1, 2, 4, 8)):
            if form == "mma" and (BM > p2(R, 16) or nw < BM // 32):
                continue
            if form == "fma" and nw > 4:
                continue
            if BN > p2(N, 16):
                continue
            nblk = -(-N // BN)
            ch = -(-nblk // split)
            if split > nblk or (split - 1) * ch >= nblk:
                continue     # every split gets keys
            if stages == 2 and ch < 2:
                continue     # a prefetch needs two key tiles per program
            p = dict(FORM=form, PACK=pack, BM=BM, BN=BN, SPLIT=split, STAGES=stages,
                     num_warps=nw)
            if registers(grp, p) <= REG_LIMIT:
                out.append(p)
    grp.params = {}
    return out + [p for p in codegen_attn_wgmma.choices(grp) if _splits_needed(grp, p)]


def _splits_needed(grp: Group, p: dict) -> bool:
    """Level-2 attention: splits up to the first count whose programs fill the SMs, and
    one doubling past it (two programs an SM). More only add partials to merge: the hand
    decode kernel's one program per SM beat two per SM on an H200 (248 against 264 us, GQA
    B8 S32K), and the model, which sees co-resident programs overlap, would crowd the
    timed set with them."""
    L = layout(_with(grp, p))
    base = -(-L["R"] // p["BM"]) * L["NB"]
    return p["SPLIT"] == 1 or base * (p["SPLIT"] // 2) < SMS


def deep_ring(grp: Group, p: dict) -> bool:
    """Level-2 attention with a ring of 3+ stages on a grid of one program an SM or fewer:
    where a deeper ring pays (ATTN_DEEP_RING); search.py times it as a family of its own."""
    if p.get("FORM") != "wgmma" or grp.kind != "attention" or p.get("STAGES", 1) < 3:
        return False
    L = layout(_with(grp, p))
    return -(-L["R"] // p["BM"]) * L["NB"] * p["SPLIT"] <= SMS


def cost(grp: Group, p: dict) -> float:
    """Modelled seconds of `grp` with parameters `p` on an H100."""
    loads = sum(_nbytes(x) for x in grp.loads())
    stores = sum(_nbytes(t) for t in grp.nodes if t.id in grp.store_ids)
    nw, stages = p["num_warps"], p.get("STAGES", 1)
    # level 2 (TMA rings) streams at the GPU's bandwidth; level 1 ran 2-6x its modelled time
    # on both H100 and H200, unevenly, so its figures stay the H100's (a faster GPU would
    # only crowd the timed set with it)
    scale = bandwidth() / HBM_BPS if p.get("FORM") == "wgmma" else 1.0
    kernels, flops, rate, peak = 1, 0.0, TENSOR_FLOPS * LEVEL1_MMA, HBM_BPS * scale
    tail, steps, prog_bytes = 0.0, None, 0.0
    if grp.kind == "row":
        C = grp.space[grp.axis]
        rows = math.prod(grp.space) // C
        progs = -(-rows // p["ROWS"])
        step = (loads + stores) / max(rows, 1) * p["ROWS"]
    elif grp.kind == "matmul":
        *batch, M, N = grp.mms[0].shape
        K = grp.mms[0].inputs[0].shape[-1]
        BM, BN, BK, split = p["BM"], p["BN"], p["BK"], p.get("SPLIT", 1)
        n = len(grp.mms)
        gm, gn = -(-M // BM), -(-N // BN)
        if p.get("FORM") == "wgmma":     # TMA ring: STAGES-1 stages in flight, full WGMMA
            rate, stages = TENSOR_FLOPS, stages - 1
        NB = math.prod(batch)
        progs = gm * gn * NB * split
        a = grp.mms[0].inputs[0] if grp.prologue is None else grp.prologue.inputs[0]
        loads += 0.1 * (gn - 1) * _nbytes(a)          # A again per column block (L2 mostly)
        if grp.prologue is not None and p.get("NORM") == "pro":
            loads += 0.1 * gn * _nbytes(a)
        flops = 2.0 * gm * BM * gn * BN * K * NB * n
        if grp.lowrank:
            flops += 2.0 * gm * BM * gn * BN * p2(grp.lowrank[0].shape[-1], 16) * NB * 2
        if split > 1:
            kernels = 2
            stores += 2 * 4 * split * n * NB * M * N       # partials out and back in
            if p.get("FUSE"):   # no combine launch; the last program reads after the others
                # (from L2: they were just written), FUSED_UNROLL partials at a time
                rounds = 1 if split <= FUSED_UNROLL else -(-split // FUSED_UNROLL)
                kernels, tail = 1, LATENCY_S * rounds
                stores -= 4 * split * n * NB * M * N
        step = (BM * BK + n * BK * BN) * 2
        if p.get("FORM") == "wgmma":   # what each program streams through its ring
            nbk = -(-K // BK)
            prog_bytes = step * -(-nbk // split)
    else:
        L = layout(_with(grp, p))
        R, NB = L["R"], L["NB"]
        N = grp.mm1.shape[-1]
        D, Dv = grp.mm1.inputs[0].shape[-1], grp.mm2.shape[-1]
        BN, split = p["BN"], p["SPLIT"]
        fma = p["FORM"] == "fma"
        l2 = p["FORM"] == "wgmma"
        BM = 1 if fma else p["BM"]
        gm = R if fma else -(-R // BM)
        progs = gm * NB * split
        kv = _nbytes(grp.mm1.inputs[1]) + _nbytes(grp.mm2.inputs[1])
        # K and V again for each row block (L2 catches part of it), and for each query head
        # of a group when the heads are not packed
        G = 1 if L["packed"] else math.prod(grp.mm2.shape[i] for i in packable(grp))
        reread = gm * G - 1
        loads += kv * 0.3 * reread
        if fma:
            flops, rate = 2.0 * R * NB * N * (D + Dv), CUDA_FLOPS
        else:
            flops = 2.0 * progs * BM * -(-N // split) * (p2(D, 16) + p2(Dv, 16))
        if l2:   # WGMMA at full rate; the ring keeps all its stages in flight
            rate = TENSOR_FLOPS
        if split > 1:
            kernels = 2
            stores += 2 * 4 * split * NB * R * (Dv + 2)
            if p.get("FUSE"):   # no combine launch; the last program reads after the others
                kernels, tail = 1, LATENCY_S
        step = BN * (D + Dv) * 2
        nblk = -(-N // BN)
        peak = (ATTN_L2_BPS if l2 else ATTN_L1_BPS) * scale
        if l2:   # key tiles a program walks, and one step's work (per 32 keys, D + Dv 256)
            steps = (-(-nblk // split), BN / 32 * (D + Dv) / 256)
    regs = min(MAX_REGS, registers(grp, p))
    per_sm = max(1, min(REGS_SM // int(regs * 32 * nw), WARPS_SM // nw, CTAS_SM))
    if grp.kind == "attention" and p["FORM"] == "wgmma":
        per_sm = max(1, min(per_sm, SMEM_BYTES // codegen_attn_wgmma.smem_bytes(grp, p)))
    elif prog_bytes:
        per_sm = max(1, min(per_sm, SMEM_BYTES // codegen_wgmma.smem_bytes(grp, p)))
    resident = min(progs, SMS * per_sm)
    waves = -(-progs // (SMS * per_sm))
    busy = min(1.0, progs / SMS)
    bw = min(peak, min(progs, SMS) * SM_BPS * scale, resident * step * stages / LATENCY_S)
    t_bytes = (loads + stores) / bw
    if deep_ring(grp, p):
        t_bytes *= 1 - ATTN_DEEP_RING
    t = max(t_bytes, flops / rate / busy)
    if prog_bytes:   # the busiest SM's programs, through their rings (Little's law below
        busiest = -(-progs // SMS)          # L2_SM_BPS: a shallow ring on its own SM)
        co = min(per_sm, busiest)
        t = max(t, busiest * prog_bytes / min(L2_SM_BPS, co * step * stages / LATENCY_S))
    if steps is not None:   # the loop's chain of steps, programs sharing an SM in parallel
        co = min(per_sm, -(-progs // SMS))
        t_loop = waves * steps[0] * (ATTN_STEP_S + co * steps[1] * ATTN_TILE_S)
        t = max(t, t_loop) + ATTN_OVERLAP * min(t, t_loop)
    t += waves * LATENCY_S + (kernels - 1) * LAUNCH_S + tail
    if p.get("FORM") == "wgmma" and grp.prologue is not None:
        t *= NORM_A_SLOWDOWN if p.get("NORM") == "epi" else NORM_SMEM_COST
    elif grp.kind == "matmul" and p.get("FORM") is None and codegen_wgmma.eligible(grp):
        t *= LEVEL1_BESIDE_L2
    if p.get("L2W") == 0:   # ties: no promotion for weights each program reads once
        t *= 1 - L2W_TIE
    if grp.kind == "attention" and p["FORM"] == "wgmma":   # ties: the smaller ring
        t *= 1 + 0.02 * codegen_attn_wgmma.smem_bytes(grp, p) / SMEM_BYTES
    return t * (1 + 0.05 * regs / MAX_REGS)   # ties: the lighter kernel (spills, residency)


def registers(grp: Group, p: dict) -> float:
    """Estimated 32-bit registers per thread: the loaded tiles of every stage with their
    64-bit addresses, kit.dot's operand copies (A replicated over the warps that split N),
    the fp32 accumulators. Within ~20% of ptxas on the generated sm_90a kernels."""
    nw, st = p["num_warps"], p.get("STAGES", 1)
    th = 32 * nw
    if grp.kind == "row":
        C = grp.space[grp.axis]
        return 40 + p["ROWS"] * p2(C) * (len(grp.nodes) + 2) / th
    if grp.kind == "matmul":
        BM, BN, BK = p["BM"], p["BN"], p["BK"]
        n = len(grp.mms)
        if p.get("FORM") == "wgmma":     # operands in shared memory: accumulators only
            extra = 3 * BM * BK / th if p.get("NORM") == "smem" else 0   # x, x * x, x * w
            return 40 + (n + 1) * BM * BN / th + extra
        RP = p2(grp.lowrank[0].shape[-1], 16) if grp.lowrank else 0
        loaded = BM * BK + n * BK * BN + BK * RP                  # halves per stage
        wm = max(1, min(nw, BM // 16))
        return (40 + loaded / (2 * th) * st + loaded / (4 * th) * st + BM / wm * BK / 64
                + (n * BK * BN + BK * RP) / (2 * th) + (n * BN + RP) * BM / th)
    if p.get("FORM") == "wgmma":     # Q, K and V in shared memory
        return codegen_attn_wgmma.registers(grp, p)
    D, Dv = p2(grp.mm1.inputs[0].shape[-1], 16), p2(grp.mm2.shape[-1], 16)
    BN = p["BN"]
    loaded = BN * (D + Dv)
    base = 40 + loaded / (2 * th) * st + loaded / (4 * th) * st
    if p.get("FORM") == "fma":
        return base + (D + Dv) / th
    BM = p["BM"]
    wm = max(1, min(nw, BM // 16))
    return (base + BM / wm * (D + BN) / 64 + loaded / (2 * th)
            + BM * (Dv + BN) / th)


def _with(grp: Group, p: dict) -> Group:
    import copy

    c = copy.copy(grp)
    c.params = p
    return c


def ranked(grp: Group) -> list[tuple[float, dict]]:
    """(modelled seconds, params) of `grp`, best first, pruned to KEEP x the best."""
    cs = sorted(((cost(grp, p), p) for p in choices(grp)), key=lambda c: c[0])
    if not cs:
        return []
    return [c for c in cs if c[0] <= KEEP * cs[0][0]]
