"""kitjit source for an attention group: O = softmax(f(Q @ K)) @ V with online softmax
(flash-attention / flash-decoding), rms_norm prologues on Q, K and V, and these choices
from the search (space.py):

- FORM "mma": BM query rows per program against BN keys per step on kit.dot; "fma": one
  query row per program, scores and P V as multiply-and-reduce on the CUDA cores (decode:
  one row would waste 15 of the 16 rows of an MMA, and no operand goes through shared
  memory);
- PACK: batch dims along which K and V do not change (grouped-query attention: the query
  heads of one KV head) fold into the rows, so one program's K/V loads serve them all;
- SPLIT > 1: the keys split over programs (grid: row blocks x batch x splits) that write
  fp32 partials (acc, running max, running sum); a combine kernel merges them;
- STAGES=2: the next K/V tiles are loaded (masked at the program's last keys) before the
  current ones are used: a register prefetch, two tiles in flight per program."""

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
    kernel_header,
    lin,
    load_tile,
    load_vec,
    p2,
)
from .graph import buffer_strides

NEG_INF = "-float('inf')"


def packable(group) -> tuple[int, ...]:
    """Batch axes (of the output space) along which K and V are broadcast and Q is not."""
    S = group.mm2.shape
    nb = len(S) - 2
    k, v, q = group.mm1.inputs[1], group.mm2.inputs[1], group.mm1.inputs[0]
    ka, va, qa = (Access.of(x).aligned(S[:-2] + x.shape[-2:]) for x in (k, v, q))
    return tuple(i for i in range(nb) if ka[i] == 0 and va[i] == 0 and S[i] > 1
                 and qa[i] != 0)


def layout(group) -> dict:
    """Rows per batch program and the axes they walk, from PACK."""
    S = group.mm2.shape
    nb = len(S) - 2
    packed = packable(group) if group.params.get("PACK") else ()
    unpacked = tuple(i for i in range(nb) if i not in packed)
    R = math.prod(S[i] for i in packed) * S[-2]
    NB = math.prod(S[i] for i in unpacked)
    return dict(packed=packed, unpacked=unpacked, R=R, NB=NB, nb=nb)


def _operand(group, role: str):
    """(Access, norm node or None) of Q, K^T or V: a normalized operand is read from the
    norm's input (contiguous like the norm's result, plan.py checks) with the operand's
    view strides."""
    x = {"q": group.mm1.inputs[0], "k": group.mm1.inputs[1], "v": group.mm2.inputs[1]}[role]
    n = group.norms.get(role)
    if n is None:
        return Access.of(x), None
    return Access(buf(n.inputs[0]), x.shape, buffer_strides(x)), n


def _norm_lines(n, var: str, axis: int, feat: str, D: int, dt: str | None) -> list[str]:
    """rms_norm of tile `var` along `axis` (the feature dim, index vector `feat`)."""
    f = f"{var}f"
    keep = ", keep_dims=True" if axis is not None else ""
    out = [f"{f} = {var}.to(kit.float32)",
           f"{f} = {f} * kit.rsqrt(kit.sum({f} * {f}" + (f", axis={axis}{keep}" if axis is not
                                                          None else ", axis=0")
           + f") / {D} + {n.attrs['eps']!r})"]
    if n.attrs["weight"]:
        w = n.inputs[1]
        wv = load_vec(Access.of(w), w.shape, None, Index(feat, (0,), bound(feat, D, p2(D))))
        sl = "" if axis is None else ("[None, :]" if axis == 1 else "[:, None]")
        out.append(f"{f} = {f} * {wv}.to(kit.float32){sl}")
    out.append(f"{var} = {f}.to({dt})" if dt else f"{var} = {f}")
    return out


def attention_kernel(group, name: str) -> tuple[list[str], list[str]]:
    mm1, sm, mm2 = group.mm1, group.softmax, group.mm2
    P = group.params
    L = layout(group)
    S = mm2.shape
    nb, R = L["nb"], L["R"]
    Dv = S[-1]
    D, N = mm1.inputs[0].shape[-1], mm1.shape[-1]
    BN, SPLIT, STAGES = P["BN"], P["SPLIT"], P.get("STAGES", 1)
    fma = P.get("FORM", "mma") == "fma"
    BM = 1 if fma else P["BM"]
    DP, DVP = p2(D, 16), p2(Dv, 16)
    dt = KIT_DTYPE[mm2.inputs[1].dtype]
    nblk = -(-N // BN)
    CH = -(-nblk // SPLIT) * BN
    batch = S[:-2]
    qs, ks, vs = (*batch, S[-2], D), (*batch, D, N), (*batch, N, Dv)
    (qa, qn), (ka, kn), (va, vn) = (_operand(group, r) for r in ("q", "k", "v"))
    e = Emitter(group)
    b = Index("b", L["unpacked"])
    rows = L["packed"] + (nb,)
    rm = Index("rm", rows, bound("rm", R, BM) if not fma else None)
    rd = Index("rd", (nb + 1,), bound("rd", D, DP))
    rdk = Index("rd", (nb,), rd.mask)
    rv = Index("rv", (nb + 1,), bound("rv", Dv, DVP))
    masked = N % BN != 0      # only the tile at N's end can be partial (CH % BN == 0)

    def rn(name: str, bound_: str | None) -> tuple[Index, Index]:
        m = f"{name} < {bound_}" if bound_ else None
        return Index(name, (nb + 1,), m), Index(name, (nb,), m)

    e.line("pm = kit.program_id(0)" + ("   # one query row per program" if fma else ""))
    e.line("b = kit.program_id(1)")
    e.line("sp = kit.program_id(2)" if SPLIT > 1 else "sp = 0")
    if not fma:
        e.line(f"rm = pm * {BM} + kit.arange(0, {BM})"
               + ("   # rows: (packed heads, query) flattened" if L["packed"] else ""))
    e.line(f"rd = kit.arange(0, {DP})")
    e.line(f"rv = kit.arange(0, {DVP})")
    if fma:
        qrow = flat_offset([qs[a] for a in rows], [qa.aligned(qs)[a] for a in rows], "pm")
        e.line(f"q = {load_vec(qa, qs, b, rd, extra=qrow)}.to(kit.float32)")
        if qn is not None:
            for ln in _norm_lines(qn, "q", None, "rd", D, None):
                e.line(ln)
        e.line("m_i = -float('inf')")
        e.line("l_i = 0.0")
        e.line(f"acc = kit.zeros(({DVP},), kit.float32)")
    else:
        e.line(f"q = {load_tile(qa, qs, b, rm, rd)}")
        if qn is not None:
            for ln in _norm_lines(qn, "q", 1, "rd", D, dt):
                e.line(ln)
        e.line(f"m_i = kit.full(({BM},), -float('inf'), kit.float32)")
        e.line(f"l_i = kit.zeros(({BM},), kit.float32)")
        e.line(f"acc = kit.zeros(({BM}, {DVP}), kit.float32)")

    def loads(n: str, sfx: str, bound_: str | None) -> list[str]:
        c, r = rn(n, bound_)
        return [f"kt{sfx} = {load_tile(ka, ks, b, rdk, c)}",
                f"v{sfx} = {load_tile(va, vs, b, r, rv)}"]

    def body(n: str) -> list[str]:
        out = []
        if kn is not None:
            out += _norm_lines(kn, "kt", 0, "rd", D, None if fma else dt)
        if vn is not None:
            out += _norm_lines(vn, "v", 1, "rv", Dv, None if fma else dt)
        if fma:
            kt = "kt" if kn is not None else "kt.to(kit.float32)"
            out.append(f"v{mm1.id} = kit.sum(q[:, None] * {kt}, axis=0)")
        else:
            out.append(f"v{mm1.id} = kit.dot(q, kt)")
        for t in group.chain:
            out.append(f"v{t.id} = {elementwise(t, [e.operand(x) for x in t.inputs])}")
        s = f"v{sm.inputs[0].id}"
        if masked:
            out.append(f"s = kit.where({n}{'' if fma else '[None, :]'} < {N}, {s}, "
                       "-float('inf'))")
            s = "s"
        ax = 0 if fma else 1
        col = "" if fma else "[:, None]"
        out += [f"m_new = kit.maximum(m_i, kit.max({s}, axis={ax}))",
                f"p = kit.exp2(({s} - m_new{col}) * {LOG2E})",
                f"alpha = kit.exp2((m_i - m_new) * {LOG2E})",
                f"l_i = l_i * alpha + kit.sum(p, axis={ax})"]
        if fma:
            v = "v" if vn is not None else "v.to(kit.float32)"
            out.append(f"acc = acc * alpha + kit.sum(p[:, None] * {v}, axis=0)")
        else:
            out.append(f"acc = kit.dot(p.to({dt}), v, acc * alpha[:, None])")
        out.append("m_i = m_new")
        return out

    lo = f"sp * {CH}" if SPLIT > 1 else "0"
    hi = (f"kit.minimum({lo} + {CH}, {N})" if N % CH else f"{lo} + {CH}") \
        if SPLIT > 1 else str(N)
    if " " in hi:
        e.line(f"n_end = {hi}   # this program's keys: [{lo}, n_end)")
        hi = "n_end"
    if STAGES == 2:   # prefetch: the next tiles load while these are used
        e.line(f"rn = {lo} + kit.arange(0, {BN})" if SPLIT > 1 else
               f"rn = kit.arange(0, {BN})")
        for ln in loads("rn", "", str(N) if masked else None):
            e.line(ln)
        e.line(f"for n0 in range({lo}, {hi}, {BN}):")
        e.line(f"    rn = n0 + kit.arange(0, {BN})")
        e.line(f"    rn_next = rn + {BN}")
        for ln in loads("rn_next", "_next", hi) + body("rn"):
            e.line("    " + ln)
        e.line("    kt, v = kt_next, v_next")
    else:
        e.line(f"for n0 in range({lo}, {hi}, {BN}):")
        e.line(f"    rn = n0 + kit.arange(0, {BN})")
        for ln in loads("rn", "", str(N) if masked else None) + body("rn"):
            e.line("    " + ln)
    return output_tail(group, name, e, rm, rv, group.args())


def output_tail(group, name: str, e: Emitter, rm: Index, rv: Index, launch_args: list[str]
                ) -> tuple[list[str], list[str]]:
    """The end of an attention kernel whose loop left acc, m_i and l_i (programs: row block
    `pm`, batch `b`, split `sp`): the output stored, or with SPLIT > 1 the fp32 partials and
    the combine kernel that merges them by their log-sum-exps. `launch_args`: what run()
    passes for the kernel's arguments (group.args(), or views of them)."""
    P = group.params
    L = layout(group)
    S = group.mm2.shape
    nb, R, NB = L["nb"], L["R"], L["NB"]
    Dv, DVP = S[-1], p2(S[-1], 16)
    SPLIT = P["SPLIT"]
    fma = P.get("FORM", "mma") == "fma"
    BM = 1 if fma else P["BM"]
    rows = L["packed"] + (nb,)
    b = Index("b", L["unpacked"])
    mm2 = group.mm2
    args = group.args()
    nw = P["num_warps"]
    grid = f"({R if fma else -(-R // BM)}, {NB}, {SPLIT})"
    O = Access.of(mm2)
    if SPLIT == 1:
        if fma:
            e.line("o = acc / l_i")
            e.line(_store_row(O, S, L, "pm", "rv", rv.mask, "o"))
        else:
            from .codegen import store_tile

            ro = Index("rm", rows, rm.mask)
            e.line(store_tile(O, S, b, ro, rv, "acc / l_i[:, None]"))
        return kernel_header(name, args) + e.lines, [
            f"{name}[{grid}]({', '.join(launch_args)}, num_warps={nw})"]
    # partials: wacc[sp, b, r, dv], wm / wl[sp, b, r] (fp32, contiguous)
    if fma:
        ws = lin(lin("sp", NB, "b"), R, "pm")
        e.line(f"kit.store(wacc + {ws} * {Dv} + rv, acc"
               + (f", mask={rv.mask})" if rv.mask else ")"))
        e.line(f"kit.store(wm + {ws}, m_i)")
        e.line(f"kit.store(wl + {ws}, l_i)")
    else:
        ws = lin(lin("sp", NB, "b"), R, "rm")
        mk = " & ".join(x for x in (f"({rm.mask})[:, None]" if rm.mask else "",
                                    f"({rv.mask})[None, :]" if rv.mask else "") if x)
        e.line(f"kit.store(wacc + {ws}[:, None] * {Dv} + rv[None, :], acc"
               + (f", mask={mk})" if mk else ")"))
        e.line(f"kit.store(wm + {ws}, m_i" + (f", mask={rm.mask})" if rm.mask else ")"))
        e.line(f"kit.store(wl + {ws}, l_i" + (f", mask={rm.mask})" if rm.mask else ")"))
    SP = p2(SPLIT)
    cargs = ["wacc", "wm", "wl", buf(mm2)]
    smask = f"rs < {SPLIT}" if SP != SPLIT else None

    def sload(ptr: str, other: str) -> str:
        return f"kit.load({ptr}, mask={smask}, other={other})" if smask else f"kit.load({ptr})"

    amask = " & ".join(x for x in (f"(rs[:, None] < {SPLIT})" if smask else "",
                                   f"(rv[None, :] < {Dv})" if rv.mask else "") if x)
    aptr = f"wacc + (rs[:, None] * {NB * R} + row) * {Dv} + rv[None, :]"
    comb = kernel_header(f"{name}_combine", cargs) + [
        f"    row = kit.program_id(0)   # b * {R} + r",
        f"    rs = kit.arange(0, {SP})",
        f"    rv = kit.arange(0, {DVP})",
        f"    ms = {sload(f'wm + rs * {NB * R} + row', NEG_INF)}",
        f"    ls = {sload(f'wl + rs * {NB * R} + row', '0.0')}",
        "    m = kit.max(ms, axis=0)",
        f"    w = kit.exp2((ms - m) * {LOG2E})",
        f"    a = kit.load({aptr}, mask={amask}, other=0.0)" if amask else
        f"    a = kit.load({aptr})",
        "    o = kit.sum(a * w[:, None], axis=0) / kit.sum(ls * w, axis=0)",
        f"    b = row // {R}" if R > 1 else "    b = row",
        "    " + _store_row(O, S, L, f"row % {R}", "rv", rv.mask, "o"),
    ]
    dev = f"{buf(mm2)}.device"
    launch = [
        f"wacc = _work(({SPLIT}, {NB}, {R}, {Dv}), {dev})",
        f"wm = _work(({SPLIT}, {NB}, {R}), {dev})",
        f"wl = _work(({SPLIT}, {NB}, {R}), {dev})",
        f"{name}[{grid}]({', '.join(launch_args)}, wacc, wm, wl, num_warps={nw})",
        f"{name}_combine[({NB * R},)]({', '.join(cargs)}, num_warps=4)",
    ]
    header = kernel_header(name, [*args, "wacc", "wm", "wl"])
    return header + e.lines + ["", ""] + comb, launch


def _store_row(O: Access, S, L, r: str, col: str, cmask: str | None, value: str) -> str:
    """Store of one output row (`r`: the row within the batch program `b`) along `col`."""
    st = O.aligned(S)
    rows = L["packed"] + (L["nb"],)
    parts = [O.name]
    bo = flat_offset([S[a] for a in L["unpacked"]], [st[a] for a in L["unpacked"]], "b")
    if bo != "0":
        parts.append(f"({bo})" if " " in bo else bo)
    ro = flat_offset([S[a] for a in rows], [st[a] for a in rows], f"({r})" if " " in r else r)
    if ro != "0":
        parts.append(f"({ro})" if " " in ro else ro)
    parts.append(col if st[-1] == 1 else f"{col} * {st[-1]}")
    v = f"{value}.to({O.name}.dtype.element_ty)"
    return f"kit.store({' + '.join(parts)}, {v}" + (f", mask={cmask})" if cmask else ")")
