"""The fuzzer's model: dtypes and kitjit's promotion rules, and the tree of tile operations
a generated kernel is made of (one `Node` per value)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

FLOATS = ("fp32", "fp16", "bf16", "fp64")
INTS = ("i32", "i8", "i16", "i64", "u8", "u32")
# fp8 (e4m3fn: max 448; e5m2: max 57344) takes no arithmetic here: tiles are loaded and
# converted to a wider float, wider floats round-trip through fp8, and results are stored
# as fp8; conversions to fp8 round to nearest even and saturate (inf too) at the maximum.
FP8 = ("f8e4", "f8e5")
FP8_MAX = {"f8e4": 448.0, "f8e5": 57344.0}
KIT = {"fp32": "kit.float32", "fp16": "kit.float16", "bf16": "kit.bfloat16",
       "fp64": "kit.float64", "i32": "kit.int32", "i8": "kit.int8", "i16": "kit.int16",
       "i64": "kit.int64", "u8": "kit.uint8", "u32": "kit.uint32",
       "f8e4": "kit.float8e4nv", "f8e5": "kit.float8e5"}
TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
         "fp64": torch.float64, "i32": torch.int32, "i8": torch.int8, "i16": torch.int16,
         "i64": torch.int64, "u8": torch.uint8, "u32": torch.uint32,
         "f8e4": torch.float8_e4m3fn, "f8e5": torch.float8_e5m2}
BITS = {"i32": 32, "i8": 8, "i16": 16, "i64": 64, "u8": 8, "u32": 32}
# unit roundoff, and half the smallest subnormal (an absolute error floor for underflow)
UNIT = {"fp32": 2.0 ** -24, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8, "fp64": 2.0 ** -53,
        "f8e4": 2.0 ** -4, "f8e5": 2.0 ** -3, **{d: 0.0 for d in INTS}}
TINY = {"fp32": 2.0 ** -149, "fp16": 2.0 ** -24, "bf16": 2.0 ** -133, "fp64": 2.0 ** -1074,
        "f8e4": 2.0 ** -9, "f8e5": 2.0 ** -16, **{d: 0.0 for d in INTS}}
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


def is_fp8(dt) -> bool:
    return dt in FP8


def is_unsigned(dt) -> bool:
    return dt in ("u8", "u32")


def irange(dt) -> tuple[int, int]:
    b = BITS[dt]
    return (0, 2 ** b - 1) if is_unsigned(dt) else (-(2 ** (b - 1)), 2 ** (b - 1) - 1)


def max_abs(dt) -> float:
    """The largest |value| a dtype holds (floats: the fuzzer's bound is what matters)."""
    if is_float(dt):
        return math.inf
    if is_fp8(dt):
        return FP8_MAX[dt]
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
    # next to a signed int tile: the tile's dtype, the value wrapped (as Triton 3.6)
    if not is_unsigned(other):
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
    if is_fp8(dt):  # saturating, as kitjit's conversions to fp8 are
        v = max(-FP8_MAX[dt], min(FP8_MAX[dt], float(v)))
    if is_float(dt) or is_fp8(dt):
        return torch.tensor(float(v), dtype=torch.float64).to(TORCH[dt]).double().item()
    return float(wrap(np.int64(int(v)), dt)[()])


# ============================================================================ the tree
@dataclass(eq=False)
class Node:
    op: str                      # var lit bin div ... call: a Gen.g_<op> (or var, lit, clamp)
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
    if "bf16" in (a.dtype, b.dtype) and not (is_float(a.dtype) and is_float(b.dtype)) and \
            (a.shape == ()) == (b.shape == ()):
        return "fp32"  # an integer and bf16 (two tiles or two scalars): Triton's rule 4
    return promote(a.dtype, b.dtype)


def minmax_meet(a: Node, b: Node) -> str:
    """kit.minimum/maximum's dtype: a number there is its `to_tensor` dtype (int32, uint32,
    int64; fp32, or fp64 past fp32's range), as Triton 3.6 (`kit.maximum(x_fp16, 1e5)` is
    fp32, with an int literal fp16), then promotes as two tiles."""
    if not (a.is_lit or b.is_lit):
        return meet(a, b)
    x, c = (b, a) if a.is_lit else (a, b)
    v = c.a["value"]
    if isinstance(v, float):
        ok = v == 0 or math.isinf(v) or v != v or 2.0 ** -126 <= abs(v) <= 3.4028234663852886e38
        dt = "fp32" if ok else "fp64"
    else:
        dt = "i32" if -(2 ** 31) <= v < 2 ** 31 else "u32" if 0 <= v < 2 ** 32 else "i64"
    if x.dtype == "bf16" and not is_float(dt):
        return "fp32"
    return promote(x.dtype, dt)


def sum_dtype(dt: str) -> str:
    """kit.sum's result (Triton 3.6's): floats keep their dtype (kitjit accumulates
    fp16/bf16 in fp32 and rounds once), signed ints narrower than 32 bits give int32,
    unsigned ones uint32."""
    return {"i8": "i32", "i16": "i32", "u8": "u32"}.get(dt, dt)


def max_dtype(dt: str) -> str:
    """kit.max / kit.min's result (Triton 3.6's): floats narrower than 32 bits give fp32,
    ints narrower than 32 bits int32."""
    return {"fp16": "fp32", "bf16": "fp32", "i8": "i32", "i16": "i32", "u8": "i32"}.get(dt, dt)


def cumsum_dtype(dt: str) -> str:
    """kit.cumsum's: bf16 -> fp32 (fp16 stays), narrow ints -> int32 / uint32."""
    return {"bf16": "fp32", "i8": "i32", "i16": "i32", "u8": "u32"}.get(dt, dt)


def _pow2_below(x: float) -> float:
    return 2.0 ** math.floor(math.log2(x))


def fit_literal(lit_node: Node, other: str) -> Node:
    """A literal an int tile's dtype holds: Triton (and kitjit) raise on one it does not in an
    operator ("Scalar ... is out of range", or a negative beside an unsigned tile)."""
    v = lit_node.a["value"]
    if isinstance(v, float) or is_float(other) or is_fp8(other):
        return lit_node
    lo, hi = irange(other)
    return lit_node if lo <= v <= hi else lit(1)
