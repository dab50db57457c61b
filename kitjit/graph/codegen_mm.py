"""kitjit source for a matmul group: kit.dot over K tiles into fp32 accumulators, one per
matmul sharing the tile of A (the gated MLP's x W1 and x W3), the low-rank chain of LoRA
((x A) B from the same tiles of x), an rms_norm on A (a first pass over K for each row's
scale, or the scale applied to the accumulators after the loop: rms_norm(x) W =
rstd * ((x * w) W)), and the elementwise epilogue on the output tile.

Choices from the search (space.py): tile BM x BN x BK, STAGES=2 loads the next K tiles
(masked at the program's end of K) before the current ones feed kit.dot (a register
prefetch: two tiles in flight per program), SPLIT > 1 splits K over programs that write
fp32 partials, and a combine kernel adds them and runs the norm scale and the epilogue."""

from __future__ import annotations

import math

from .codegen import (
    KIT_DTYPE,
    Access,
    Emitter,
    Index,
    bound,
    buf,
    elementwise,
    kernel_header,
    lin,
    load_tile,
    load_vec,
    p2,
    store_tile,
)


class TileEmitter(Emitter):
    """Values are [BM, BN] tiles of the output space (*batch, M, N)."""

    def __init__(self, group, space, rm: Index, rn: Index, b: Index):
        super().__init__(group)
        self.S, self.rm, self.rn, self.b = space, rm, rn, b

    def load(self, x) -> str:
        return load_tile(Access.of(x), self.S, self.b, self.rm, self.rn)


def _epilogue(e: TileEmitter, group) -> None:
    for t in group.epilogue:
        e.line(f"v{t.id} = {elementwise(t, [e.operand(x) for x in t.inputs])}")
    for t in [*group.mms, *(group.lowrank[1:] if group.lowrank else ()), *group.epilogue]:
        if t.id in group.store_ids:
            e.line(store_tile(Access.of(t), e.S, e.b, e.rm, e.rn, f"v{t.id}"))


def matmul_kernel(group, name: str) -> tuple[list[str], list[str]]:
    mm0 = group.mms[0]
    S = mm0.shape
    nb = len(S) - 2
    M, N = S[-2], S[-1]
    K = mm0.inputs[0].shape[-1]
    P = group.params
    BM, BN, BK = P["BM"], P["BN"], P["BK"]
    SPLIT, STAGES = P.get("SPLIT", 1), P.get("STAGES", 1)
    pro = group.prologue
    norm = P.get("NORM", "pro") if pro is not None else None
    lr = group.lowrank
    dt = KIT_DTYPE[mm0.dtype]
    gn = -(-N // BN)
    nbk = -(-K // BK)
    KCH = -(-nbk // SPLIT) * BK
    NB = math.prod(S[:-2])
    b = Index("b", tuple(range(nb)))
    rm = Index("rm", (nb,), bound("rm", M, BM))
    rn = Index("rn", (nb + 1,), bound("rn", N, BN))
    e = TileEmitter(group, S, rm, rn, b)
    aspace, bspace = (*S[:-2], M, K), (*S[:-2], K, N)
    A = pro.inputs[0] if pro is not None else mm0.inputs[0]
    kmask = bound("{k}", K, BK)

    def kidx(k: str, axis: int, m: str | None = None) -> Index:
        return Index(k, (axis,), m)

    def loads(k: str, sfx: str, m: str | None) -> list[str]:
        """The tiles of A, the B's (and LoRA's A) at K index `k`, valid where `m`."""
        out = [f"a{sfx} = {load_tile(Access.of(A), aspace, b, rm, kidx(k, nb + 1, m))}"]
        for i, mm in enumerate(group.mms):
            out.append(f"w{i}{sfx} = "
                       f"{load_tile(Access.of(mm.inputs[1]), bspace, b, kidx(k, nb, m), rn)}")
        if lr:
            R = lr[0].shape[-1]
            rr = Index("rr", (nb + 1,), bound("rr", R, p2(R, 16)))
            lspace = (*S[:-2], K, R)
            la = load_tile(Access.of(lr[0].inputs[1]), lspace, b, kidx(k, nb, m), rr)
            out.append(f"la{sfx} = {la}")
        return out

    def compute(k: str) -> list[str]:
        out = []
        if norm == "pro":
            y = "a.to(kit.float32) * rstd[:, None]"
            if pro.attrs["weight"]:
                y += f" * {_wvec(pro, k, K, kmask)}[None, :]"
            out.append(f"a = ({y}).to({dt})")
        elif norm == "epi":
            out.append("af = a.to(kit.float32)")
            out.append("ss += kit.sum(af * af, axis=1)")
            if pro.attrs["weight"]:
                out.append(f"a = (af * {_wvec(pro, k, K, kmask)}[None, :]).to({dt})")
        for i in range(len(group.mms)):
            out.append(f"acc{i} = kit.dot(a, w{i}, acc{i})")
        if lr:
            out.append("accl = kit.dot(a, la, accl)")
        return out

    e.line("pid = kit.program_id(0)")
    e.line("b = kit.program_id(1)")
    if SPLIT > 1:
        e.line("sp = kit.program_id(2)")
    e.line(f"rm = pid // {gn} * {BM} + kit.arange(0, {BM})")
    e.line(f"rn = pid % {gn} * {BN} + kit.arange(0, {BN})")
    e.line(f"rk = kit.arange(0, {BK})")
    if lr:
        e.line(f"rr = kit.arange(0, {p2(lr[0].shape[-1], 16)})")
    if norm == "pro":   # rms_norm(x, w) @ B: a first pass over K for the row scale
        e.line(f"ss = kit.zeros(({BM},), kit.float32)")
        e.line(f"for k0 in range(0, {K}, {BK}):")
        e.line("    k = k0 + rk")
        km = kidx("k", nb + 1, kmask.format(k="k") if kmask else None)
        e.line(f"    x = {load_tile(Access.of(A), aspace, b, rm, km)}"
               ".to(kit.float32)")
        e.line("    ss += kit.sum(x * x, axis=1)")
        e.line(f"rstd = kit.rsqrt(ss / {K} + {pro.attrs['eps']!r})")
    elif norm == "epi":
        e.line(f"ss = kit.zeros(({BM},), kit.float32)")
    for i in range(len(group.mms)):
        e.line(f"acc{i} = kit.zeros(({BM}, {BN}), kit.float32)")
    if lr:
        e.line(f"accl = kit.zeros(({BM}, {p2(lr[0].shape[-1], 16)}), kit.float32)")
    k_lo = f"sp * {KCH}" if SPLIT > 1 else "0"
    hi = (f"kit.minimum({k_lo} + {KCH}, {K})" if K % KCH else f"{k_lo} + {KCH}") \
        if SPLIT > 1 else str(K)
    if " " in hi:
        e.line(f"k_end = {hi}   # this program's part of K: [{k_lo}, k_end)")
        hi = "k_end"
    if STAGES == 2:     # prefetch: the next K tiles load while these feed kit.dot
        e.line(f"k = {k_lo} + rk" if SPLIT > 1 else "k = rk")
        for ln in loads("k", "", kmask.format(k="k") if kmask else None):
            e.line(ln)
        e.line(f"for k0 in range({k_lo}, {hi}, {BK}):")
        e.line("    k = k0 + rk")
        e.line(f"    kn = k + {BK}")
        for ln in loads("kn", "_next", f"kn < {hi}"):
            e.line("    " + ln)
        for ln in compute("k"):
            e.line("    " + ln)
        names = ["a"] + [f"w{i}" for i in range(len(group.mms))] + (["la"] if lr else [])
        e.line(f"    {', '.join(names)} = {', '.join(n + '_next' for n in names)}")
    else:
        e.line(f"for k0 in range({k_lo}, {hi}, {BK}):")
        e.line("    k = k0 + rk")
        for ln in loads("k", "", kmask.format(k="k") if kmask else None) + compute("k"):
            e.line("    " + ln)
    args = group.args()
    nw = P["num_warps"]
    grid = f"({-(-M // BM) * gn}, {NB}{', ' + str(SPLIT) if SPLIT > 1 else ''})"
    nmm = len(group.mms)
    if SPLIT == 1:
        if norm == "epi":
            e.line(f"rstd = kit.rsqrt(ss / {K} + {pro.attrs['eps']!r})")
            for i in range(nmm):
                e.line(f"acc{i} = acc{i} * rstd[:, None]")
            if lr:
                e.line("accl = accl * rstd[:, None]")
        for i, mm in enumerate(group.mms):
            e.line(f"v{mm.id} = acc{i}")
        if lr:
            d, ee = lr
            R = d.shape[-1]
            rr = Index("rr", (nb,), bound("rr", R, p2(R, 16)))
            bl = load_tile(Access.of(ee.inputs[1]), (*S[:-2], R, N), b, rr, rn)
            e.line(f"v{ee.id} = kit.dot(accl.to({dt}), {bl})")
        _epilogue(e, group)
        return kernel_header(name, args) + e.lines, [
            f"{name}[{grid}]({', '.join(args)}, num_warps={nw})"]
    assert not lr, "split-K with a low-rank chain is not generated"
    return split_tail(group, name, e, grid, nw, norm)


FUSED_UNROLL = 4   # partials the last split program loads at once


def split_tail(group, name: str, e: TileEmitter, grid: str, nw: int, norm: str | None,
               batched: bool = True, fused: bool = False) -> tuple[list[str], list[str]]:
    """Split-K's end of kernel `name` (its [BM, BN] accumulators acc<i> stored as fp32
    partials ws[sp, i, b, m, n], the norm's sums as wss[sp, b, m]) and what adds the
    partials and runs the norm scale and the epilogue; (source, launch). That is a combine
    kernel, or with `fused` (the level-2 forms: one row block, grid (column blocks, splits))
    the last split program of each column block, counted on an int32 arrival counter that
    it puts back to 0: one launch fewer (examples/matmul.py's add_parts). `batched`: the
    kernel has a batch index b (else the single matrix's partials)."""
    S, rm, rn, b = e.S, e.rm, e.rn, e.b
    M, N = S[-2], S[-1]
    NB = math.prod(S[:-2])
    P = group.params
    BM, BN, SPLIT = P["BM"], P["BN"], P["SPLIT"]
    gn = -(-N // BN)
    K = group.mms[0].inputs[0].shape[-1]
    pro = group.prologue
    nmm = len(group.mms)
    args = group.args()
    assert not (fused and batched), "the in-kernel combine is for one matrix"
    part = Access("ws_i", (M, N), (N, 1))
    prm, prn = Index("rm", (0,), rm.mask), Index("rn", (1,), rn.mask)
    for i in range(nmm):
        e.line(f"ws_i = ws + {lin('sp', nmm, i)} * {NB * M * N}"
               + (f" + b * {M * N}" if batched else ""))
        e.line(store_tile(part, (M, N), None, prm, prn, f"acc{i}"))
    extra = []
    if norm == "epi":
        e.line(f"kit.store(wss + {lin('sp', NB, 'b' if batched else 0)} * {M} + rm, ss"
               + (f", mask={rm.mask})" if rm.mask else ")"))
        extra = ["wss"]
    # sum the partials, then the norm scale and the epilogue
    c = TileEmitter(group, S, rm, rn, b)
    if not fused:
        c.line("pid = kit.program_id(0)")
        c.line("b = kit.program_id(1)")
        c.line(f"rm = pid // {gn} * {BM} + kit.arange(0, {BM})")
        c.line(f"rn = pid % {gn} * {BN} + kit.arange(0, {BN})")
    for i in range(nmm):
        c.line(f"acc{i} = kit.zeros(({BM}, {BN}), kit.float32)")
    if norm == "epi":
        c.line(f"ss = kit.zeros(({BM},), kit.float32)")
    s = "j" if fused else "sp"
    if fused and SPLIT > FUSED_UNROLL:   # (all unrolled, the loads of every partial are in
        # flight at once: 11 splits took 96 registers a thread, two programs an SM)
        c.line(f"for {s} in kit.range({SPLIT}, loop_unroll_factor={FUSED_UNROLL}):   "
               f"# {FUSED_UNROLL} partials in flight")
    else:
        c.line(f"for {s} in kit.static_range({SPLIT}):")
    for i in range(nmm):
        ld = load_tile(part, (M, N), None, prm, prn)
        c.line(f"    ws_i = ws + {lin(s, nmm, i)} * {NB * M * N}"
               + ("" if fused else f" + b * {M * N}"))
        c.line(f"    acc{i} += {ld}")
    if norm == "epi":
        c.line(f"    ss += kit.load(wss + {lin(s, NB, 0 if fused else 'b')} * {M} + rm"
               + (f", mask={rm.mask}, other=0.0)" if rm.mask else ")"))
        c.line(f"rstd = kit.rsqrt(ss / {K} + {pro.attrs['eps']!r})")
        for i in range(nmm):
            c.line(f"acc{i} = acc{i} * rstd[:, None]")
    for i, mm in enumerate(group.mms):
        c.line(f"v{mm.id} = acc{i}")
    _epilogue(c, group)
    dev = f"{buf(group.nodes[-1])}.device"
    work = [f"ws = _work(({SPLIT}, {nmm}, {NB}, {M}, {N}), {dev})",
            *([f"wss = _work(({SPLIT}, {NB}, {M}), {dev})"] if extra else [])]
    if fused:
        e.line("kit.debug_barrier()   # every thread's partials are stored before the count")
        e.line(f"if kit.atomic_add(cnt + kit.program_id(0), 1, sem='acq_rel', scope='gpu') "
               f"== {SPLIT - 1}:")
        e.line("    # the last split of these columns: the others' partials are visible")
        e.lines += ["    " + ln for ln in c.lines]
        e.line("    kit.store(cnt + kit.program_id(0), 0)   # zero for the next launch")
        launch = [*work, f"cnt = _counters({gn}, {dev})",
                  f"{name}[{grid}]({', '.join(args)}, ws{', wss' if extra else ''}, cnt, "
                  f"num_warps={nw})"]
        return kernel_header(name, [*args, "ws", *extra, "cnt"]) + e.lines, launch
    cargs = ["ws", *extra, *[a for a in args if a in _used(c.lines)]]
    launch = [
        *work,
        f"{name}[{grid}]({', '.join(args)}, ws{', wss' if extra else ''}, num_warps={nw})",
        f"{name}_combine[({-(-M // BM) * gn}, {NB})]({', '.join(cargs)}, num_warps=4)",
    ]
    header = kernel_header(name, [*args, "ws", *extra])
    return header + e.lines + ["", ""] + kernel_header(f"{name}_combine", cargs) + c.lines, \
        launch


def _wvec(norm, k: str, K: int, kmask: str | None) -> str:
    """The norm's weight along K (index vector `k`), in fp32."""
    w = norm.inputs[1]
    m = kmask.format(k=k) if kmask else None
    return load_vec(Access.of(w), w.shape, None, Index(k, (0,), m)) + ".to(kit.float32)"


def _used(lines: list[str]) -> set:
    import re

    return set(re.findall(r"\bt\d+\b", "\n".join(lines)))
