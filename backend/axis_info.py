"""What the compiler knows about integer and pointer tiles, for vectorizing memory access.

For each dim of a tile: contiguity C (elements come in aligned runs of C consecutive values),
divisibility D (the first element of each run is divisible by D; bytes for pointers) and
constancy K (aligned runs of K equal values). A 16-byte load needs C >= 8 for bf16, a
pointer run start divisible by 16 bytes, and a mask constant over the 8 elements. The facts
come from `arange`, the specialization of arguments (pointers 16-byte aligned, ints
divisible by 16) and constants, and flow through arithmetic like Triton's AxisInfo.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from kitjit.ir.core import Block, Function, Op, Value

MAXD = 1 << 30


def p2(n: int) -> int:
    """Largest power of two dividing n (MAXD for 0)."""
    if n == 0:
        return MAXD
    return min(n & -n, MAXD)


@dataclass(frozen=True)
class Info:
    contig: tuple[int, ...]
    div: tuple[int, ...]
    const: tuple[int, ...]
    sdiv: int = 1  # scalars: divisibility of the value
    cval: int | None = None  # scalars: known constant


def _default(v: Value) -> Info:
    r = len(v.shape)
    return Info((1,) * r, (1,) * r, (1,) * r)


def _all_div(i: Info) -> int:
    """Divisibility of every element."""
    best = 1
    for c, d in zip(i.contig, i.div):
        if c == 1:
            best = max(best, d)
    return best if i.contig else i.sdiv


def _at_starts(d: int, c: int, cr: int) -> int:
    if c == 1:
        return d
    if cr == 1:
        return 1
    return gcd(d, cr) if cr < c else d


class AxisAnalysis:
    def __init__(self, fn: Function):
        self.info: dict[int, Info] = {}
        arg_div = fn.attrs.get("arg_div", {})
        for a in fn.args:
            self.info[a.id] = Info((), (), (), arg_div.get(a.name, 1))
        self.block(fn.body)

    def __getitem__(self, v: Value) -> Info:
        i = self.info.get(v.id)
        return i if i is not None else _default(v)

    def block(self, block: Block) -> None:
        for op in block.ops:
            if op.name == "for":
                lb, _, step = (self[o] for o in op.operands[:3])
                body = op.regions[0]
                self.info[body.args[0].id] = Info((), (), (), gcd(lb.sdiv, step.sdiv))
            for r in op.regions:
                self.block(r)
            for res in op.results:
                try:
                    self.info[res.id] = self.rule(op, res)
                except Exception:  # analysis is an optimisation; never fail a compile on it
                    self.info[res.id] = _default(res)

    def rule(self, op: Op, res: Value) -> Info:
        n = op.name
        shape = res.shape
        r = len(shape)
        ins = [self[o] for o in op.operands]
        if n == "hint":  # the user's promise (kit.multiple_of, ...), as Triton takes it
            i, vals, kind = ins[0], op.attrs["values"], op.attrs["kind"]
            if r == 0:
                return Info((), (), (), vals[0], i.cval) if kind == "multiple_of" else i
            if kind == "multiple_of":  # of a pointer: its address, in bytes (as Triton)
                return Info(i.contig, tuple(vals), i.const)
            if kind == "max_contiguous":
                return Info(tuple(vals), i.div, i.const)
            return Info(i.contig, i.div, tuple(vals))
        if r == 0:
            if n == "constant":
                v = op.attrs["value"]
                if isinstance(v, bool) or not isinstance(v, int):
                    return Info((), (), (), 1)
                return Info((), (), (), p2(v), v)
            if n in ("add", "sub", "mul") and len(ins) == 2:
                a, b = ins
                cv = None
                if a.cval is not None and b.cval is not None:
                    cv = {"add": a.cval + b.cval, "sub": a.cval - b.cval,
                          "mul": a.cval * b.cval}[n]
                if n == "mul":
                    return Info((), (), (), min(a.sdiv * b.sdiv, MAXD), cv)
                return Info((), (), (), gcd(a.sdiv, b.sdiv), cv)
            if n == "addptr":
                e = res.dtype.element_ty.itemsize
                return Info((), (), (), gcd(ins[0].sdiv, min(ins[1].sdiv * e, MAXD)))
            if n == "cast" and res.dtype.is_int():
                return ins[0]
            return Info((), (), (), 1)
        if n == "arange":
            return Info((shape[0],), (p2(op.attrs["start"]),), (1,))
        if n == "splat":
            return Info((1,) * r, (ins[0].sdiv,) * r, shape)
        if n == "expand_dims":
            a = ins[0]
            ax = op.attrs["axis"]
            ad = _all_div(a)
            return Info(a.contig[:ax] + (1,) + a.contig[ax:], a.div[:ax] + (ad,) + a.div[ax:],
                        a.const[:ax] + (1,) + a.const[ax:])
        if n == "broadcast":
            a = ins[0]
            src = op.operands[0].shape
            c, d, k = list(a.contig), list(a.div), list(a.const)
            for i, (s, t) in enumerate(zip(src, shape)):
                if s != t:
                    c[i], k[i] = 1, t
            return Info(tuple(c), tuple(d), tuple(k))
        if n == "convert_layout":
            return ins[0]
        if n == "permute":  # the facts of each dim move with it
            a, dims = ins[0], op.attrs["dims"]
            return Info(tuple(a.contig[d] for d in dims), tuple(a.div[d] for d in dims),
                        tuple(a.const[d] for d in dims))
        if n in ("add", "sub", "addptr"):
            a, b = ins
            e = 1
            if n == "addptr":
                e = res.dtype.element_ty.itemsize
            C, D, K = [], [], []
            for i in range(r):
                if n == "sub":
                    c = gcd(a.contig[i], b.const[i])
                else:
                    c = max(gcd(a.contig[i], b.const[i]), gcd(b.contig[i], a.const[i]))
                if n == "addptr":
                    da = a.div[i] if a.contig[i] == 1 else (
                        e if c == 1 else (gcd(a.div[i], c * e) if c < a.contig[i] else a.div[i]))
                    db = min(_at_starts(b.div[i], b.contig[i], c) * e, MAXD)
                else:
                    da = _at_starts(a.div[i], a.contig[i], c)
                    db = _at_starts(b.div[i], b.contig[i], c)
                C.append(c)
                D.append(gcd(da, db))
                K.append(gcd(a.const[i], b.const[i]))
            return Info(tuple(C), tuple(D), tuple(K))
        if n == "mul":
            a, b = ins
            D = tuple(min(_at_starts(a.div[i], a.contig[i], 1) *
                          _at_starts(b.div[i], b.contig[i], 1), MAXD) for i in range(r))
            return Info((1,) * r, D, tuple(gcd(x, y) for x, y in zip(a.const, b.const)))
        if n == "cmp":
            a, b = ins
            K = []
            for i in range(r):
                k = gcd(a.const[i], b.const[i])
                pred = op.attrs["pred"]
                if pred in ("lt", "ge"):
                    x, y = a, b
                elif pred in ("gt", "le"):
                    x, y = b, a
                else:
                    x = None
                if x is not None and x.contig[i] > 1:
                    k1 = gcd(gcd(x.contig[i], y.const[i]),
                             gcd(x.div[i], _at_starts(y.div[i], y.contig[i], 1)))
                    k = max(k, k1)
                K.append(k)
            return Info((1,) * r, (1,) * r, tuple(K))
        if n in ("and", "or", "xor", "select", "not", "cast", "minimum", "maximum"):
            K = ins[0].const
            for o in ins[1:]:
                K = tuple(gcd(x, y) for x, y in zip(K, o.const))
            if n == "cast" and res.dtype.is_int() and op.operands[0].dtype.is_int():
                return Info(ins[0].contig, ins[0].div, K)
            return Info((1,) * r, (1,) * r, K)
        return _default(res)


def vector_width(info: Info, dim: int, elem_bytes: int) -> int:
    """Elements one access can move along `dim` given what is known of the pointers."""
    c = info.contig[dim]
    d = info.div[dim]
    v = 1
    while v * 2 <= c and v * 2 * elem_bytes <= 16 and d % (v * 2 * elem_bytes) == 0:
        v *= 2
    return v
