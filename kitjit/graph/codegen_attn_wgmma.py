"""kitjit source for an attention group on Hopper's level 2 (FORM "wgmma"), the shape of
kitjit/nn/attention_decode.py: a program takes BM = 64 query rows (one warpgroup's WGMMA
rows; with PACK the query heads of a K/V head are rows of one tile, so each K/V tile it
loads serves the whole group) and streams its part of the keys through a ring of STAGES
shared-memory stages that TMA fills, each stage landing on its own mbarrier; S = Q Kᵀ and
O += P V run on WGMMA, the online softmax in registers between them. With SPLIT > 1 the
keys are cut into chunks over programs (flash-decoding) and the level-1 combine kernel
(codegen_attn.output_tail) merges the partials by their log-sum-exps.

Decode is bound by the K/V read: the MMAs on mostly idle rows (4 live of 64 for GQA with 4
heads a group) cost little next to a tile's load, so what matters is enough tiles in
flight (splits x stages), which the cost model (space.py) weighs.

TMA reads 2-d views of whole contiguous buffers, so this applies where the operands are laid
out for it: Q's rows of one batch program consecutive rows of a [rows, D] view; K either as
rows [keys, D] (K given as (..., N, D) and transposed in the graph) or as columns [D, keys]
(given as (..., D, N), the seed example); V as rows [keys, Dv]; fp16/bf16; D and Dv powers
of two from 16 to 256; no rms_norm prologue. Key tiles past a batch's keys would read the
next batch's rows: their scores are masked to -inf (p = 0)."""

from __future__ import annotations

import math

from .codegen import (
    KIT_DTYPE,
    LOG2E,
    Access,
    Emitter,
    Index,
    bound,
    buf,
    elementwise,
    flat_offset,
    p2,
)
from .codegen_attn import layout, output_tail, packable
from .graph import contiguous_strides

BM = 64            # one warpgroup's rows
# the last split program merges the partials itself (FUSE) while its splits x live rows x Dv
# stay within this: the bound of kitjit/nn/attention_decode.py (H100: one launch won by
# 1-5 us at 4 splits x 4 rows, D 128; lost ~1 us at 32 splits x 4 rows)
FUSE_MAX = 8192
# an SM's shared memory for one block (227 KB): BN 128 with 3 stages (Q 16 KB + 3 x 64 KB of
# K/V + barriers) takes 214.6 KB on sm_90a (ptxas, seed decode D 128), one program an SM
SMEM_MAX = 227 * 1024
DIMS = (16, 32, 64, 128, 256)


def _rows_major(sizes, strides, unit: int) -> bool:
    """Whether axes (sizes, strides) walk consecutive rows of `unit` elements in order."""
    c = unit
    for n, st in zip(reversed(sizes), reversed(strides)):
        if n != 1 and st != c:
            return False
        c *= n
    return True


def operands(group) -> dict | None:
    """How TMA reads Q, K and V (the 2-d views' widths and each batch program's first row
    in units of rows), or None where it cannot."""
    if group.kind != "attention" or group.norms:
        return None
    mm1, mm2 = group.mm1, group.mm2
    q, kt, v = mm1.inputs[0], mm1.inputs[1], mm2.inputs[1]
    S = mm2.shape
    D, N, Dv = q.shape[-1], mm1.shape[-1], S[-1]
    if D not in DIMS or Dv not in DIMS:
        return None
    if len({q.dtype, kt.dtype, v.dtype}) != 1 or KIT_DTYPE.get(q.dtype) in (None, "kit.float32"):
        return None
    for t in (q, kt, v):
        b = t.base()
        if Access.of(b).strides != contiguous_strides(b.shape):
            return None
    batch = S[:-2]
    qa = Access.of(q).aligned((*batch, S[-2], D))
    ka = Access.of(kt).aligned((*batch, D, N))
    va = Access.of(v).aligned((*batch, N, Dv))
    if qa[-1] != 1 or va[-1] != 1 or va[-2] != Dv:
        return None
    if ka[-2] == 1 and ka[-1] == D:
        kmode, kw = "rows", D          # K stored [keys, D]: a tile is [BN, D], read as .T
    elif ka[-1] == 1 and ka[-2] == N and (N * 2) % 16 == 0:
        kmode, kw = "cols", N          # K stored [D, keys]: a tile is [D, BN]
    else:
        return None
    widths = {}
    for t, w in ((q, D), (kt, kw), (v, Dv)):
        if widths.setdefault(t.base().id, w) != w or math.prod(t.base().shape) % w:
            return None
    return dict(qa=qa, ka=ka, va=va, kmode=kmode, widths=widths, D=D, N=N, Dv=Dv)


def eligible(group) -> bool:
    return operands(group) is not None


def _batch_row(acc_strides, L, S, unit: int) -> str | None:
    """First row (in rows of `unit` elements) of batch program `b`; None if a stride is not
    a whole number of rows."""
    st = [acc_strides[a] for a in L["unpacked"]]
    if any(s % unit for s in st):
        return None
    return flat_offset([S[a] for a in L["unpacked"]], [s // unit for s in st], "b")


def rows_ok(group, params: dict) -> bool:
    """With this PACK, whether each batch program's Q rows, K and V rows are whole rows of the
    2-d views, the Q rows consecutive."""
    ops = operands(group)
    if ops is None:
        return False
    g = _with(group, params)
    L = layout(g)
    S = group.mm2.shape
    rows = L["packed"] + (L["nb"],)
    if not _rows_major([S[a] for a in rows], [ops["qa"][a] for a in rows], ops["D"]):
        return False
    kunit = ops["D"] if ops["kmode"] == "rows" else ops["N"]
    return all(_batch_row(a, L, S, u) is not None for a, u in
               ((ops["qa"], ops["D"]), (ops["ka"], kunit), (ops["va"], ops["Dv"])))


def _with(group, params):
    import copy

    c = copy.copy(group)
    c.params = params
    return c


def smem_bytes(group, p: dict) -> int:
    ops = operands(group)
    return 2 * (BM * ops["D"] + p["STAGES"] * p["BN"] * (ops["D"] + ops["Dv"])) + 4096


def registers(group, p: dict) -> float:
    """Per thread: the fp32 accumulators and scores (and P) of the warpgroup's 64 rows."""
    Dv = group.mm2.shape[-1]
    return 40 + BM * (Dv + 2 * p["BN"]) / (32 * p["num_warps"])


def choices(group) -> list[dict]:
    """BN 32-128 keys a step, 2-4 stages within shared memory, splits while every split keeps
    a key tile (merged by the combine kernel, or where small enough by the last split
    program: FUSE); with and without packing where both lay Q's rows out for TMA."""
    if not eligible(group):
        return []
    N = group.mm1.shape[-1]
    out = []
    for pack in ((False, True) if packable(group) else (False,)):
        if not rows_ok(group, dict(PACK=pack)):
            continue
        for BN in (32, 64, 128):
            if BN > p2(N, 32):
                continue
            nblk = -(-N // BN)
            for stages in (2, 3, 4):
                for split in (1, 2, 4, 8, 16, 32, 64):
                    ch = -(-nblk // split)
                    if split > nblk or (split - 1) * ch >= nblk:
                        continue
                    p = dict(FORM="wgmma", PACK=pack, BM=BM, BN=BN, SPLIT=split,
                             STAGES=stages, num_warps=4)
                    if smem_bytes(group, p) > SMEM_MAX:
                        continue
                    out.append(p)
                    if split > 1 and split * live_rows(group, p) * group.mm2.shape[-1] \
                            <= FUSE_MAX:
                        out.append(dict(p, FUSE=True))
    return out


def attention_wgmma_kernel(group, name: str) -> tuple[list[str], list[str]]:
    """(source lines, launch lines) of the group's level-2 kernel (and combine kernel)."""
    mm1, sm, mm2 = group.mm1, group.softmax, group.mm2
    P = group.params
    ops = operands(group)
    L = layout(group)
    S = mm2.shape
    nb, R = L["nb"], L["R"]
    D, N, Dv = ops["D"], ops["N"], ops["Dv"]
    BN, SPLIT, STAGES = P["BN"], P["SPLIT"], P["STAGES"]
    dt = KIT_DTYPE[mm2.inputs[1].dtype]
    nblk = -(-N // BN)
    CH = -(-nblk // SPLIT) * BN           # keys per split, whole tiles
    q, kt, v = mm1.inputs[0], mm1.inputs[1], mm2.inputs[1]
    qb, kb, vb = (f"t{t.base().id}" for t in (q, kt, v))
    cols = ops["kmode"] == "cols"
    q_row = _batch_row(ops["qa"], L, S, D)
    k_row = _batch_row(ops["ka"], L, S, N if cols else D)
    v_row = _batch_row(ops["va"], L, S, Dv)
    rows = L["packed"] + (nb,)
    rm = Index("rm", rows, bound("rm", R, BM))
    rv = Index("rv", (nb + 1,), None)
    e = Emitter(group)
    e.line("pm = kit.program_id(0)" + ("   # rows: (packed heads, query) flattened"
                                       if L["packed"] else ""))
    e.line("b = kit.program_id(1)")
    e.line("sp = kit.program_id(2)" if SPLIT > 1 else "sp = 0")
    e.line(f"qs = kit.shared(({BM}, {D}), {dt})")
    e.line(f"ks = kit.shared(({STAGES}, {D}, {BN}), {dt})" if cols else
           f"ks = kit.shared(({STAGES}, {BN}, {D}), {dt})")
    e.line(f"vs = kit.shared(({STAGES}, {BN}, {Dv}), {dt})")
    e.line("q_ready = kit.mbarriers(1)")
    e.line(f"ready = kit.mbarriers({STAGES})   # stage s: its K and V tiles have landed")
    lo = f"sp * {CH}" if SPLIT > 1 else "0"
    e.line(f"n0 = {lo}   # this program's keys start here")
    if SPLIT == 1 or N % CH == 0:
        n_kv = -(-min(N, CH) // BN)
        e.line(f"n_kv = {n_kv}   # key tiles")
    else:
        n_kv = None
        e.line(f"n_kv = kit.cdiv(kit.minimum({N} - n0, {CH}), {BN})   # key tiles")

    def plus(a: str, c: str) -> str:
        return c if a == "0" else a if c == "0" else f"{a} + {c}"

    # one row tile: K and V are streamed once, with no L2 promotion (as the hand decode
    # kernel: ~7% faster at B64 on an H200, benchmarks/NOTES.md session 9)
    once = ", l2_promotion=0" if R <= BM else ""

    def kv_loads(stage: str, j: str) -> list[str]:
        n = plus("n0", f"{j} * {BN}") if j != "0" else "n0"
        kc = f"({k_row}, {n})" if cols else f"({plus(k_row, n)}, 0)"
        return [f"kit.tma_load(ks[{stage}], {kb}, {kc}, ready[{stage}]{once})",
                f"kit.tma_load(vs[{stage}], {vb}, ({plus(v_row, n)}, 0), ready[{stage}]{once})"]

    e.line(f"kit.tma_load(qs, {qb}, ({plus(q_row, f'pm * {BM}')}, 0), q_ready[0])"
           + ("   # rows past the group's: masked at the store" if R % BM else ""))
    if n_kv is not None:
        e.line(f"for s in kit.static_range({min(STAGES, n_kv)}):   # fill the ring")
        for ln in kv_loads("s", "s"):
            e.line("    " + ln)
    else:
        e.line(f"for s in kit.static_range({STAGES}):   # fill the ring")
        e.line("    if s < n_kv:")
        for ln in kv_loads("s", "s"):
            e.line("        " + ln)
    e.line(f"m_i = kit.full(({BM},), -float('inf'), kit.float32)")
    e.line(f"l_i = kit.zeros(({BM},), kit.float32)")
    e.line(f"acc = kit.zeros(({BM}, {Dv}), kit.float32)")
    e.line("kit.mbarrier_wait(q_ready[0], 0)")
    e.line("for j in range(n_kv):")
    body = [f"s = j % {STAGES}",
            f"kit.mbarrier_wait(ready[s], j // {STAGES} % 2)",
            f"v{mm1.id} = kit.mma(qs, ks[s]{'' if cols else '.T'}, "
            f"kit.zeros(({BM}, {BN}), kit.float32))"]
    for t in group.chain:
        body.append(f"v{t.id} = {elementwise(t, [e.operand(x) for x in t.inputs])}")
    sc = f"v{sm.inputs[0].id}"
    if N % BN:        # the tile at N's end: keys past it are another batch's (or zeros)
        body += [f"rn = n0 + j * {BN} + kit.arange(0, {BN})",
                 f"sc = kit.where(rn[None, :] < {N}, {sc}, -float('inf'))"]
        sc = "sc"
    body += [f"m_new = kit.maximum(m_i, kit.max({sc}, axis=1))",
             f"p = kit.exp2(({sc} - m_new[:, None]) * {LOG2E})",
             f"alpha = kit.exp2((m_i - m_new) * {LOG2E})",
             "l_i = l_i * alpha + kit.sum(p, axis=1)",
             f"acc = kit.mma(p.to({dt}), vs[s], acc * alpha[:, None])",
             "m_i = m_new",
             f"if j + {STAGES} < n_kv:   # both MMAs are done with stage s: refill it"]
    body += ["    " + ln for ln in kv_loads("s", f"(j + {STAGES})")]
    for ln in body:
        e.line("    " + ln)
    e.line(f"rm = pm * {BM} + kit.arange(0, {BM})")
    e.line(f"rv = kit.arange(0, {Dv})")
    views = {f"t{i}": f"t{i}.view(-1, {w})" for i, w in ops["widths"].items()}
    launch_args = [views.get(a, a) for a in group.args()]
    src, launch = output_tail(group, name, e, rm, rv, launch_args)
    if SPLIT > 1 and P.get("FUSE"):
        return _fused_combine(group, name, src, launch)
    return src, launch


def live_rows(group, params: dict) -> int:
    """A program's rows that can be live, padded to a power of two (the in-kernel combine's
    tile: GQA decode 4 of the 64)."""
    return p2(min(layout(_with(group, params))["R"], BM))


def _fused_combine(group, name: str, src: list[str], launch: list[str]
                   ) -> tuple[list[str], list[str]]:
    """The split kernel with its combine moved in: after storing its partials each program
    counts itself in on its (batch, row block) counter, and the last to arrive merges the
    SPLIT partials of its live rows by their log-sum-exps, stores the output and puts the
    counter back to 0 (kitjit/nn/attention_decode.py's FUSED): one launch."""
    from .codegen import store_tile

    P = group.params
    L = layout(group)
    S = group.mm2.shape
    R, NB, nb = L["R"], L["NB"], L["nb"]
    Dv, SPLIT = S[-1], P["SPLIT"]
    RB = live_rows(group, P)
    gm = -(-R // BM)
    rows = L["packed"] + (nb,)
    cut = src.index("")                      # the split kernel ends where the combine starts
    body = src[:cut]
    body[1] = body[1].replace("wl):", "wl, cnt):")
    ws = f"(j * {NB} + b) * {R} + rr"
    mask = f"rr < {R}" if R % RB else None

    def ld(ptr: str, other: str) -> str:
        return f"kit.load({ptr}, mask={mask}, other={other})" if mask else f"kit.load({ptr})"

    tile = "b" if gm == 1 else f"b * {gm} + pm"
    out = Access.of(group.mm2)
    lines = [
        "kit.debug_barrier()   # every thread's partials are stored before the count",
        f"if kit.atomic_add(cnt + {tile}, 1, sem='acq_rel', scope='gpu') == {SPLIT - 1}:",
        "    # the last split of these rows: merge the partials by their log-sum-exps",
        f"    rr = pm * {BM} + kit.arange(0, {RB})",
        f"    m = kit.full(({RB},), -float('inf'), kit.float32)",
        f"    for j in kit.static_range({SPLIT}):",
        f"        m = kit.maximum(m, {ld(f'wm + {ws}', NEG)})",
        f"    num = kit.zeros(({RB}, {Dv}), kit.float32)",
        f"    den = kit.zeros(({RB},), kit.float32)",
        f"    for j in kit.static_range({SPLIT}):",
        f"        w = kit.exp2(({ld(f'wm + {ws}', NEG)} - m) * {LOG2E})",
        f"        den += {ld(f'wl + {ws}', '0.0')} * w",
        f"        num += {ld_acc(ws, Dv, mask)} * w[:, None]",
        "    " + store_tile(out, S, Index("b", L["unpacked"]), Index("rr", rows, mask), Index(
            "rv", (nb + 1,), None), "num / den[:, None]"),
        f"    kit.store(cnt + {tile}, 0)   # zero for the next launch",
    ]
    body += ["    " + ln for ln in lines]
    dev = f"{buf(group.mm2)}.device"
    new_launch = [ln for ln in launch if "_combine[" not in ln]
    new_launch.insert(-1, f"cnt = _counters({NB * gm}, {dev})")
    new_launch[-1] = new_launch[-1].replace("wl, num_warps", "wl, cnt, num_warps")
    return body, new_launch


NEG = "-float('inf')"


def ld_acc(ws: str, Dv: int, mask: str | None) -> str:
    ptr = f"wacc + ({ws})[:, None] * {Dv} + kit.arange(0, {Dv})[None, :]"
    return f"kit.load({ptr}, mask=({mask})[:, None], other=0.0)" if mask else f"kit.load({ptr})"
