"""The generators: `Gen` draws a random tree of tile operations (`Node`s) for a kernel or a
helper, one `g_<op>` method per kind of node, tracking a bound on each value's magnitude
(clamps are inserted where an operation would overflow)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from hypothesis import strategies as st

from .model import (
    BIG,
    FLOATS,
    FP8,
    FP8_MAX,
    INTS,
    LIMIT,
    LITERALS,
    Node,
    _pow2_below,
    bshape,
    cumsum_dtype,
    fit_literal,
    irange,
    is_float,
    is_unsigned,
    lit,
    max_abs,
    max_dtype,
    meet,
    minmax_meet,
    promote,
    round_to,
    sum_dtype,
)

# the dtypes each atomic takes (kitjit/language/memory.py)
ATOMIC_DTYPES = {"add": ("fp32", "i32", "fp64", "u32", "i64", "fp16", "bf16"),
                 "max": ("i32", "fp32", "u32", "i64", "fp64"),
                 "min": ("i32", "fp32", "u32", "i64", "fp64"),
                 "and": ("i32", "u32", "i64"), "or": ("i32", "u32", "i64"),
                 "xor": ("i32", "u32", "i64"), "xchg": ("fp32", "i32", "i64", "fp64", "u32"),
                 "cas": ("i32", "fp32", "i64", "fp64", "u32")}


@dataclass(eq=False)
class Helper:
    """A generated @kit.jit helper: parameters p0, p1 (tiles), C (a constexpr) when has_c,
    and with `early` a run-time scalar s and `if <cond on s>: return <early body>`."""
    name: str
    params: list
    body: Node
    has_c: bool
    cval: object
    early: dict | None = None

    def arg_names(self) -> list[str]:
        return ([p.a["name"] for p in self.params] + (["s"] if self.early else []) +
                (["C"] if self.has_c else []))

def _fit(n: Node, other: Node) -> Node:
    """`n`, or a literal in range for `other`'s int dtype if `n` is a literal that is not."""
    return fit_literal(n, other.dtype) if n.is_lit and not other.is_lit else n


class Gen:
    """Draws a random tree of `Node`s (an `Emitter` turns it into statements)."""

    def __init__(self, draw, full: tuple, leaves: list[Node], helpers: list | None,
                 names: itertools.count, allow_control: bool = True, seen: set | None = None,
                 side: dict | None = None):
        self.draw = draw
        self.full = full
        self.leaves = list(leaves)
        self.helpers = helpers  # None inside a helper (no nested helpers)
        self.names = names
        self.allow_control = allow_control
        self.loopvars: list[str] = []  # loop variables in scope (run-time i32 scalars)
        # ops drawn so far in this kernel (helpers included)
        self.seen = seen if seen is not None else set()
        # the kernel's atomics (at most one of each kind, each run once per program: never
        # inside a loop, an `if` or a helper), shared with the Kernel: "atomic" (one lane per
        # address of Acc, returns the old values), "contend" (many lanes per address of Cnt)
        self.side = side if side is not None else {}
        self.controlled = 0  # > 0 inside a loop or an `if` branch

    def pick(self, xs):
        return self.draw(st.sampled_from(xs))

    def leaf(self) -> Node:
        return self.pick(self.leaves)

    def lit(self, bound: float = math.inf) -> Node:
        return lit(self.pick([v for v in LITERALS if abs(v) <= bound]))

    def clamp(self, n: Node, bound: float) -> Node:
        """`n` limited to [-bound, bound] (a power of two, exact in every float dtype; for an
        int dtype also within its range, so the constants keep the tile's dtype; unsigned
        tiles get only the upper bound)."""
        if n.is_lit:
            return n
        if not is_float(n.dtype):
            bound = min(bound, irange(n.dtype)[1])
        if n.mag <= bound:
            return n
        c = float(bound) if is_float(n.dtype) else int(bound)
        return Node("clamp", n.dtype, n.shape, [n], {"c": c}, mag=bound)

    def cast_to(self, n: Node, to: str, style: str = "to") -> Node:
        """`n` converted to `to` (ints clamped first where a 16-bit float would overflow)."""
        if n.is_lit or n.dtype == to:
            return n
        if to in ("fp16", "bf16"):
            n = self.clamp(n, LIMIT)
        mag = min(n.mag, max_abs(to))
        return Node("cast", to, n.shape, [n], {"style": style}, mag)

    def tree(self, depth: int, top: bool = False) -> Node:
        if depth <= 0:
            return self.leaf()
        # (hypothesis leans towards the first entry: make it an interesting one)
        ops = ["bin", "reduce", "where", "unary", "cast", "bin", "div", "minmax", "unary",
               "reduce", "big", "ihash", "idiv", "scan", "shape", "join", "libm", "umulhi",
               "kclamp", "fp8"]
        if self.allow_control:
            ops += ["loop", "if"]
            if self.helpers is not None:
                ops += ["call"]
        if self.helpers is not None and not self.controlled:
            ops += [k for k in ("atomic", "contend") if k not in self.side]
        if not top:
            ops.append("leaf")
        op = self.pick(ops)
        n = getattr(self, "g_" + op)(depth)
        if not n.is_lit and not is_float(n.dtype):  # ints wrap: never beyond the range
            n.mag = min(n.mag, max_abs(n.dtype))
            if is_unsigned(n.dtype) and n.op != "var":
                # a negative value (a literal -3, a cast of a negative int, a - b) wraps to
                # a huge one: unsigned results are bounded only by the range
                n.mag = max_abs(n.dtype)
        return n

    def in_control(self, fn):
        """fn() with the tree it draws inside a loop or a branch (no atomics there)."""
        self.controlled += 1
        try:
            return fn()
        finally:
            self.controlled -= 1

    def operand(self, depth: int, bound: float = math.inf) -> Node:
        return self.lit(bound) if self.draw(st.integers(0, 4)) == 0 else self.tree(depth)

    def g_leaf(self, depth):
        return self.leaf()

    def g_bin(self, depth):
        sym = self.pick(["+", "-", "*"])
        bound = 64.0 if sym == "*" else LIMIT / 2
        a, b = self.tree(depth - 1), self.operand(depth - 1, bound)
        if self.draw(st.booleans()):
            a, b = b, a
        a, b = self.clamp(a, bound), self.clamp(b, bound)
        a, b = _fit(a, b), _fit(b, a)
        mag = a.mag * b.mag if sym == "*" else a.mag + b.mag
        return Node("bin", meet(a, b), bshape(a.shape, b.shape), [a, b], {"sym": sym}, mag)

    def g_div(self, depth):
        a, b = self.operand(depth - 1), self.tree(depth - 1)
        b = self.clamp(b, LIMIT)  # abs(int8 -128) wraps to -128: keep |b| within the range
        den = b.dtype if is_float(b.dtype) else "fp32"
        num = den if a.is_lit else (a.dtype if is_float(a.dtype) else "fp32")
        dt = promote(num, den)
        dt = "fp32" if dt in ("fp16", "bf16") else dt  # Triton divides those in fp32
        return Node("div", dt, bshape(a.shape, b.shape), [a, b],
                    {"num": num, "den": den}, a.mag)

    def g_minmax(self, depth):
        a, b = self.tree(depth - 1), self.operand(depth - 1)
        if self.draw(st.booleans()):
            a, b = b, a
        fn = self.pick(["minimum", "maximum"])
        return Node("minmax", minmax_meet(a, b), bshape(a.shape, b.shape), [a, b], {"fn": fn},
                    max(a.mag, b.mag))

    def g_big(self, depth):
        """kit.minimum(x, BIG) / kit.maximum(x, -BIG): a huge literal, out of range for
        many tile dtypes (it may turn into +-inf, or widen an int32 tile to int64)."""
        x = self.tree(depth - 1)
        if x.is_lit:
            x = self.leaf()
        v = self.pick(BIG)
        fn = self.pick(["minimum", "maximum"])
        if fn == "maximum":
            v = -v
        c = lit(v)
        dt = minmax_meet(x, c)
        mag = x.mag if is_float(dt) else max(x.mag, abs(round_to(v, dt)))
        return Node("minmax", dt, x.shape, [x, c], {"fn": fn}, mag)

    def g_where(self, depth):
        conds = []
        for _ in range(self.pick([1, 1, 2])):
            ca, cb = self.tree(depth - 1), self.operand(depth - 1)
            if self.draw(st.booleans()):
                ca, cb = cb, ca
            conds.append((self.pick(["<", "<=", ">", ">=", "==", "!="]), ca, cb))
        x, y = self.tree(depth - 1), self.operand(depth - 1)
        if self.draw(st.booleans()):
            x, y = y, x
        x, y = _fit(x, y), _fit(y, x)
        join = self.pick(["&", "|"])
        # a scalar run-time condition (kernel only: helpers do not see flag/alpha)
        scond = self.pick([None, None, "flag > 1", "alpha < 0.0", "n_extra > 0"]) \
            if self.helpers is not None else None
        if scond is not None:
            conds = []
        shape = bshape(x.shape, y.shape, *[c[1].shape for c in conds],
                       *[c[2].shape for c in conds])
        kids = [x, y] + [n for c in conds for n in c[1:]]
        return Node("where", meet(x, y), shape, kids,
                    {"cmps": [c[0] for c in conds], "join": join, "scond": scond,
                     "inline": self.draw(st.booleans())}, max(x.mag, y.mag))

    def g_unary(self, depth):
        fn = self.pick(["exp", "exp2", "log", "log2", "sqrt", "abs", "neg", "sigmoid", "sin",
                        "cos"])
        a = self.tree(depth - 1)
        md = a.dtype if is_float(a.dtype) else "fp32"
        if fn in ("exp", "exp2") and md == "bf16":
            md = "fp32"   # the text's kit.minimum(x, 3): bf16 with an int32 scalar is fp32
        method = self.draw(st.booleans())
        if fn in ("abs", "neg"):
            return Node("unary", a.dtype, a.shape, [a], {"fn": fn, "method": False}, a.mag)
        if fn in ("sigmoid", "sin", "cos"):
            a = self.clamp(a, 64.0)
        else:
            a = self.clamp(a, LIMIT)  # abs(int8 -128) wraps: keep ints within the range
        mag = {"exp": math.exp(3.0), "exp2": 16.0, "log": math.log(a.mag + 1) + 1,
               "log2": math.log2(a.mag + 1) + 1, "sqrt": math.sqrt(a.mag + 1) + 1,
               "sigmoid": 1.0, "sin": 1.0, "cos": 1.0}[fn]
        return Node("unary", md, a.shape, [a], {"fn": fn, "method": method and fn not in
                                                ("sin", "cos")}, mag)

    def g_cast(self, depth):
        a = self.tree(depth - 1)
        to = self.pick([d for d in FLOATS + INTS if d != a.dtype])
        return self.cast_to(a, to, self.pick(["to", "to", "cast"]))

    def g_reduce(self, depth):
        a = self.tree(depth - 1)
        if a.is_lit or len(a.shape) == 0:
            return self.g_unary(depth)
        fn = self.pick(["sum", "sum", "max", "min", "argmax", "argmin"])
        rank = len(a.shape)
        axis = self.pick(list(range(rank)))
        n = a.shape[axis]
        if fn == "sum":
            a = self.clamp(a, _pow2_below(LIMIT / 2 / n))
        style = self.pick(["sub", "keep", "expand", "method"] if rank == 2 else
                          ["plain", "keep", "method"])
        neg = self.draw(st.booleans())
        if style == "plain" or style == "method" and rank == 1:
            shape = a.shape[:axis] + a.shape[axis + 1:]
        else:
            shape = a.shape[:axis] + (1,) + a.shape[axis + 1:]
        dtype = {"sum": sum_dtype(a.dtype), "max": max_dtype(a.dtype),
                 "min": max_dtype(a.dtype), "argmax": "i32", "argmin": "i32"}[fn]
        mag = {"sum": a.mag * n, "max": a.mag, "min": a.mag, "argmax": n, "argmin": n}[fn]
        return Node("reduce", dtype, shape, [a], {"fn": fn, "axis": axis, "style": style,
                                                  "neg": neg}, mag)

    def _tile(self, depth) -> Node:
        """A subtree that is a tile (not a literal or a scalar)."""
        x = self.tree(depth - 1)
        if x.is_lit or x.shape == ():
            tiles = [n for n in self.leaves if n.shape]
            return self.pick(tiles) if tiles else None
        return x

    def g_scan(self, depth):
        a = self._tile(depth)
        if a is None:
            return self.g_unary(depth)
        fn = self.pick(["cumsum", "cumprod"])
        rank = len(a.shape)
        axis = self.pick(list(range(rank)))
        n = a.shape[axis]
        if fn == "cumsum":
            a = self.clamp(a, _pow2_below(LIMIT / 2 / n))
            dt, mag = cumsum_dtype(a.dtype), a.mag * n
        else:  # |x| <= 1: the products stay within 1
            a = self.clamp(a, 1.0)
            dt, mag = ("fp32" if a.dtype == "bf16" else a.dtype), 1.0
        return Node("scan", dt, a.shape, [a], {"fn": fn, "axis": axis,
                                               "rev": self.draw(st.booleans()),
                                               "neg": self.draw(st.booleans())}, mag)

    def g_shape(self, depth):
        """Permutations of the full tile: flip, trans of a reshape, a reversing ravel."""
        a = self._tile(depth)
        if a is None:
            return self.g_unary(depth)
        full = self.full
        forms = ["flip"] + (["trans", "ravel", "permute"] if len(full) == 2 else
                            ["interleave"])
        form = self.pick(forms)
        if form != "flip":
            self.seen.add("relabel")
        return Node("shape", a.dtype, full, [a], {"form": form, "full": full,
                                                  "dim": self.pick(list(range(len(full))))},
                    a.mag)

    def g_join(self, depth):
        """`p, q = kit.split(kit.join(x, y))`: p is x, q is y (broadcast to one shape)."""
        self.seen.add("join")
        x, y = self._tile(depth), self.tree(depth - 1)
        if x is None:
            return self.g_unary(depth)
        y = self.leaf() if y.is_lit else y
        y = self.cast_to(y, x.dtype)
        return Node("join", x.dtype, bshape(x.shape, y.shape), [x, y],
                    {"which": self.pick([0, 1])}, max(x.mag, y.mag))

    def g_libm(self, depth):
        fn = self.pick(["tanh", "erf", "log1p", "fma"])
        a = self.tree(depth - 1)
        a = self.leaf() if a.is_lit else a
        md = a.dtype if a.dtype in ("fp32", "fp64") else "fp32"
        a = self.cast_to(self.clamp(a, 64.0), md)
        kids = [a]
        if fn == "fma":
            b, c = (self.tree(depth - 1) for _ in range(2))
            b, c = (self.leaf() if x.is_lit else x for x in (b, c))
            kids += [self.cast_to(self.clamp(b, 64.0), md),
                     self.cast_to(self.clamp(c, LIMIT / 2), md)]
        shape = bshape(*[k.shape for k in kids])
        mag = {"tanh": 1.0, "erf": 1.0, "log1p": math.log1p(a.mag) + 1,
               "fma": 64.0 * 64.0 + LIMIT / 2}[fn]
        return Node("libm", md, shape, kids, {"fn": fn}, mag)

    def g_ihash(self, depth):
        """x * M + K on an integer tile with a large multiplier literal: wraps."""
        a = self.tree(depth - 1)
        a = self.leaf() if a.is_lit else a
        dt = a.dtype if a.dtype in ("i8", "i16", "i32", "u8", "u32") else \
            self.pick(["i32", "u32", "i8", "u8", "i16"])
        a = self.cast_to(a, dt)
        m = {"i8": 93, "i16": 12345, "i32": 1103515245, "u8": 201, "u32": 2654435761}[dt]
        return Node("ihash", dt, a.shape, [a], {"m": m, "k": 7}, max_abs(dt))

    def g_idiv(self, depth):
        """a // ((b & 7) + 1) or a % (...) on ints: truncates toward zero."""
        a, b = (self.tree(depth - 1) for _ in range(2))
        a, b = (self.leaf() if x.is_lit else x for x in (a, b))
        a, b = (x if not is_float(x.dtype) else self.cast_to(x, self.pick(INTS)) for x in (a, b))
        dt = promote(a.dtype, b.dtype)
        sym = self.pick(["//", "%"])
        return Node("idiv", dt, bshape(a.shape, b.shape), [a, b], {"sym": sym},
                    a.mag if sym == "//" else 8.0)

    def g_umulhi(self, depth):
        a, b = (self.tree(depth - 1) for _ in range(2))
        a, b = (self.leaf() if x.is_lit else x for x in (a, b))
        dt = self.pick(["i32", "u32", "i64"])
        a, b = self.cast_to(a, dt), self.cast_to(b, dt)
        return Node("umulhi", dt, bshape(a.shape, b.shape), [a, b], {}, max_abs(dt))

    def g_kclamp(self, depth):
        a = self.tree(depth - 1)
        a = self.leaf() if a.is_lit else a
        if not is_float(a.dtype):
            a = self.cast_to(a, "fp32")
        lo, hi = self.pick([(-1.0, 1.0), (-0.5, 3.0), (0.0, 4096.0), (-1e5, 1e5), (-2, 2)])
        return Node("kclamp", a.dtype, a.shape, [a], {"lo": lo, "hi": hi},
                    min(a.mag, max(abs(lo), abs(hi))))

    def g_loop(self, depth):
        form = self.pick(["range", "range1", "step2", "static", "reverse", "while",
                          "while-and"])
        kind = self.pick(["sum", "sum", "max"])
        i = Node("var", "i32", (), a={"name": f"i{next(self.names)}"}, mag=6)
        saved = self.leaves
        if form != "static":  # a Python int in static_range: it folds, not an i32 scalar
            self.leaves = self.leaves + [i]
            self.loopvars = self.loopvars + [i.a["name"]]
        try:
            c = self.in_control(lambda: self.tree(depth - 1))
        finally:
            self.leaves = saved
            if form != "static":
                self.loopvars = self.loopvars[:-1]
        if c.is_lit:
            c = self.leaf()
        c = self.clamp(c, 512.0)
        if is_unsigned(c.dtype):  # c - i would wrap
            c = self.cast_to(c, "i32")
        elif c.dtype == "fp64":  # the fp32 accumulator would change type
            c = self.cast_to(c, "fp32")
        mag = 6 * c.mag if kind == "sum" else max(1024.0, c.mag + 6)
        return Node("loop", "fp32", self.full, [c], {"form": form, "kind": kind, "i": i,
                                                     "aug": self.draw(st.booleans())}, mag)

    def g_if(self, depth):
        t, e = (self.in_control(lambda: self.tree(depth - 1)) for _ in range(2))
        t, e = (self.leaf() if n.is_lit else n for n in (t, e))
        conds = ["flag > 0", "flag", "flag != 0 and n_extra > 0", "not flag == 0"]
        for i in self.loopvars:  # `if` in a loop on the loop variable (run time)
            conds += [f"{i} % 2 == 0", f"{i} > 1", f"{i} == 0 or flag > 2"]
        cond = self.pick(conds)
        return Node("if", "fp32", self.full, [t, e], {"cond": cond}, max(t.mag, e.mag))

    def g_call(self, depth):
        nargs = self.pick([1, 2])
        args = []
        for _ in range(nargs):
            x = self.tree(depth - 1)
            args.append(self.leaf() if x.is_lit else x)
        k = next(self.names)
        params = [Node("var", x.dtype, x.shape, a={"name": f"p{j}"}, mag=x.mag)
                  for j, x in enumerate(args)]
        has_c = self.draw(st.booleans())
        cval = self.pick([0.5, 2.0, 3]) if has_c else None
        sub = Gen(self.draw, self.full, params, None, self.names, allow_control=False,
                  seen=self.seen)
        if has_c:
            sub.lit = lambda bound=math.inf: (
                lit(cval) if abs(cval) <= bound and self.draw(st.booleans()) else
                Gen.lit(sub, bound))
        body = sub.tree(self.pick([2, 1]), top=True)
        early = None
        shape, mag = body.shape, body.mag
        if self.draw(st.integers(0, 3)) == 0:
            # `if s > 2: return <other>` on a run-time scalar parameter (the kernel's flag):
            # both returns converted to one dtype and broadcast to the full tile
            other = sub.tree(self.pick([1, 2]), top=True)
            cond = self.pick(["s > 2", "s == 0", "s != 1", "s > 0 and s < 9"])
            early = {"cond": cond, "body": other}
            shape, mag = self.full, max(mag, other.mag)
        name = f"_h{k}"
        self.helpers.append(Helper(name, params, body, has_c, cval, early))
        return Node("call", body.dtype, shape, args,
                    {"name": name, "c": cval, "has_c": has_c, "early": early is not None,
                     "kw": self.draw(st.booleans())}, mag)

    def g_fp8(self, depth):
        """x.to(fp8).to(a wider float): rounds to 3 (e4m3) or 2 (e5m2) mantissa bits and
        saturates at the fp8 maximum."""
        x = self._tile(depth)
        if x is None:
            return self.g_unary(depth)
        if not is_float(x.dtype):
            x = self.cast_to(x, "fp32")
        f8 = self.pick(FP8)
        back = self.pick([x.dtype, "fp16", "bf16", "fp32"])
        return Node("fp8", back, x.shape, [x], {"f8": f8}, min(x.mag, FP8_MAX[f8]))

    def g_atomic(self, depth):
        """`old = kit.atomic_<fn>(Acc + <one address per lane>, val, mask=...)`: the values
        Acc held (masked-off lanes: 0); Acc's final contents are checked too."""
        self.side["atomic"] = None  # (one per kernel: none in its own operand)
        fn = self.pick(sorted(ATOMIC_DTYPES, key=lambda f: f != "add"))
        dt = self.pick(ATOMIC_DTYPES[fn])
        v = self.tree(depth - 1)
        bound = LIMIT / 2 if is_float(dt) else math.inf
        if v.is_lit and abs(v.a["value"]) > bound or v.is_lit and fn == "cas":
            v = self.leaf()
        if not v.is_lit:
            v = self.cast_to(self.clamp(v, bound), dt)
        self.seen.add("atomic")
        n = Node("atomic", dt, self.full, [v],
                 {"fn": fn, "mask": self.draw(st.booleans()),
                  "sem": self.pick([None, "relaxed", "acq_rel", "acquire", "release"]),
                  "scope": self.pick([None, "gpu", "cta"])}, 8.0)
        self.side["atomic"] = n
        return n

    def g_contend(self, depth):
        """`kit.atomic_<fn>(Cnt + lane % 4, x, mask=...)`: lanes of every program share the 4
        addresses; the integer ops commute, so Cnt's final contents are exact in any order.
        The node's value is x itself (the old values depend on the order: unused)."""
        self.side["contend"] = None
        fn = self.pick(["add", "max", "min", "and", "or", "xor"])
        dt = self.pick(["i32", "u32", "i64"])
        x = self.tree(depth - 1)
        x = self.cast_to(self.leaf() if x.is_lit else x, dt)
        self.seen.add("atomic")
        n = Node("contend", dt, x.shape, [x],
                 {"fn": fn, "mask": self.draw(st.booleans()),
                  "sem": self.pick([None, "relaxed", "acq_rel"]),
                  "scope": self.pick([None, "gpu"])}, x.mag)
        self.side["contend"] = n
        return n
