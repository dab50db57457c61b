"""Check a laid-out kernel, thread by thread, without a GPU.

The backend trusts the layout pass on facts it never checks (a wrong layout is a silent
wrong result on the GPU, while the interpreter, which has no layouts, is right):
  - a tile's layout holds every element of its shape, and distinct bases (register, lane,
    warp) move distinct coordinates: the only copies are lane/warp bases of zero, which is
    what a store's `duplicate_pred` skips (backend/lower/memory.py);
  - the operands and result of an elementwise op, a load or a store are laid out alike;
  - `broadcast` renames registers: the result's lane/warp bases, with the grown dims
    zeroed, are the operand's, and each result register's coordinate there is an operand
    register's; `expand_dims` likewise keeps every basis.
`problems(fn)` lists what breaks these; `stores(lin)` says which (warp, lane, register)
stores each element. tests/test_layout_check.py runs both over the kernels of the newest
ops (a relabeled layout met at a broadcast's shape once held half the elements twice).
"""

from __future__ import annotations

from kitjit.ir import ops as O
from kitjit.ir.core import Function
from kitjit.ir.layouts import LinearLayout


def _xor(a, b):
    return tuple(x ^ y for x, y in zip(a, b))


def _thread_coord(lin: LinearLayout, warp: int, lane: int):
    c = tuple([0] * lin.rank)
    for k, b in enumerate(lin.lane):
        if lane >> k & 1:
            c = _xor(c, b)
    for k, b in enumerate(lin.warp):
        if warp >> k & 1:
            c = _xor(c, b)
    return c


def stores(lin: LinearLayout, warps: int | None = None) -> dict[tuple, list[tuple[int, int, int]]]:
    """Element coordinate -> the (warp, lane, register) that store it: every register of the
    threads `duplicate_pred` lets through (no lane/warp bit with a zero basis set). `warps`:
    how many warps exist, where that is not a power of two (a role of 3 warpgroups: the
    layout's warp bits number 16, warps 12-15 do not exist)."""
    zl = sum(1 << k for k, b in enumerate(lin.lane) if not any(b))
    zw = sum(1 << k for k, b in enumerate(lin.warp) if not any(b))
    regs = lin.reg_coords()
    out: dict[tuple, list] = {}
    for w in range(min(1 << len(lin.warp), warps or 1 << len(lin.warp))):
        if w & zw:
            continue
        for lane in range(1 << len(lin.lane)):
            if lane & zl:
                continue
            t = _thread_coord(lin, w, lane)
            for r, rc in enumerate(regs):
                out.setdefault(_xor(t, rc), []).append((w, lane, r))
    return out


def lin_problems(lin: LinearLayout, warps: int | None = None) -> list[str]:
    """What is wrong with one concrete layout: elements out of the shape, held by no thread,
    or stored more than once."""
    got = stores(lin, warps)
    bad = [c for c in got if any(x < 0 or x >= n for x, n in zip(c, lin.shape))]
    numel = 1
    for n in lin.shape:
        numel *= n
    out = []
    if bad:
        out.append(f"coordinates outside {list(lin.shape)}: {bad[:4]}")
    twice = [(c, h) for c, h in got.items() if len(h) > 1]
    if twice:
        c, h = twice[0]
        out.append(f"{len(twice)} elements stored more than once, e.g. {c} by "
                   f"(warp, lane, reg) {h[:3]}")
    if len(got) - len(bad) < numel:
        out.append(f"{numel - len(got) + len(bad)} of {numel} elements held by no thread")
    return out


def problems(fn: Function) -> list[str]:
    """Every broken layout fact of a laid-out function, as 'op (line): what'."""
    out: list[str] = []
    lins: dict[int, LinearLayout] = {}
    nwarps: dict[int, int] = {}

    def lin(v):
        t = v.type
        if t.is_scalar or t.is_shared or t.layout is None or not hasattr(t.layout, "to_linear"):
            return None
        if v.id not in lins:
            lins[v.id] = t.layout.to_linear(tuple(t.shape))
            nwarps[v.id] = getattr(t.layout, "num_warps", None)
        return lins[v.id]

    seen: set[int] = set()
    for op in fn.walk():
        where = f"{op.name} (line {getattr(op.loc, 'line', '?')})"
        for v in list(op.operands) + list(op.results):
            ll = lin(v)
            if ll is not None and v.id not in seen:
                seen.add(v.id)
                out += [f"{where}: {v.type}: {p}" for p in lin_problems(ll, nwarps[v.id])]
        if op.name in O.ELEMENTWISE or op.name in ("load", "store"):
            ls = [x for x in map(lin, list(op.operands) + list(op.results)) if x is not None]
            if any(x != ls[0] for x in ls[1:]):
                out.append(f"{where}: operands and result laid out differently")
        elif op.name == "broadcast" and lin(op.operands[0]) is not None:
            out += [f"{where}: {p}" for p in _broadcast_problems(lin(op.operands[0]),
                                                                 lin(op.result))]
        elif op.name == "expand_dims" and lin(op.operands[0]) is not None:
            s, d, ax = lin(op.operands[0]), lin(op.result), op.attrs["axis"]

            def drop(b, ax=ax):
                return b[:ax] + b[ax + 1:]
            if (s.reg_coords(), s.lane, s.warp) != ([drop(c) for c in d.reg_coords()],
                                                    tuple(map(drop, d.lane)),
                                                    tuple(map(drop, d.warp))):
                out.append(f"{where}: the operand is not the result's slice")
    return out


def _broadcast_problems(s: LinearLayout, d: LinearLayout) -> list[str]:
    grow = [i for i, (a, b) in enumerate(zip(s.shape, d.shape)) if a != b]

    def proj(b):
        return tuple(0 if i in grow else x for i, x in enumerate(b))
    out = []
    if tuple(map(proj, d.lane)) != s.lane or tuple(map(proj, d.warp)) != s.warp:
        out.append(f"threads hold other elements in {list(s.shape)} and {list(d.shape)} "
                   f"(lanes {s.lane} vs {d.lane}, warps {s.warp} vs {d.warp})")
    idx = s.reg_index()
    if any(proj(c) not in idx for c in d.reg_coords()):
        out.append("a result register has no operand register")
    return out
