"""Random kernels (hypothesis): valid ones compute the right values, broken ones are reported.

A strategy builds a small random kernel as a tree of tile operations (masked loads of 1-3
tensors of fp32/fp16/bf16/fp64/int8/int16/int32/int64/uint8/uint32, `+ - * /` (ints wrap),
`// %` on ints (truncating), `x * M + K` hashes that overflow, casts between all of these
(float -> int truncates and saturates), Python literals that are large, negative, inexact or
out of range for the tile's dtype (kitjit's weak typing: `kit.minimum(x, 1e5)` on fp16 is
min with +inf, `x_i32 + 2**40` is int64), `kit.cumsum/cumprod`, `kit.flip/trans/permute/
reshape`, `kit.split(kit.join(x, y))`, `kit.math.tanh/erf/log1p/fma`, `kit.umulhi`,
`kit.clamp`, `kit.where` on a scalar condition, `if` on the loop variable inside loops,
`kit.minimum`/`maximum`, comparisons and `kit.where`, `exp exp2 log log2 sqrt abs sigmoid
sin cos` on safe inputs, `sum max min argmax argmin` along an axis with the result broadcast
back by `[:, None]` / `[None, :]` / `keep_dims` / `kit.expand_dims`, `range` and
`kit.static_range` loops carrying an accumulator, `if` on a run-time scalar, calls of
generated `@kit.jit` helpers) and writes it to a real .py file (the frontend reads source
with `inspect`), which is imported with importlib. From the same tree it computes a float64
reference together with a running error bound per element (each operation adds its
rounding error in its own dtype) and an "unstable" mask for elements whose value depends on
a comparison or truncation closer than that bound. Then:

- valid kernels run in the interpreter on random inputs and must match the reference within
  the bound wherever the result is stable (and be finite everywhere they are stored); they
  also carry `kit.static_assert`s on the dtype and shape the typing rules give; and each is
  compiled for sm_90a (PTX with `.target sm_90a`, an ELF cubin), without a GPU;
- broken kernels are valid ones with one known mistake inserted (in the kernel or in a
  called helper): they must raise `CompileError` whose message names the generated file and
  the line of the mistake (and the call site for mistakes inside helpers), the same from the
  interpreter's launch and from the sm_90a compile, and never `InternalCompilerError` or
  any other exception;
- launch mistakes on valid kernels raise TypeError / ValueError before anything runs.

Hypothesis runs derandomized (the same examples on every run) with small example counts.
Kernels that once crashed the compiler are kept below as regression tests.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st
from kitjit.frontend.errors import CompileError, InternalCompilerError

import kitjit as kit

# ============================================================================ dtypes
FLOATS = ("fp32", "fp16", "bf16", "fp64")
INTS = ("i32", "i8", "i16", "i64", "u8", "u32")
KIT = {"fp32": "kit.float32", "fp16": "kit.float16", "bf16": "kit.bfloat16",
       "fp64": "kit.float64", "i32": "kit.int32", "i8": "kit.int8", "i16": "kit.int16",
       "i64": "kit.int64", "u8": "kit.uint8", "u32": "kit.uint32"}
TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
         "fp64": torch.float64, "i32": torch.int32, "i8": torch.int8, "i16": torch.int16,
         "i64": torch.int64, "u8": torch.uint8, "u32": torch.uint32}
BITS = {"i32": 32, "i8": 8, "i16": 16, "i64": 64, "u8": 8, "u32": 32}
# unit roundoff, and the smallest subnormal (an absolute error floor for underflow)
UNIT = {"fp32": 2.0 ** -24, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8, "fp64": 2.0 ** -53,
        **{d: 0.0 for d in INTS}}
TINY = {"fp32": 2.0 ** -149, "fp16": 2.0 ** -24, "bf16": 2.0 ** -133, "fp64": 2.0 ** -1074,
        **{d: 0.0 for d in INTS}}
LIMIT = 8192.0  # float values stay within this (clamps are inserted), so fp16 never overflows
# Python literals: small exact ones, and ones that are large, negative, inexact or out of
# range for some tile dtypes (300 next to an int8 tile is an int32 literal, so the result
# is int32; -1 next to a uint32 tile wraps to 2**32 - 1; 0.1 rounds to the tile's float).
# A literal never goes where |value| exceeds the operation's bound (g_bin's clamps).
LITERALS = (0.5, 2.0, -1.0, 0.25, 3.0, 1.5, 2, -3, 1, 300, -1, 255, -128, 1000, 4096.0,
            0.1, -0.75, 1e-3, 127, 65535)
# Huge literals for `kit.minimum(x, BIG)` / `kit.maximum(x, -BIG)` (the identity): 1e5 is
# +inf in fp16, 1e300 +inf in fp32; an int beyond int32 makes an int32 tile's result int64.
BIG = (1e5, 1e9, 1e300, 70000, 2 ** 31, 2 ** 40, 2 ** 62)


def is_float(dt) -> bool:
    return dt in FLOATS


def is_unsigned(dt) -> bool:
    return dt in ("u8", "u32")


def irange(dt) -> tuple[int, int]:
    b = BITS[dt]
    return (0, 2 ** b - 1) if is_unsigned(dt) else (-(2 ** (b - 1)), 2 ** (b - 1) - 1)


def max_abs(dt) -> float:
    """The largest |value| a dtype holds (floats: the fuzzer's bound is what matters)."""
    if is_float(dt):
        return math.inf
    lo, hi = irange(dt)
    return float(max(-lo, hi))


def promote(a: str, b: str) -> str:
    """kitjit's (Triton's) rules: floats win, fp64 over fp32 over fp16/bf16, fp16 with bf16 is
    fp32; ints of one signedness take the wider, mixed: the unsigned one if it is at least as
    wide, else the signed one."""
    if a == b:
        return a
    if is_float(a) and is_float(b):
        return "fp64" if "fp64" in (a, b) else "fp32"
    if is_float(a) or is_float(b):
        return a if is_float(a) else b
    if is_unsigned(a) == is_unsigned(b):
        return a if BITS[a] >= BITS[b] else b
    u, s = (a, b) if is_unsigned(a) else (b, a)
    return u if BITS[u] >= BITS[s] else s


def literal_dtype(v) -> str:
    if isinstance(v, float):
        return "fp32"
    return "i32" if -(2 ** 31) <= v < 2 ** 31 else "i64"


def weak(lit, other: str) -> str:
    """The dtype a Python literal takes next to a tile of dtype `other` (kitjit's
    frontend/semantic/base.py weak_dtype): floats take a float tile's dtype (fp32 next to
    ints), ints take the tile's dtype where they fit, else int32/int64 (which then promote)."""
    if isinstance(lit, float):
        return other if is_float(other) else "fp32"
    if is_float(other):
        return other
    lo, hi = irange(other)
    return other if lo <= lit <= hi else literal_dtype(lit)


def wrap(v, dt):
    """Integer values (float64 holding exact ints, int64 or uint64) wrapped to `dt` (two's
    complement), as float64."""
    x = np.asarray(v)
    shape = x.shape
    x = np.atleast_1d(x)
    x = x.view(np.int64) if x.dtype == np.uint64 else x.astype(np.int64)
    b = BITS[dt]
    if b < 64:
        r = x & (2 ** b - 1)
        if not is_unsigned(dt):
            r = np.where(r >= 2 ** (b - 1), r - 2 ** b, r)
    else:
        r = x
    return r.astype(np.float64).reshape(shape)


def as_u64(v):
    x = np.atleast_1d(np.asarray(v))
    return x.astype(np.int64).view(np.uint64)


def round_to(v: float, dt: str) -> float:
    """A literal's value as a constant of dtype `dt` (floats round, ints wrap)."""
    if is_float(dt):
        return torch.tensor(float(v), dtype=torch.float64).to(TORCH[dt]).double().item()
    return float(wrap(np.int64(int(v)), dt)[()])


# ============================================================================ the tree
@dataclass(eq=False)
class Node:
    op: str                      # var lit bin div minmax clamp where unary cast reduce loop if call
    dtype: str | None            # None for a (weak) Python literal
    shape: tuple | None          # None for a literal; () for a scalar
    kids: list = field(default_factory=list)
    a: dict = field(default_factory=dict)
    mag: float = 0.0             # a bound on |value|

    @property
    def is_lit(self) -> bool:
        return self.op == "lit"


def lit(value) -> Node:
    return Node("lit", None, None, a={"value": value}, mag=abs(float(value)))


def bshape(*shapes) -> tuple:
    return tuple(np.broadcast_shapes(*[s for s in shapes if s is not None]))


def meet(a: Node, b: Node) -> str:
    """The dtype two operands meet at (one may be a literal)."""
    if a.is_lit:
        return promote(weak(a.a["value"], b.dtype), b.dtype)
    if b.is_lit:
        return promote(weak(b.a["value"], a.dtype), a.dtype)
    return promote(a.dtype, b.dtype)


def sum_dtype(dt: str) -> str:
    """kit.sum's accumulator: fp16/bf16 -> fp32, ints narrower than 32 bits -> int32."""
    if dt in ("fp16", "bf16"):
        return "fp32"
    return "i32" if dt in ("i8", "i16", "u8") else dt


def cumsum_dtype(dt: str) -> str:
    """kit.cumsum's: bf16 -> fp32 (fp16 stays), narrow ints -> int32 / uint32."""
    return {"bf16": "fp32", "i8": "i32", "i16": "i32", "u8": "u32"}.get(dt, dt)


def _pow2_below(x: float) -> float:
    return 2.0 ** math.floor(math.log2(x))


class Gen:
    """Draws a random tree of `Node`s (an `Emitter` turns it into statements)."""

    def __init__(self, draw, full: tuple, leaves: list[Node], helpers: list | None,
                 names: itertools.count, allow_control: bool = True, seen: set | None = None):
        self.draw = draw
        self.full = full
        self.leaves = list(leaves)
        self.helpers = helpers  # None inside a helper (no nested helpers)
        self.names = names
        self.allow_control = allow_control
        self.loopvars: list[str] = []  # loop variables in scope (run-time i32 scalars)
        # ops drawn so far in this kernel (helpers included)
        self.seen = seen if seen is not None else set()

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
               "kclamp"]
        if self.allow_control:
            ops += ["loop", "if"]
            if self.helpers is not None:
                ops += ["call"]
        if not top:
            ops.append("leaf")
        op = self.pick(ops)
        n = getattr(self, "g_" + op)(depth)
        if not n.is_lit and not is_float(n.dtype):  # ints wrap: never beyond the range
            n.mag = min(n.mag, max_abs(n.dtype))
        return n

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
        mag = a.mag * b.mag if sym == "*" else a.mag + b.mag
        return Node("bin", meet(a, b), bshape(a.shape, b.shape), [a, b], {"sym": sym}, mag)

    def g_div(self, depth):
        a, b = self.operand(depth - 1), self.tree(depth - 1)
        b = self.clamp(b, LIMIT)  # abs(int8 -128) wraps to -128: keep |b| within the range
        den = b.dtype if is_float(b.dtype) else "fp32"
        num = den if a.is_lit else (a.dtype if is_float(a.dtype) else "fp32")
        return Node("div", promote(num, den), bshape(a.shape, b.shape), [a, b],
                    {"num": num, "den": den}, a.mag)

    def g_minmax(self, depth):
        a, b = self.tree(depth - 1), self.operand(depth - 1)
        if self.draw(st.booleans()):
            a, b = b, a
        fn = self.pick(["minimum", "maximum"])
        return Node("minmax", meet(a, b), bshape(a.shape, b.shape), [a, b], {"fn": fn},
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
        dt = meet(x, c)
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
        dtype = {"sum": sum_dtype(a.dtype), "max": a.dtype,
                 "min": a.dtype, "argmax": "i32", "argmin": "i32"}[fn]
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
        dt = self.pick(["i32", "u32"])
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
        form = self.pick(["range", "range1", "step2", "static", "reverse"])
        kind = self.pick(["sum", "sum", "max"])
        i = Node("var", "i32", (), a={"name": f"i{next(self.names)}"}, mag=6)
        saved = self.leaves
        if form != "static":  # a Python int in static_range: it folds, not an i32 scalar
            self.leaves = self.leaves + [i]
            self.loopvars = self.loopvars + [i.a["name"]]
        try:
            c = self.tree(depth - 1)
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
        t, e = self.tree(depth - 1), self.tree(depth - 1)
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
        name = f"_h{k}"
        self.helpers.append((name, params, body, has_c, cval))
        return Node("call", body.dtype, body.shape, args,
                    {"name": name, "c": cval, "has_c": has_c,
                     "kw": self.draw(st.booleans())}, body.mag)


# ============================================================================ emit
class Emitter:
    """Statements of one function body: `(indent, text)` lines; names of values it made."""

    def __init__(self, full_text: str, names: itertools.count, cval=None):
        self.lines: list[tuple[int, str]] = []
        self.full_text = full_text
        self.names = names
        self.cval = cval
        self.calls: dict[str, int] = {}  # helper name -> index of the line calling it
        self.vars: list[tuple] = []  # top-level values: (name, dtype, shape, from index)

    def line(self, ind: int, text: str) -> int:
        self.lines.append((ind, text))
        return len(self.lines) - 1

    def fresh(self) -> str:
        return f"v{next(self.names)}"

    def ref(self, n: Node, ind: int) -> str:
        """An expression for `n` (emitting the statements it needs first)."""
        if n.op == "var":
            return n.a["name"]
        if n.op == "lit":
            v = n.a["value"]
            if self.cval is not None and v == self.cval and type(v) is type(self.cval):
                return "C"
            return f"({v!r})" if (isinstance(v, (int, float)) and v < 0) else repr(v)
        name = self.fresh()
        self.stmt(n, name, ind)
        if ind == 1:  # visible to statements inserted at this index or later
            self.vars.append((name, n.dtype, n.shape, len(self.lines)))
        return name

    def stmt(self, n: Node, name: str, ind: int) -> None:
        r = lambda k: self.ref(k, ind)  # noqa: E731
        op = n.op
        if op == "bin":
            self.line(ind, f"{name} = {r(n.kids[0])} {n.a['sym']} {r(n.kids[1])}")
        elif op == "div":
            self.line(ind, f"{name} = {r(n.kids[0])} / (kit.abs({r(n.kids[1])}) + 1.0)")
        elif op == "minmax":
            self.line(ind, f"{name} = kit.{n.a['fn']}({r(n.kids[0])}, {r(n.kids[1])})")
        elif op == "clamp":
            c = n.a["c"]
            if is_unsigned(n.dtype):
                self.line(ind, f"{name} = kit.minimum({r(n.kids[0])}, {c!r})")
            else:
                self.line(ind, f"{name} = kit.minimum(kit.maximum({r(n.kids[0])}, {-c!r}), "
                               f"{c!r})")
        elif op == "where":
            x, y = r(n.kids[0]), r(n.kids[1])
            cs = []
            for j, sym in enumerate(n.a["cmps"]):
                cs.append(f"({r(n.kids[2 + 2 * j])} {sym} {r(n.kids[3 + 2 * j])})")
            cond = f" {n.a['join']} ".join(cs) if cs else f"({n.a['scond']})"
            if not n.a["inline"]:
                c = f"c{next(self.names)}"
                self.line(ind, f"{c} = {cond}")
                cond = c
            self.line(ind, f"{name} = kit.where({cond}, {x}, {y})")
        elif op == "unary":
            a, fn = r(n.kids[0]), n.a["fn"]
            if fn == "abs":
                self.line(ind, f"{name} = kit.abs({a})")
            elif fn == "neg":
                self.line(ind, f"{name} = -{a}")
            else:
                inner = {"exp": f"kit.minimum({a}, 3.0)", "exp2": f"kit.minimum({a}, 4.0)",
                         "log": f"(kit.abs({a}) + 1.0)", "log2": f"(kit.abs({a}) + 1.0)",
                         "sqrt": f"(kit.abs({a}) + 1.0)"}.get(fn, a)
                if n.a["method"]:
                    self.line(ind, f"{name} = {inner}.{fn}()")
                else:
                    self.line(ind, f"{name} = kit.{fn}({inner})")
        elif op == "cast":
            a = r(n.kids[0])
            if n.a["style"] == "cast":
                self.line(ind, f"{name} = kit.cast({a}, {KIT[n.dtype]})")
            else:
                self.line(ind, f"{name} = {a}.to({KIT[n.dtype]})")
        elif op == "reduce":
            a = r(n.kids[0])
            fn, axis, style = n.a["fn"], n.a["axis"], n.a["style"]
            rank = len(n.kids[0].shape)
            ax = axis - rank if n.a["neg"] else axis
            if style == "method":
                e = f"{a}.{fn}(axis={ax})"
            elif style == "keep":
                e = f"kit.{fn}({a}, axis={ax}, keep_dims=True)"
            else:
                e = f"kit.{fn}({a}, axis={ax})"
            if style == "sub" or style == "method" and rank == 2:
                e += "[:, None]" if axis == 1 else "[None, :]"
            elif style == "expand":
                e = f"kit.expand_dims({e}, {axis})"
            self.line(ind, f"{name} = {e}")
        elif op == "loop":
            i, kind, form = n.a["i"].a["name"], n.a["kind"], n.a["form"]
            if kind == "sum":
                self.line(ind, f"{name} = kit.zeros({self.full_text}, kit.float32)")
            else:
                self.line(ind, f"{name} = kit.full({self.full_text}, -1024.0, kit.float32)")
            rng = {"range": "range(iters)", "range1": "range(1, iters + 1)",
                   "step2": "range(0, 2 * iters, 2)", "static": "kit.static_range(3)",
                   "reverse": "range(iters - 1, -1, -1)"}[form]
            self.line(ind, f"for {i} in {rng}:")
            c = self.ref(n.kids[0], ind + 1)
            if kind == "max":
                self.line(ind + 1, f"{name} = kit.maximum({name}, {c} - {i})")
            elif n.a["aug"]:
                self.line(ind + 1, f"{name} += {c} * {i}")
            else:
                self.line(ind + 1, f"{name} = {name} + {c} * {i}")
        elif op == "if":
            self.line(ind, f"if {n.a['cond']}:")
            for j, k in enumerate(n.kids):
                if j == 1:
                    self.line(ind, "else:")
                v = self.ref(k, ind + 1)
                self.line(ind + 1, f"{name} = kit.broadcast_to({v}.to(kit.float32), "
                                   f"{self.full_text})")
        elif op == "scan":
            a, fn, axis = r(n.kids[0]), n.a["fn"], n.a["axis"]
            ax = axis - len(n.shape) if n.a["neg"] else axis
            rev = ", reverse=True" if n.a["rev"] else ""
            self.line(ind, f"{name} = kit.{fn}({a}, axis={ax}{rev})")
        elif op == "shape":
            a, form, full = r(n.kids[0]), n.a["form"], n.a["full"]
            if n.kids[0].shape != full:
                a = f"kit.broadcast_to({a}, {full!r})"
            if form == "flip":
                e = f"kit.flip({a}, {n.a['dim']})"
            elif form == "trans":
                e = f"kit.trans(kit.reshape({a}, ({full[1]}, {full[0]})))"
            elif form == "permute":
                e = f"kit.permute(kit.reshape({a}, ({full[1]}, {full[0]})), 1, 0)"
            elif form == "ravel":
                e = f"kit.reshape(kit.flip(kit.reshape({a}, ({full[0] * full[1]},)), 0), {full!r})"
            else:  # interleave the halves
                e = (f"kit.reshape(kit.trans(kit.reshape({a}, (2, {full[0] // 2}))), "
                     f"({full[0]},))")
            self.line(ind, f"{name} = {e}")
        elif op == "join":
            x, y = r(n.kids[0]), r(n.kids[1])
            other = f"q{next(self.names)}"
            lhs = f"{name}, {other}" if n.a["which"] == 0 else f"{other}, {name}"
            self.line(ind, f"{lhs} = kit.split(kit.join({x}, {y}))")
        elif op == "libm":
            args = [r(k) for k in n.kids]
            fn = n.a["fn"]
            if fn == "log1p":
                args = [f"kit.abs({args[0]})"]
            self.line(ind, f"{name} = kit.math.{fn}({', '.join(args)})")
        elif op == "ihash":
            self.line(ind, f"{name} = {r(n.kids[0])} * {n.a['m']} + {n.a['k']}")
        elif op == "idiv":
            self.line(ind, f"{name} = {r(n.kids[0])} {n.a['sym']} (({r(n.kids[1])} & 7) + 1)")
        elif op == "umulhi":
            self.line(ind, f"{name} = kit.umulhi({r(n.kids[0])}, {r(n.kids[1])})")
        elif op == "kclamp":
            self.line(ind, f"{name} = kit.clamp({r(n.kids[0])}, {n.a['lo']!r}, {n.a['hi']!r})")
        elif op == "call":
            args = [r(k) for k in n.kids]
            if n.a["has_c"]:
                args.append(f"C={n.a['c']!r}" if n.a["kw"] else repr(n.a["c"]))
            self.calls[n.a["name"]] = self.line(ind, f"{name} = {n.a['name']}({', '.join(args)})")
        else:
            raise AssertionError(op)


# ============================================================================ kernels
@dataclass
class Kernel:
    mode: str                    # "1d" | "2d"
    dims: dict                   # BLOCK or BM, BN
    inputs: list                 # (dtype, kind, other) per input; kind: full | row | col
    out_dtype: str
    root: Node
    helpers: list                # (name, params, body, has_c, cval)
    num_warps: int
    sizes: dict                  # n or M, N
    alpha: float
    iters: int
    flag: int
    n_extra: int
    seed: int
    parts: dict = field(default_factory=dict)  # filled by build()

    @property
    def full(self) -> tuple:
        return (self.dims["BLOCK"],) if self.mode == "1d" else (self.dims["BM"], self.dims["BN"])

    @property
    def grid(self) -> int:
        if self.mode == "1d":
            return -(-self.sizes["n"] // self.dims["BLOCK"])
        return -(-self.sizes["M"] // self.dims["BM"])

    def params(self) -> list[str]:
        ps = [f"X{k}" for k in range(len(self.inputs))] + ["Out"]
        ps += ["n"] if self.mode == "1d" else ["M", "N"]
        ps += ["alpha", "iters", "flag", "n_extra"]
        return ps

    def constexprs(self) -> dict:
        return dict(self.dims)

    # -------------------------------------------------------------- source
    def build(self) -> None:
        """The pieces of the source: helper bodies and the kernel body, as line lists."""
        names = itertools.count()
        full_text = f"({', '.join(self.dims)},)" if self.mode == "1d" else "(BM, BN)"
        helpers = []
        for name, params, body, has_c, cval in self.helpers:
            em = Emitter(full_text, names, cval if has_c else None)
            res = em.ref(body, 1)
            em.line(1, f"return {res}")
            sig = ", ".join([p.a["name"] for p in params] + (["C: kit.constexpr"] if has_c
                                                              else []))
            helpers.append((name, sig, em))
        em = Emitter(full_text, names)
        pre = []
        if self.mode == "1d":
            pre += ["offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)",
                    "mask = offs < n"]
        else:
            pre += ["rm = kit.program_id(0) * BM + kit.arange(0, BM)",
                    "rn = kit.arange(0, BN)",
                    "mask = (rm[:, None] < M) & (rn[None, :] < N)"]
        for k, (dt, kind, other) in enumerate(self.inputs):
            o = repr(int(other)) if not is_float(dt) else repr(other)
            if self.mode == "1d":
                pre.append(f"x{k} = kit.load(X{k} + offs, mask=mask, other={o})")
            elif kind == "full":
                pre.append(f"x{k} = kit.load(X{k} + rm[:, None] * N + rn[None, :], mask=mask, "
                           f"other={o})")
            elif kind == "row":
                pre.append(f"x{k} = kit.load(X{k} + rn, mask=rn < N, other={o})[None, :]")
            else:
                pre.append(f"x{k} = kit.load(X{k} + rm, mask=rm < M, other={o})[:, None]")
        for p in pre:
            em.line(1, p)
        n_pre = len(em.lines)
        res = em.ref(self.root, 1)
        shape = repr(tuple(self.root.shape))
        post = [f"kit.static_assert({res}.dtype == {KIT[self.root.dtype]}, "
                f"\"fuzz: the result's dtype\")",
                f"kit.static_assert({res}.shape == {shape}, \"fuzz: the result's shape\")"]
        offs = "offs" if self.mode == "1d" else "rm[:, None] * N + rn[None, :]"
        post.append(f"kit.store(Out + {offs}, {res}, mask=mask)")
        self.parts = {"helpers": helpers, "kernel": em, "n_pre": n_pre, "post": post}

    def insertion_points(self) -> list[tuple[str, int, list]]:
        """(body, line index, values in scope there) for every place a statement can go: the
        top level of the kernel after the loads, and anywhere before a helper's return."""
        full = self.full
        pre = [(f"x{k}", dt, {"full": full, "row": (1, full[-1]), "col": (full[0], 1)}[kind]
                if self.mode == "2d" else full)
               for k, (dt, kind, _) in enumerate(self.inputs)]
        pre += [("alpha", "fp32", ()), ("mask", "i1", full)]
        pre += [("offs", "i32", full)] if self.mode == "1d" else \
            [("rm", "i32", full[:1]), ("rn", "i32", full[1:])]
        em = self.parts["kernel"]
        points = []
        for idx in range(self.parts["n_pre"], len(em.lines) + 1):
            if idx == len(em.lines) or em.lines[idx][0] == 1 and em.lines[idx][1] != "else:":
                points.append(("kernel", idx, pre + [v[:3] for v in em.vars if v[3] <= idx]))
        for (name, params, *_), (_, _, hem) in zip(self.helpers, self.parts["helpers"]):
            ps = [(p.a["name"], p.dtype, p.shape) for p in params]
            for idx in range(len(hem.lines)):
                points.append((name, idx, ps + [v[:3] for v in hem.vars if v[3] <= idx]))
        return points

    def render(self, extra: dict | None = None) -> tuple[str, dict]:
        """The source text, with `extra` lines inserted: {("kernel"|helper name, index): [(indent,
        text), ...]} inserts before that line of that body. Returns the text and a map
        (body, index of a body line or ("extra", key, j)) -> line number in the file."""
        extra = extra or {}
        out = ["import kitjit as kit", "", ""]
        where: dict = {}

        def body(key, lines):
            for idx in range(len(lines) + 1):
                for j, (ind, text) in enumerate(extra.get((key, idx), [])):
                    out.append("    " * ind + text)
                    where[("extra", key, idx, j)] = len(out)
                if idx < len(lines):
                    ind, text = lines[idx]
                    out.append("    " * ind + text)
                    where[(key, idx)] = len(out)

        for name, sig, em in self.parts["helpers"]:
            out += ["@kit.jit", f"def {name}({sig}):"]
            body(name, em.lines)
            out += ["", ""]
        consts = ", ".join(f"{d}: kit.constexpr" for d in self.dims)
        out += ["@kit.jit", f"def fuzz_kernel({', '.join(self.params())}, {consts}):"]
        em = self.parts["kernel"]
        body("kernel", em.lines + [(1, p) for p in self.parts["post"]])
        out.append("")
        return "\n".join(out), where

    # -------------------------------------------------------------- inputs
    def tensors(self) -> list[torch.Tensor]:
        rng = np.random.default_rng(self.seed)
        ts = []
        for dt, kind, _ in self.inputs:
            if self.mode == "1d":
                shape = (self.sizes["n"],)
            else:
                shape = {"full": (self.sizes["M"], self.sizes["N"]), "row": (self.sizes["N"],),
                         "col": (self.sizes["M"],)}[kind]
            if not is_float(dt):
                lo = 0 if is_unsigned(dt) else -8
                t = torch.from_numpy(rng.integers(lo, lo + 17, shape)).to(TORCH[dt])
            else:
                t = torch.from_numpy(rng.uniform(-2, 2, shape)).to(TORCH[dt])
            ts.append(t)
        return ts

    def args(self, ts, out) -> list:
        s = [self.sizes["n"]] if self.mode == "1d" else [self.sizes["M"], self.sizes["N"]]
        return [*ts, out, *s, self.alpha, self.iters, self.flag, self.n_extra]


@st.composite
def kernels(draw, depth=None) -> Kernel:
    mode = draw(st.sampled_from(["2d", "1d"]))
    if mode == "1d":
        B = draw(st.sampled_from([64, 16, 32, 128]))
        dims = {"BLOCK": B}
        sizes = {"n": 3 * B - draw(st.integers(0, 3 * B - 1))}
        full = (B,)
    else:
        BM = draw(st.sampled_from([4, 16, 1, 2, 8]))
        BN = draw(st.sampled_from([32, 4, 8, 16, 64]))
        dims = {"BM": BM, "BN": BN}
        sizes = {"M": 3 * BM - draw(st.integers(0, 3 * BM - 1)),
                 "N": BN - draw(st.integers(0, BN - 1))}
        full = (BM, BN)
    n_in = draw(st.integers(1, 3))
    inputs, leaves = [], []
    for k in range(n_in):
        dt = draw(st.sampled_from(["fp32", "fp16", "bf16", "i32", "fp32", "i8", "u8", "fp64",
                                   "i16", "i64", "u32"]))
        kind = "full" if mode == "1d" or k == 0 else draw(st.sampled_from(["full", "row",
                                                                            "col"]))
        other = draw(st.sampled_from([0.0, 1.0, 0.5, -2.0]))
        if is_unsigned(dt):
            other = abs(other)
        inputs.append((dt, kind, other))
        shape = {"full": full, "row": (1, full[-1]), "col": (full[0], 1)}[kind]
        leaves.append(Node("var", dt, shape, a={"name": f"x{k}"}, mag=8.0))
    leaves.append(Node("var", "fp32", (), a={"name": "alpha"}, mag=2.0))
    if mode == "1d":
        leaves.append(Node("var", "i32", full, a={"name": "offs"}, mag=3 * full[0]))
    else:
        leaves.append(Node("var", "i32", (full[0], 1), a={"name": "rm[:, None]"},
                           mag=3 * full[0]))
        leaves.append(Node("var", "i32", (1, full[1]), a={"name": "rn[None, :]"}, mag=full[1]))
    helpers: list = []
    gen = Gen(draw, full, leaves, helpers, itertools.count())
    d = depth if depth is not None else draw(st.sampled_from([4, 5, 3, 6, 2]))
    root = gen.tree(d, top=True)
    out_dtype = draw(st.sampled_from(["fp32", "fp32", "fp32", "fp16", "bf16", "fp64"]))
    if out_dtype in ("fp16", "bf16") and root.mag > LIMIT:  # a wrapped int: no overflow
        root = gen.clamp(root, LIMIT)
    return Kernel(mode=mode, dims=dims, inputs=inputs,
                  out_dtype=out_dtype,
                  root=root, helpers=helpers, num_warps=draw(st.sampled_from([4, 1, 2, 8])),
                  sizes=sizes, alpha=draw(st.sampled_from([0.5, 0.75, -1.25, 2.0])),
                  iters=draw(st.sampled_from([3, 0, 1, 2])),
                  flag=draw(st.sampled_from([5, 0, 1])), n_extra=draw(st.sampled_from([-2, 3])),
                  seed=draw(st.integers(0, 2 ** 16)))


# ============================================================================ reference
class Val:
    """A float64 reference value, a bound on the kernel's error, and where the kernel's
    result may differ by more (a comparison or a truncation within the error)."""

    __slots__ = ("v", "e", "u")

    def __init__(self, v, e=0.0, u=False):
        self.v, self.e, self.u = np.asarray(v, np.float64), np.asarray(e, np.float64), \
            np.asarray(u, bool)

    def shaped(self, shape) -> Val:
        return Val(*(np.broadcast_to(x, shape) for x in (self.v, self.e, self.u)))


def rnd(v, dt):
    """The rounding error of a result `v` computed in `dt`."""
    if not is_float(dt):
        return 0.0
    return UNIT[dt] * np.abs(v) + TINY[dt]


def conv(x: Val, frm, to) -> Val:
    """`x` converted from dtype `frm` (None: a literal, exact) to `to`: floats round (exact
    into a wider float), ints wrap, floats to ints truncate and saturate."""
    if frm is None or frm == to:
        return x
    if not is_float(to):
        if not is_float(frm):
            return Val(wrap(x.v, to), 0.0, x.u)
        lo, hi = irange(to)
        t = np.clip(np.trunc(x.v), lo, hi)
        jump = np.clip(np.trunc(x.v - x.e), lo, hi) != np.clip(np.trunc(x.v + x.e), lo, hi)
        return Val(t, 0.0, x.u | jump)
    if is_float(frm) and (to == "fp64" or (frm, to) in (("fp16", "fp32"), ("bf16", "fp32"))):
        return x
    return Val(x.v, x.e + rnd(x.v, to), x.u)


def iarith(sym: str, a, b, dt: str):
    """a sym b on ints of dtype `dt`, wrapping (uint64 arithmetic wraps mod 2**64)."""
    x, y = as_u64(a), as_u64(b)
    with np.errstate(over="ignore"):
        r = x + y if sym == "+" else x - y if sym == "-" else x * y
    return wrap(r, dt).reshape(np.broadcast_shapes(np.shape(a), np.shape(b)))


_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
        "==": np.equal, "!=": np.not_equal}


def loop_values(form: str, iters: int) -> list[int]:
    return {"range": range(iters), "range1": range(1, iters + 1),
            "step2": range(0, 2 * iters, 2), "static": range(3),
            "reverse": range(iters - 1, -1, -1)}[form]


class Reference:
    def __init__(self, k: Kernel, env: dict):
        self.k = k
        self.env = env

    def ev(self, n: Node) -> Val:
        if n.op == "var":
            return self.env[n.a["name"]]
        if n.op == "lit":
            return Val(float(n.a["value"]))
        return getattr(self, "e_" + n.op)(n).shaped(n.shape)

    def arg(self, n: Node, dt: str) -> Val:
        if n.is_lit:  # a constant of dtype `dt` (rounded or wrapped once, at compile time)
            return Val(round_to(n.a["value"], dt))
        return conv(self.ev(n), n.dtype, dt)

    def e_bin(self, n):
        dt = n.dtype
        a, b = (self.arg(x, dt) for x in n.kids)
        sym = n.a["sym"]
        if not is_float(dt):
            return Val(iarith(sym, a.v, b.v, dt), 0.0, a.u | b.u)
        if sym == "*":
            v = a.v * b.v
            e = np.abs(a.v) * b.e + np.abs(b.v) * a.e + a.e * b.e
        else:
            v = a.v + b.v if sym == "+" else a.v - b.v
            e = a.e + b.e
        return Val(v, e + rnd(v, dt), a.u | b.u)

    def e_div(self, n):
        dt, num, den = n.dtype, n.a["num"], n.a["den"]
        a = conv(self.arg(n.kids[0], num), num, dt)
        b = self.arg(n.kids[1], den)
        s = np.abs(b.v) + 1.0
        d = conv(Val(s, b.e + 2 * rnd(s, den), b.u), den, dt)
        v = a.v / d.v
        e = (a.e + np.abs(v) * d.e) / np.maximum(d.v - d.e, 1e-300) + 2 * rnd(v, dt)
        return Val(v, e, a.u | d.u)

    def e_minmax(self, n):
        a, b = (self.arg(x, n.dtype) for x in n.kids)
        f = np.minimum if n.a["fn"] == "minimum" else np.maximum
        return Val(f(a.v, b.v), np.maximum(a.e, b.e), a.u | b.u)

    def e_clamp(self, n):
        a = self.ev(n.kids[0])
        c = n.a["c"]
        return Val(np.clip(a.v, -c, c), a.e, a.u)

    def e_where(self, n):
        x, y = (self.arg(k, n.dtype) for k in n.kids[:2])
        cond, unstable = None, False
        if n.a.get("scond"):
            k = self.k
            cond = bool(eval(n.a["scond"], {}, {"flag": k.flag, "alpha": k.alpha,
                                                "n_extra": k.n_extra}))
        for j, sym in enumerate(n.a["cmps"]):
            ca, cb = n.kids[2 + 2 * j], n.kids[3 + 2 * j]
            dt = meet(ca, cb)
            a, b = self.arg(ca, dt), self.arg(cb, dt)
            slack = a.e + b.e
            unstable = unstable | a.u | b.u | ((np.abs(a.v - b.v) <= slack) & (slack > 0))
            c = _CMP[sym](a.v, b.v)
            cond = c if cond is None else (cond & c if n.a["join"] == "&" else cond | c)
        return Val(np.where(cond, x.v, y.v), np.where(cond, x.e, y.e),
                   unstable | np.where(cond, x.u, y.u))

    def e_unary(self, n):
        fn, md = n.a["fn"], n.dtype
        a = self.ev(n.kids[0])
        if fn == "abs":
            v = np.abs(a.v)
            return Val(v if is_float(n.dtype) else wrap(v, n.dtype), a.e, a.u)
        if fn == "neg":
            return Val(-a.v if is_float(n.dtype) else wrap(-a.v, n.dtype), a.e, a.u)
        a = conv(a, n.kids[0].dtype, md)
        if fn in ("exp", "exp2"):
            m = np.minimum(a.v, 3.0 if fn == "exp" else 4.0)
            r = np.exp(m) if fn == "exp" else np.exp2(m)
            grow = np.expm1(a.e) if fn == "exp" else np.expm1(a.e * math.log(2))
            return Val(r, r * grow + 4 * rnd(r, md), a.u)
        if fn in ("log", "log2", "sqrt"):
            s = np.abs(a.v) + 1.0
            es = a.e + rnd(s, md)
            low = np.maximum(s - es, 1e-300)
            if fn == "sqrt":
                r = np.sqrt(s)
                return Val(r, es / (2 * np.sqrt(low)) + 2 * rnd(r, md), a.u)
            r = np.log(s) if fn == "log" else np.log2(s)
            scale = 1.0 if fn == "log" else 1 / math.log(2)
            return Val(r, scale * es / low + 4 * rnd(r, md), a.u)
        if fn == "sigmoid":
            r = 1 / (1 + np.exp(-a.v))
            return Val(r, a.e / 4 + 4 * UNIT[md] + rnd(r, md), a.u)
        r = np.sin(a.v) if fn == "sin" else np.cos(a.v)
        # the GPU's sin.approx.f32 / cos.approx.f32: absolute error <= 2^-20.5 for |x| <=
        # 100 pi (PTX ISA), more than 4 ulp of a result near a zero of sin
        return Val(r, a.e + max(4 * UNIT[md], 2.0 ** -20.5) + TINY[md], a.u)

    def e_cast(self, n):
        return conv(self.ev(n.kids[0]), n.kids[0].dtype, n.dtype)

    def e_reduce(self, n):
        x = n.kids[0]
        a = self.ev(x).shaped(x.shape)
        fn, axis = n.a["fn"], n.a["axis"]
        kw = {"axis": axis, "keepdims": True}
        u = a.u.any(**kw)
        if fn == "sum":
            v = a.v.sum(**kw)
            e = a.e.sum(**kw)
            if is_float(x.dtype):
                e = e + x.shape[axis] * UNIT[n.dtype] * np.abs(a.v).sum(**kw) + TINY[n.dtype]
            r = Val(v, e, u)
        elif fn in ("max", "min"):
            v = a.v.max(**kw) if fn == "max" else a.v.min(**kw)
            r = Val(v, a.e.max(**kw), u)
        else:
            v = a.v if fn == "argmax" else -a.v
            idx = np.argmax(v, **kw)
            best = np.take_along_axis(v, idx, axis)
            ebest = np.take_along_axis(a.e, idx, axis)
            near = (best - v) <= (a.e + ebest)
            tied = near.sum(**kw) > 1
            fuzzy = (np.where(near, a.e, 0.0).max(**kw) + ebest) > 0
            r = Val(idx.astype(np.float64), 0.0, u | (tied & fuzzy))
        r = r.shaped(r.v.shape)
        return Val(r.v.reshape(n.shape), r.e.reshape(n.shape), r.u.reshape(n.shape))

    def e_loop(self, n):
        c = n.kids[0]
        kind = n.a["kind"]
        acc = Val(np.full(n.shape, 0.0 if kind == "sum" else -1024.0))
        for i in loop_values(n.a["form"], self.k.iters):
            self.env[n.a["i"].a["name"]] = Val(float(i))
            x = self.ev(c)
            if kind == "sum":
                t = Val(x.v * i, x.e * abs(i), x.u)
                t = conv(Val(t.v, t.e + rnd(t.v, c.dtype), t.u), c.dtype, "fp32")
                v = acc.v + t.v
                acc = Val(v, acc.e + t.e + rnd(v, "fp32"), acc.u | t.u)
            else:
                t = Val(x.v - i, x.e, x.u)
                t = conv(Val(t.v, t.e + rnd(t.v, c.dtype), t.u), c.dtype, "fp32")
                acc = Val(np.maximum(acc.v, t.v), np.maximum(acc.e, t.e), acc.u | t.u)
        return acc

    def e_if(self, n):
        names = {"flag": self.k.flag, "n_extra": self.k.n_extra}
        names.update({k: int(v.v) for k, v in self.env.items() if re.fullmatch(r"i\d+", k)})
        taken = eval(n.a["cond"], {}, names)
        k = n.kids[0] if taken else n.kids[1]
        return self.arg(k, "fp32")

    def e_scan(self, n):
        x = n.kids[0]
        a = self.ev(x).shaped(x.shape)
        axis, dt = n.a["axis"], n.dtype
        a = conv(a, x.dtype, dt).shaped(x.shape)
        f = (lambda z: np.flip(z, axis)) if n.a["rev"] else (lambda z: z)
        cnt = np.cumsum(np.ones_like(a.v), axis)
        u = np.broadcast_to(a.u.any(axis=axis, keepdims=True), a.u.shape)
        e = f(np.cumsum(f(a.e), axis))
        if n.a["fn"] == "cumsum":
            v = f(np.cumsum(f(a.v), axis))
            e = e + f(cnt) * (UNIT[dt] * f(np.cumsum(f(np.abs(a.v)), axis)) + TINY[dt])
            v = v if is_float(dt) else wrap(v, dt)
        else:  # |x| <= 1: a change of one factor moves the product by at most that change
            v = f(np.cumprod(f(a.v), axis))
            e = e + f(cnt) * (UNIT[dt] + TINY[dt])
        return Val(v, e, u)

    def e_shape(self, n):
        a = self.ev(n.kids[0]).shaped(n.shape)
        form, full = n.a["form"], n.a["full"]

        def f(z):
            if form == "flip":
                return np.flip(z, n.a["dim"])
            if form in ("trans", "permute"):
                return z.reshape(full[1], full[0]).T
            if form == "ravel":
                return z.reshape(-1)[::-1].reshape(full)
            return z.reshape(2, full[0] // 2).T.reshape(full)
        return Val(f(a.v), f(a.e), f(a.u))

    def e_join(self, n):
        k = n.kids[n.a["which"]]
        return self.arg(k, n.dtype)

    def e_libm(self, n):
        md, fn = n.dtype, n.a["fn"]
        a = self.arg(n.kids[0], md)
        if fn == "fma":
            b, c = (self.arg(k, md) for k in n.kids[1:])
            v = a.v * b.v + c.v
            e = np.abs(a.v) * b.e + np.abs(b.v) * a.e + a.e * b.e + c.e
            return Val(v, e + rnd(v, md), a.u | b.u | c.u)
        if fn == "tanh":
            v = np.tanh(a.v)
            return Val(v, a.e + 4 * rnd(v, md) + 2 * UNIT[md], a.u)
        if fn == "erf":
            v = np.vectorize(math.erf, otypes=[np.float64])(a.v)
            return Val(v, 1.2 * a.e + 4 * rnd(v, md) + 2 * UNIT[md], a.u)
        s = np.abs(a.v)
        v = np.log1p(s)
        return Val(v, a.e / (1 + np.maximum(s - a.e, 0)) + 4 * rnd(v, md) + TINY[md], a.u)

    def e_ihash(self, n):
        a = self.arg(n.kids[0], n.dtype)
        m = iarith("*", a.v, round_to(n.a["m"], n.dtype), n.dtype)
        return Val(iarith("+", m, n.a["k"], n.dtype), 0.0, a.u)

    def e_idiv(self, n):
        dt = n.dtype
        a = self.arg(n.kids[0], dt)
        b = self.ev(n.kids[1])
        bi = np.asarray(b.v).astype(np.int64)
        d = conv(Val((bi & 7) + 1.0), n.kids[1].dtype, dt)
        q = np.trunc(a.v / d.v)
        v = q if n.a["sym"] == "//" else a.v - q * d.v
        return Val(wrap(v, dt), 0.0, a.u | b.u)

    def e_umulhi(self, n):
        a, b = (self.arg(k, n.dtype) for k in n.kids)
        x, y = as_u64(wrap(a.v, "u32")), as_u64(wrap(b.v, "u32"))
        hi = (x * y) >> np.uint64(32)
        shape = np.broadcast_shapes(np.shape(a.v), np.shape(b.v))
        return Val(wrap(hi, n.dtype).reshape(shape), 0.0, a.u | b.u)

    def e_kclamp(self, n):
        a = self.ev(n.kids[0])
        lo, hi = round_to(n.a["lo"], n.dtype), round_to(n.a["hi"], n.dtype)
        return Val(np.clip(a.v, lo, hi), a.e, a.u)

    def e_call(self, n):
        name = n.a["name"]
        _, params, body, _, _ = next(h for h in self.k.helpers if h[0] == name)
        vals = [self.ev(x) for x in n.kids]
        saved = self.env
        self.env = {p.a["name"]: v for p, v in zip(params, vals)}
        try:
            return self.ev(body)
        finally:
            self.env = saved


def reference(k: Kernel, ts: list[torch.Tensor]):
    """(value, error bound, unstable) of every output element, in float64."""
    xs = [t.double().numpy() for t in ts]
    if k.mode == "1d":
        n, B = k.sizes["n"], k.dims["BLOCK"]
        out_shape = (n,)
    else:
        M, N, BM, BN = k.sizes["M"], k.sizes["N"], k.dims["BM"], k.dims["BN"]
        out_shape = (M, N)
    V, E, U = (np.full(out_shape, np.nan), np.full(out_shape, np.nan),
               np.ones(out_shape, bool))
    for p in range(k.grid):
        env = {"alpha": Val(k.alpha)}
        if k.mode == "1d":
            offs = p * B + np.arange(B)
            mask = offs < n
            env["offs"] = Val(offs)
            for j, (dt, _, other) in enumerate(k.inputs):
                o = int(other) if not is_float(dt) else other
                env[f"x{j}"] = Val(np.where(mask, xs[j][np.minimum(offs, n - 1)], o))
        else:
            rm, rn = p * BM + np.arange(BM), np.arange(BN)
            cm, cn = np.minimum(rm, M - 1), np.minimum(rn, N - 1)
            mask = (rm < M)[:, None] & (rn < N)[None, :]
            env["rm[:, None]"] = Val(rm[:, None])
            env["rn[None, :]"] = Val(rn[None, :])
            for j, (dt, kind, other) in enumerate(k.inputs):
                o = int(other) if not is_float(dt) else other
                if kind == "full":
                    x = np.where(mask, xs[j][np.ix_(cm, cn)], o)
                elif kind == "row":
                    x = np.where(rn < N, xs[j][cn], o)[None, :]
                else:
                    x = np.where(rm < M, xs[j][cm], o)[:, None]
                env[f"x{j}"] = Val(x)
        r = Reference(k, env)
        res = conv(r.ev(k.root), k.root.dtype, k.out_dtype).shaped(k.full)
        if k.mode == "1d":
            sel = offs[mask]
            V[sel], E[sel], U[sel] = res.v[mask], res.e[mask], res.u[mask]
        else:
            rows = rm[rm < M]
            V[rows], E[rows], U[rows] = (x[: len(rows), :N] for x in (res.v, res.e, res.u))
    return V, E, U


# ============================================================================ running
_files = itertools.count()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def load_kernel(source: str, workdir) -> tuple:
    """Write `source` to a fresh file (fresh: linecache and inspect key on the name) and
    import it; returns (the @kit.jit kernel, the file's path)."""
    path = workdir / f"fuzz_{next(_files)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"_kitjit_fuzz_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.fuzz_kernel, str(path)


def spec_of(a) -> tuple:
    """The specialization a launch gives an argument (what JITFunction.compile takes)."""
    if isinstance(a, torch.Tensor):
        name = {v: k for k, v in TORCH.items()}.get(a.dtype, str(a.dtype))
        return (f"*{name}", 16 if a.data_ptr() % 16 == 0 else 1)
    if isinstance(a, bool):
        return ("i1", 1)
    if isinstance(a, int):
        return ("const", 1) if a == 1 else ("i32", 16 if a % 16 == 0 else 1)
    if isinstance(a, float):
        return ("fp32", 1)
    raise TypeError(type(a))


def launch(jf, k: Kernel, args, **extra):
    return jf[(k.grid,)](*args, **k.constexprs(), num_warps=k.num_warps, **extra)


def compile_sm90(jf, k: Kernel, args):
    consts = tuple(k.constexprs()[c] for c in jf.constexprs)
    return jf.compile([spec_of(a) for a in args], consts, k.num_warps, "sm_90a")


def fresh_output(k: Kernel) -> torch.Tensor:
    shape = (k.sizes["n"],) if k.mode == "1d" else (k.sizes["M"], k.sizes["N"])
    return torch.full(shape, float("nan"), dtype=TORCH[k.out_dtype])


def no_internal_errors(fn, source: str):
    """Run `fn`; an InternalCompilerError (a crash in kitjit) fails with the kernel's source."""
    try:
        return fn()
    except InternalCompilerError as e:
        raise AssertionError(f"internal compiler error on a generated kernel:\n{source}\n{e}"
                             ) from e


def check_values(k: Kernel, out: torch.Tensor, ts, source: str) -> int:
    ref, err, unstable = reference(k, ts)
    got = out.double().numpy()
    assert np.isfinite(got).all(), f"non-finite or unwritten outputs:\n{got}\n{source}"
    ok = ~unstable
    bad = ok & ~(np.abs(got - ref) <= 2 * err + 1e-300)
    if bad.any():
        i = tuple(int(x) for x in np.argwhere(bad)[0])
        raise AssertionError(f"{int(bad.sum())} of {got.size} outputs differ from the float64 "
                             f"reference, first at {i}: got {got[i]!r}, want {ref[i]!r} "
                             f"(error bound {err[i]:.3g})\n{source}")
    return int(ok.sum())


def fuzz(max_examples: int) -> settings:
    """Derandomized (CI sees the same kernels on every run), no deadline (the first compile
    in a process is slower), no example database."""
    return settings(max_examples=max_examples, deadline=None, derandomize=True,
                    database=None, print_blob=False,
                    phases=[Phase.explicit, Phase.generate, Phase.shrink],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture,
                                           HealthCheck.filter_too_much])


# ============================================================================ valid kernels
def run_valid(k: Kernel, workdir):
    k.build()
    source, _ = k.render()
    note(source)
    jf, _ = load_kernel(source, workdir)
    ts = k.tensors()
    out = fresh_output(k)
    args = k.args(ts, out)
    no_internal_errors(lambda: launch(jf, k, args), source)
    stable = check_values(k, out, ts, source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a spill warning is not a failure here
        ck = no_internal_errors(lambda: compile_sm90(jf, k, args), source)
    assert ".target sm_90a" in ck.asm["ptx"]
    assert ".entry fuzz_kernel(" in ck.asm["ptx"]
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    return stable


@fuzz(300)
@given(k=kernels())
def test_valid_kernels_match_the_reference_and_compile_for_sm90(k, workdir):
    run_valid(k, workdir)


# ============================================================================ broken kernels
NOT_POW2 = st.integers(3, 300).filter(lambda x: x & (x - 1) != 0)


def mistakes(draw, k: Kernel, body: str, scope: list) -> tuple[str, list, set]:
    """One known mistake to insert at a place with `scope` in view: (its name, the lines
    (relative indent, text), the indices of the lines the error may point at).

    Mistakes that crash the frontend today are left out here and kept as reproducers at the
    end of this file (a non-number where a constant goes, kit.cdiv(x, 0) on constants,
    static_range(0, n, 0), comparisons of unrelated compile-time objects, ...)."""
    pick = lambda xs: draw(st.sampled_from(xs))  # noqa: E731
    in_kernel = body == "kernel"
    values = [v for v in scope if v[1] != "i1"]
    tiles = [v for v in values if v[2] != ()]
    floats = [v for v in values if v[1] in FLOATS]
    v = pick(values)[0]
    t = pick(tiles)[0] if tiles else "kit.arange(0, 8)"
    f = pick(floats)[0] if floats else "kit.arange(0, 8).to(kit.float32)"
    rt = pick(["n_extra", "alpha", "flag"]) if in_kernel else pick(values)[0]
    bad = f"bad{draw(st.integers(0, 9))}"
    npow = draw(NOT_POW2)
    one = lambda *lines: ([(0, x) for x in lines], {0})  # noqa: E731
    kinds = {
        "undefined": lambda: one(pick([f"{bad} = {v} + nope_{npow}",
                                       f"{bad} = kit.nope_{npow}({v})",
                                       f"{bad} = nope_{npow}({v})"])),
        "not-pow2": lambda: one(pick([f"{bad} = kit.arange(0, {npow})",
                                      f"{bad} = kit.arange({npow}, {2 * npow})",
                                      f"{bad} = kit.zeros(({npow},), kit.float32)",
                                      f"{bad} = kit.full((2, {npow}), 1.0, kit.float16)",
                                      f"{bad} = kit.broadcast_to({v}, ({npow}, 4))"])),
        "broadcast": lambda: broadcast(),
        "constexpr": lambda: constexpr(),
        "axis": lambda: axis(),
        "loop-type": lambda: loop_type(),
        "if-tile": lambda: ([(0, f"if {t} > 0:"), (1, f"{bad} = 1")], {0}),
        "syntax": lambda: syntax(),
        "misuse": lambda: misuse(),
        "new-ops": lambda: new_ops(),
    }
    if in_kernel:
        kinds["pointer"] = lambda: one(pick([f"{bad} = kit.load(X0 + 1.5)",
                                             f"{bad} = kit.load(X0 + {f})",
                                             f"{bad} = kit.load(X0 + Out)",
                                             f"{bad} = kit.load(Out - X0)",
                                             f"{bad} = -X0", f"{bad} = X0 < Out",
                                             f"{bad} = kit.exp(X0)",
                                             f"{bad} = kit.where(mask, X0, 1.0)",
                                             f"{bad} = kit.sum(X0 + {t}, axis=0)",
                                             f"{bad} = {v}.to(X0.dtype)",
                                             "kit.store(Out, X0)",
                                             f"{bad} = kit.load({v})",
                                             f"kit.store({v}, 1.0)"]))
        kinds["if-type"] = lambda: if_type()
        if k.helpers:
            kinds["call"] = lambda: call()
    else:
        kinds["recursion"] = lambda: one(f"{bad} = {body}({', '.join(helper_args())})")

    def broadcast():
        ok = [x for x in tiles if x[2][-1] > 1]
        if not ok:
            return one(f"{bad} = kit.arange(0, 16)[:, None] + kit.arange(0, 32)[None, :] + "
                       f"kit.arange(0, 8)")
        name, _, shape = pick(ok)
        s = pick([x for x in (2, 4, 8, 16, 32, 64, 128) if x != shape[-1]])
        return one(pick([f"{bad} = {name} + kit.arange(0, {s})",
                         f"{bad} = kit.where({name} > 0, {name}, kit.arange(0, {s}))",
                         f"{bad} = kit.maximum(kit.arange(0, {s}), {name})"]))

    def constexpr():  # in a helper, `rt` is a parameter: a run-time value too
        return one(pick([f"{bad} = kit.arange(0, {rt})", f"{bad} = kit.zeros(({rt},), "
                         "kit.float32)", f"{bad} = kit.full(({rt}, 2), 0.0, kit.float32)",
                         f"{bad} = kit.sum({t}, axis={rt})", f"{bad} = kit.program_id({rt})",
                         f"{bad} = kit.expand_dims({t}, {rt})",
                         f"{bad} = kit.max({t}, axis=0, keep_dims={rt})"])) \
            if draw(st.integers(0, 5)) else \
            ([(0, f"for {bad} in kit.static_range({rt}):"), (1, "pass")], {0})

    def axis():
        name, _, shape = pick(tiles) if tiles else ("kit.arange(0, 8)", "i32", (8,))
        r = len(shape)
        a = pick([r, r + 1, -r - 1, 5, -7])
        fn = pick(["sum", "max", "min", "argmax", "argmin"])
        return one(pick([f"{bad} = kit.{fn}({name}, axis={a})",
                         f"{bad} = {name}.{fn}(axis={a})",
                         f"{bad} = kit.expand_dims({name}, {r + 2})",
                         f"{bad} = {name}[:, :, :, None]"]))

    def loop_type():
        rng = "range(n_extra)" if in_kernel else "range(3)"
        form = draw(st.integers(0, 2))
        if form == 0:  # starts as a Python int, becomes a tile or a float
            init, upd = "0", pick([f"{bad} + {f}", f"{bad} + 0.5", f"{f} * 2.0"])
        elif form == 1:  # fp16 in, fp32 out
            init, upd = f"kit.zeros({k.full!r}, kit.float16)", f"{bad} + {f}.to(kit.float32)"
        else:  # another shape
            wide = [x[0] for x in floats if math.prod(x[2]) > 1] or ["kit.full((4,), 2.0, "
                                                                     "kit.float32)"]
            init, upd = "kit.zeros((1, 1, 1), kit.float32)", f"{bad} + {pick(wide)}"
        aug = draw(st.booleans()) and upd.startswith(f"{bad} + ")
        last = f"{bad} += {upd[len(bad) + 3:]}" if aug else f"{bad} = {upd}"
        return [(0, f"{bad} = {init}"), (0, f"for i_{bad} in {rng}:"), (1, last)], {2}

    def if_type():
        name, dt, _ = pick(values)
        other = pick([d for d in ("fp32", "fp16", "i32") if d != dt])
        alt = pick([f"{name}.to({KIT[other]})"] + ([f"{name}[None, :]"] if dt == "i32" else []))
        return ([(0, "if n_extra > 0:"), (1, f"{bad} = {name}"), (0, "else:"),
                 (1, f"{bad} = {alt}")], {1, 3})

    def syntax():
        forms = [
            ([(0, "while n_extra < 0: break")] if in_kernel else
             [(0, f"while {v} < 0: continue")]),
            [(0, f"{bad} = lambda q: q + 1")],
            [(0, "try:"), (1, f"{bad} = {v} + 1"), (0, "except Exception:"), (1, "pass")],
            [(0, "with open('f') as fh:"), (1, "pass")],
            [(0, f"del {v}")], [(0, "import math")], [(0, "from math import sqrt")],
            [(0, f"global nope_{npow}")], [(0, f"{bad} = [q for q in range(3)]")],
            [(0, f"{bad} = {{1: {v}}}")], [(0, f"{bad} = {{1, 2}}")],
            [(0, f"{bad} = {v} ** 2")], [(0, f"{t}[0] = 1.0")],
            [(0, "raise ValueError('no')")], [(0, f"def {bad}(q):"), (1, "return q")],
            [(0, f"class {bad.upper()}:"), (1, "pass")],
            [(0, f"{bad} = (q := {v})")], [(0, f"{bad} = input({v})")],
            [(0, f"assert {v} > 0")], [(0, f"{bad} = {t}[0]")], [(0, f"{bad} = {t}[1:2]")],
            [(0, f"{bad} = {v}.nope")],
            [(0, f"for {bad} in [1, 2]:"), (1, "pass")],
            [(0, f"for {bad} in range(3):"), (1, "pass"), (0, "else:"), (1, "pass")],
            [(0, f"for {bad}, q in range(3):"), (1, "pass")],
            [(0, f"for {bad} in range({t}):"), (1, "pass")],
            [(0, f"for {bad} in range(0, 4, 0):"), (1, "pass")],
            [(0, f"{bad}, q = {t}")], [(0, f"{bad} = {v} is {v}")], [(0, f"{bad} = 3 in {t}")],
            [(0, f"{bad} = (1, 2, 3)[{rt if in_kernel else v}]")],
            [(0, f"{bad} = kit.maximum(*{t})")],
            [(0, f"{bad} = kit.maximum(**{{'x': {v}, 'y': {v}}})")],
        ]
        return pick(forms), {0}

    def new_ops():  # scans, shape ops, atomics, umulhi, clamp, libdevice
        name, _, shape = pick(tiles) if tiles else ("kit.arange(0, 8)", "i32", (8,))
        r = len(shape)
        return one(pick([
            f"{bad} = kit.cumsum({name}, axis={r})", f"{bad} = kit.cumprod({name}, axis={-r - 1})",
            f"{bad} = kit.cumsum({name}, axis={rt})", f"{bad} = kit.reshape({name}, ({npow},))",
            f"{bad} = kit.flip({name}, {r})", f"{bad} = kit.split({name})",
            f"{bad} = kit.atomic_add({v}, 1.0)", f"{bad} = kit.umulhi({f}, {f})",
            f"{bad} = kit.umulhi(kit.arange(0, 8).to(kit.int8), 3)",
            f"{bad} = kit.clamp(kit.arange(0, 8), 0, 1)", f"{bad} = kit.math.tanh({v}, {v})",
            f"{bad} = kit.join({f}, kit.arange(0, 8) > 2)"]))

    def misuse():
        return one(pick([
            f"{bad} = {t} @ {t}", f"{bad} = kit.dot({t}, {t})", f"{bad} = ~{f}",
            f"{bad} = {f} & 1", f"{bad} = {f} << 2", f"{bad} = kit.exp({v}, {v})",
            f"{bad} = kit.sum({t}, axis=0, bogus=1)", f"{bad} = kit.where({v})",
            f"{bad} = {v}.to(3)", f"{bad} = {v}.to(kit.float8)", f"{bad} = {v}.to()",
            f"{bad} = 1 // 0",
            f"{bad} = kit.arange(0, 16.0)", f"{bad} = kit.program_id(3)",
            f"kit.static_assert(False, 'fuzz: {bad}')", f"{bad} = 's' + {v}",
            f"{bad} = {v} + (1, 2)", f"{bad} = kit.full((2,), 2 ** 70, kit.int32)",
            f"{bad} = min({v}, {v}, {v})", f"{bad} = len({t})",
            f"{bad} = kit.zeros((4, 4), 3)", f"{bad} = kit.full((4,), {v}, kit.float32)"
            if v in [x[0] for x in tiles] else f"{bad} = kit.full((4,), {t}, kit.float32)",
            f"{bad} = kit.load({v}, mask='yes')", f"{bad} = kit.sum({v}, 0, False, 3)",
        ]))

    def helper_args():
        _, params, *_ = next(h for h in k.helpers if h[0] == body)
        return [p.a["name"] for p in params] + (["C"] if next(
            h for h in k.helpers if h[0] == body)[3] else [])

    def call():
        name, params, _, has_c, _ = pick(k.helpers)
        n = len(params) + has_c
        return one(pick([f"{bad} = {name}()", f"{bad} = {name}({', '.join([v] * (n + 2))})",
                         f"{bad} = {name}({', '.join([v] * n)}, zz={v})"]))

    kind = pick(sorted(kinds))
    lines, expect = kinds[kind]()
    return kind, lines, expect


@dataclass
class Broken:
    k: Kernel
    body: str          # "kernel" or a helper's name
    idx: int           # the mistake goes before this line of that body
    kind: str
    lines: list
    expect: set

    def render(self) -> tuple[str, set, int | None]:
        """The source, the file lines the error may point at, and (for a mistake in a
        helper) the line of the kernel that calls it."""
        extra = {(self.body, self.idx): [(ind + 1, text) for ind, text in self.lines]}
        src, where = self.k.render(extra)
        lines = {where[("extra", self.body, self.idx, j)] for j in self.expect}
        call = None
        if self.body != "kernel":
            call = where[("kernel", self.k.parts["kernel"].calls[self.body])]
        return src, lines, call


@st.composite
def broken_kernels(draw) -> Broken:
    k = draw(kernels(depth=draw(st.sampled_from([2, 3, 1]))))
    k.flag = 5  # a run-time `if`: both branches compile, so every helper call is reached
    k.build()
    points = k.insertion_points()
    # helpers the kernel calls (a helper whose call was folded away is never compiled)
    in_helper = [p for p in points if p[0] != "kernel" and
                 p[0] in k.parts["kernel"].calls]
    body, idx, scope = draw(st.sampled_from(in_helper)) if in_helper and draw(
        st.booleans()) else draw(st.sampled_from([p for p in points if p[0] == "kernel"]))
    kind, lines, expect = mistakes(draw, k, body, scope)
    return Broken(k, body, idx, kind, lines, expect)


def check_compile_error(e: BaseException, path: str, lines: set, call: int | None,
                        source: str) -> None:
    if isinstance(e, InternalCompilerError):
        raise AssertionError(f"internal compiler error on a broken kernel (expected a "
                             f"CompileError):\n{source}\n{e}") from e
    if not isinstance(e, CompileError):
        raise AssertionError(f"{type(e).__name__} on a broken kernel (expected a "
                             f"CompileError):\n{source}\n{e}") from e
    msg = str(e)
    assert e.loc is not None and e.loc.file == path, f"no location in the file:\n{msg}"
    assert e.loc.line in lines, f"the error points at line {e.loc.line}, the mistake is on " \
                                f"{sorted(lines)}:\n{msg}\n{source}"
    head = f"{path}:{e.loc.line}:{e.loc.col + 1}: error: "
    assert msg.startswith(head), f"{head!r} does not start:\n{msg}"
    text = source.splitlines()[e.loc.line - 1].strip()
    got = msg.splitlines()
    assert got[1].strip() == text and set(got[2].strip()) == {"^"}, \
        f"no quoted source line with a caret:\n{msg}"
    if call is not None:
        assert f"{path}:{call}:" in msg and "note: in the call of '" in msg, \
            f"the call site (line {call}) is not named:\n{msg}"


def run_broken(b: Broken, workdir) -> str:
    source, lines, call = b.render()
    note(source)
    jf, path = load_kernel(source, workdir)
    k = b.k
    ts = k.tensors()
    out = fresh_output(k)
    args = k.args(ts, out)
    msgs = []
    for run in (lambda: launch(jf, k, args), lambda: compile_sm90(jf, k, args)):
        try:
            run()
        except BaseException as e:  # noqa: BLE001 - anything but a CompileError fails
            check_compile_error(e, path, lines, call, source)
            msgs.append(re.sub(r"%[\w.]+", "%", str(e)))
        else:
            raise AssertionError(f"no error for a broken kernel ({b.kind}):\n{source}")
    assert msgs[0] == msgs[1], f"the interpreter and the sm_90a compile disagree:\n{msgs}"
    assert torch.isnan(out.float()).all(), "the kernel ran"
    return msgs[0]


@fuzz(400)
@given(b=broken_kernels())
def test_broken_kernels_raise_a_located_compile_error(b, workdir):
    run_broken(b, workdir)


# ============================================================================ launch mistakes
LAUNCH_MISTAKES = {
    # name: (how the call changes, the exception, a regex its message matches)
    "missing-argument": (lambda a, kw: (a[:-1], kw), TypeError, r"missing required argument"),
    "extra-argument": (lambda a, kw: (a + [3], kw), TypeError, r"argument"),
    "unknown-keyword": (lambda a, kw: (a, {**kw, "BLOKC": 4}), TypeError, r"'BLOKC'"),
    "missing-constexpr": (lambda a, kw: (a, {}), TypeError, r"missing required argument.*"
                          r"keyword"),
    "list-argument": (lambda a, kw: (a[:-1] + [[3]], kw), TypeError, r"'n_extra'.*list"),
    "string-argument": (lambda a, kw: (a[:-2] + ["5", a[-1]], kw), TypeError, r"'flag'.*str"),
    "complex-tensor": (lambda a, kw: ([a[0].to(torch.complex64)] + a[1:], kw), TypeError,
                       r"'X0'.*complex64"),
    "int-out-of-range": (lambda a, kw: (a[:-1] + [2 ** 70], kw), ValueError, r"'n_extra'"),
    "negative-grid": (lambda a, kw: (a, {**kw, "_grid": (-1,)}), ValueError, r"negative"),
    "4-d-grid": (lambda a, kw: (a, {**kw, "_grid": (1, 1, 1, 1)}), ValueError, r"4 dims"),
    "grid-over-limit": (lambda a, kw: (a, {**kw, "_grid": (1, 70000)}), ValueError,
                        r"hardware limit"),
    "grid-of-floats": (lambda a, kw: (a, {**kw, "_grid": (1.5,)}), TypeError, r"grid"),
    "num-warps-3": (lambda a, kw: (a, {**kw, "num_warps": 3}), ValueError, r"num_warps"),
    "num-warps-64": (lambda a, kw: (a, {**kw, "num_warps": 64}), ValueError, r"num_warps"),
}


@fuzz(40)
@given(k=kernels(depth=2), mistake=st.sampled_from(sorted(LAUNCH_MISTAKES)))
def test_launch_mistakes_raise_before_anything_runs(k, mistake, workdir):
    """Wrong arguments, grids or launch options on a valid kernel: TypeError / ValueError
    naming the kernel or the parameter, and nothing runs (the output stays NaN)."""
    k.build()
    source, _ = k.render()
    jf, _ = load_kernel(source, workdir)
    ts = k.tensors()
    out = fresh_output(k)
    change, exc, pattern = LAUNCH_MISTAKES[mistake]
    args, kw = change(k.args(ts, out), {**k.constexprs(), "num_warps": k.num_warps})
    grid = kw.pop("_grid", (k.grid,))
    with pytest.raises(exc) as ei:
        jf[grid](*args, **kw)
    msg = str(ei.value)
    assert not isinstance(ei.value, InternalCompilerError), msg
    assert re.search(pattern, msg), f"{pattern!r} not in {msg!r}"
    assert "fuzz_kernel" in msg or re.search(r"argument '\w+'", msg), \
        f"names neither the kernel nor the parameter: {msg}"
    assert torch.isnan(out.float()).all(), "the kernel ran (partly) before the error"


# ============================================================================ crashes found
# Minimal reproducers of internal compiler errors the fuzzer (and its probes) found, fixed
# the same day; they stay as regression tests.
def _x16(n=16):
    return torch.randn(n).to(torch.float16)


@kit.jit
def fp16_big_constant_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    x = kit.load(X + offs)
    kit.store(Out + offs, kit.where(offs < n, x, -1e9))  # -1e9 in fp16 is -inf


@kit.jit
def bf16_big_constant_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, kit.full((16,), 1e300, kit.bfloat16))


@pytest.mark.parametrize("jf,dt", [(fp16_big_constant_kernel, "fp16"),
                                   (bf16_big_constant_kernel, "bf16")], ids=["fp16", "bf16"])
def test_repro_16bit_constant_out_of_range_compiles_for_sm90(jf, dt):
    ck = jf.compile([(f"*{dt}", 16), (f"*{dt}", 16), ("i32", 1)], (), 4, "sm_90a")
    assert ".target sm_90a" in ck.asm["ptx"]


@kit.jit
def _helper_with_dtype_default(x, dtype=kit.float32):
    return x.to(dtype)


@kit.jit
def helper_default_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, _helper_with_dtype_default(kit.load(X + offs)))


def test_repro_helper_with_non_literal_default():
    x, out = _x16(), torch.full((16,), float("nan"))
    helper_default_kernel[(1,)](x, out, 16)
    assert torch.equal(out, x.float())


@kit.jit
def full_of_string_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, kit.full((16,), "x", kit.float32))


@kit.jit
def full_of_none_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, kit.full((16,), None, kit.float32))


@kit.jit
def store_tuple_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, (1, 2))


@kit.jit
def load_other_string_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, kit.load(X + offs, mask=offs < n, other="no"))


@kit.jit
def cast_string_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, kit.cast("abc", kit.float32) + offs)


@kit.jit
def static_range_step0_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    for _ in kit.static_range(0, 10, 0):
        pass
    kit.store(Out + offs, 1.0)


@kit.jit
def static_range_float_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    for _ in kit.static_range(2.5):
        pass
    kit.store(Out + offs, 1.0)


@kit.jit
def cdiv_by_zero_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, offs + kit.cdiv(4, 0))


@kit.jit
def minimum_of_string_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, offs + kit.minimum("a", 3))


@kit.jit
def dtype_compare_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, offs + (offs.dtype < 3))


@kit.jit
def star_of_int_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, kit.maximum(*3))


@kit.jit
def huge_int_literal_kernel(X, Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, offs + 10 ** 5000)


@pytest.mark.parametrize("jf,line_has", [
    (full_of_string_kernel, 'kit.full((16,), "x"'),
    (full_of_none_kernel, "kit.full((16,), None"),
    (store_tuple_kernel, "(1, 2))"),
    (load_other_string_kernel, 'other="no"'),
    (cast_string_kernel, 'kit.cast("abc"'),
    (static_range_step0_kernel, "static_range(0, 10, 0)"),
    (static_range_float_kernel, "static_range(2.5)"),
    (cdiv_by_zero_kernel, "kit.cdiv(4, 0)"),
    (minimum_of_string_kernel, 'kit.minimum("a", 3)'),
    (dtype_compare_kernel, "offs.dtype < 3"),
    (star_of_int_kernel, "kit.maximum(*3)"),
    (huge_int_literal_kernel, "10 ** 5000"),
], ids=["full-str", "full-None", "store-tuple", "load-other-str", "cast-str",
        "static_range-step-0", "static_range-float", "cdiv-by-0", "minimum-str",
        "dtype<int", "star-int", "huge-int"])
def test_repro_frontend_crashes_on_mistakes(jf, line_has):
    import inspect

    with pytest.raises(CompileError) as ei:
        jf[(1,)](torch.randn(16), torch.zeros(16), 16)
    lines, first = inspect.getsourcelines(jf.fn)
    line = first + next(i for i, t in enumerate(lines) if line_has in t)
    assert ei.value.loc is not None and ei.value.loc.line == line, str(ei.value)


@kit.jit
def huge_tile_kernel(X, Out, n):
    offs = kit.arange(0, 2 ** 40)
    kit.store(Out + offs, 1.0, mask=offs < n)


def test_repro_huge_tile_is_a_compile_error():
    with pytest.raises(CompileError, match="arange"):
        huge_tile_kernel.build_ir([("*fp32", 16), ("*fp32", 16), ("i32", 1)], (), 4)


# Found by the widened generators (join/split, kit.clamp, reshape/trans; issue 19 item 2).
@kit.jit
def clamp_after_split_kernel(X0, Out, M, N, flag, BM: kit.constexpr, BN: kit.constexpr):
    rm = kit.arange(0, BM)
    rn = kit.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x0 = kit.load(X0 + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    if flag > 0:
        v = kit.broadcast_to(kit.clamp(rm[:, None].to(kit.float32) + 0.5, -1.0, 1.0), (BM, BN))
    else:
        v, q = kit.split(kit.join(x0 + 0.5, x0))
    kit.store(Out + rm[:, None] * N + rn[None, :], v, mask=mask)


def test_repro_clamp_takes_the_layout_of_a_split_in_the_other_branch():
    """The libm `math` op (kit.clamp's fmin/fmax) was left out of the layout pass's
    elementwise groups: its operands kept a 1-register layout while its result took the
    split's 2-register one, an internal error in the sm_90a lowering."""
    ck = clamp_after_split_kernel.compile(
        [("*fp32", 16), ("*fp32", 16), ("i32", 1), ("i32", 16), ("i32", 1)], (4, 32), 1,
        "sm_90a")
    assert ".target sm_90a" in ck.asm["ptx"]


def test_repro_compile_error_add_note_without_a_location():
    """hypothesis (and pytest) call `exc.add_note(text)` (PEP 678) on a failing test's
    exception: CompileError's add_note required a loc, so a TypeError hid the error."""
    e = CompileError("boom")
    e.add_note("a note")
    assert e.__notes__ == ["a note"] and str(e) == "error: boom"


@kit.jit
def trans_of_split_masked_kernel(X0, Out, M, N, BM: kit.constexpr, BN: kit.constexpr):
    rm = kit.arange(0, BM)
    rn = kit.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x0 = kit.load(X0 + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    a, b = kit.split(kit.join(x0, x0))
    y = kit.trans(kit.reshape(a, (BN, BM)))
    kit.store(Out + rm[:, None] * N + rn[None, :], y + x0, mask=mask)


def test_repro_broadcast_into_a_relabeled_layout():
    """The mask's [1, BN] broadcast took the permuted/reshaped/halved layout of its result
    (an internal error at 19c27e5; fixed on main by 4717b4c)."""
    ck = trans_of_split_masked_kernel.compile(
        [("*fp32", 16), ("*fp32", 16), ("i32", 1), ("i32", 16)], (4, 32), 1, "sm_90a")
    assert ".target sm_90a" in ck.asm["ptx"]


@kit.jit
def sum_of_trans_kernel(X0, Out, M, N, BM: kit.constexpr, BN: kit.constexpr):
    rm = kit.arange(0, BM)
    rn = kit.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x0 = kit.load(X0 + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    v = kit.sum(kit.trans(kit.reshape(x0, (BN, BM))), axis=0)[None, :]
    kit.store(Out + rm[:, None] * N + rn[None, :], v + 0.5, mask=mask)


def test_repro_sum_of_a_trans_of_a_reshape():
    """KeyError (1,) in the lowering at 19c27e5 (fixed on main by 4717b4c)."""
    ck = sum_of_trans_kernel.compile(
        [("*fp32", 16), ("*fp32", 16), ("i32", 1), ("i32", 16)], (4, 32), 1, "sm_90a")
    assert ".target sm_90a" in ck.asm["ptx"]
