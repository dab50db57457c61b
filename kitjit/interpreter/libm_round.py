"""Exact rounding for the interpreter's libdevice functions with an explicit rounding mode
(add_rz, fma_ru, sqrt_rd, rcp_rn, int2float_rz, double2float_ru, ...).

The GPU computes these with one IEEE instruction (add.rz.f32, cvt.rp.f32.s64, ...), so they
are exact functions of their operands and the interpreter gives the same bits: the true
result is taken as a rational (Fraction) or, for sqrt, bracketed by squaring, and rounded in
the mode asked for. IEEE's rules for zeros hold: an exact zero sum of operands of opposite
signs is -0 rounding down and +0 otherwise; overflow gives the largest finite value in the
modes that round toward it. Elementwise in Python: slow, but these are rare in kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

MODES = ("rn", "rz", "rd", "ru")


def _above(v, q: Fraction) -> bool:
    """v > q for a float v that may be infinite."""
    return v > 0 if np.isinf(v) else Fraction(float(v)) > q


def round_rational(q: Fraction, ft, mode: str):
    """The `ft` value (np.float32 / np.float64 type) of the exact rational q in `mode`."""
    big = ft(np.finfo(ft).max)
    try:
        with np.errstate(over="ignore"):
            c = ft(float(q))  # within an ulp or two of every mode's answer
    except OverflowError:
        c = ft(np.inf) if q > 0 else ft(-np.inf)
    if np.isinf(c):
        pos = c > 0
        if mode == "rn":
            return c
        keep = (mode == "ru" and pos) or (mode == "rd" and not pos)
        if keep:
            return c
        return big if pos else -big
    if Fraction(float(c)) == q:
        return c
    a = c
    while _above(a, q):
        a = np.nextafter(a, ft(-np.inf))
    b = np.nextafter(a, ft(np.inf))
    while np.isfinite(b) and Fraction(float(b)) < q:
        a, b = b, np.nextafter(b, ft(np.inf))
    if np.isfinite(a) and Fraction(float(a)) == q:
        return a
    if mode == "rd":
        r = a
    elif mode == "ru":
        r = b
    elif mode == "rz":
        r = a if q > 0 else b
    else:
        if np.isinf(b):
            half = Fraction(float(a)) + (Fraction(float(a)) - Fraction(float(
                np.nextafter(a, ft(-np.inf))))) / 2
            return b if q >= half else a
        if np.isinf(a):
            half = Fraction(float(b)) - (Fraction(float(np.nextafter(b, ft(np.inf)))) -
                                         Fraction(float(b))) / 2
            return a if q <= half else b
        da, db = q - Fraction(float(a)), Fraction(float(b)) - q
        if da != db:
            r = a if da < db else b
        else:
            r = a if int(np.asarray(a).view(np.int64 if ft is np.float64 else np.int32)) % 2 \
                == 0 else b
    if q != 0 and r == 0:
        r = ft(0.0) if q > 0 else ft(-0.0)
    return r


def _elementwise(one: Callable, nargs: int, ft) -> Callable:
    vec = np.frompyfunc(one, nargs, 1)

    def f(*xs):
        with np.errstate(all="ignore"):
            return np.asarray(vec(*[np.asarray(x) for x in xs])).astype(ft)
    return f


def _zero_sign(mode: str, ft, *terms) -> object:
    """IEEE's zero of an exact zero result: -0 where all terms are -0, or rounding down
    with terms of different signs; else +0."""
    signs = {bool(np.signbit(t)) for t in terms}
    if signs == {True} or (mode == "rd" and len(signs) == 2):
        return ft(-0.0)
    if mode == "rd" and any(t != 0 for t in terms):
        return ft(-0.0)
    return ft(0.0)


def directed_arith(op: str, mode: str, f32: bool) -> Callable:
    """add/sub/mul/fma/rcp/div in `mode` on fp32 (f32) or fp64 operands."""
    ft = np.float32 if f32 else np.float64

    def one(*xs):
        xs = [ft(x) for x in xs]
        with np.errstate(all="ignore"):
            if op == "add":
                naive = xs[0] + xs[1]
            elif op == "sub":
                naive = xs[0] - xs[1]
            elif op == "mul":
                naive = xs[0] * xs[1]
            elif op == "rcp":
                naive = ft(1.0) / xs[0]
            elif op == "div":
                naive = xs[0] / xs[1]
            else:
                naive = xs[0] * xs[1] + xs[2]
        if not all(np.isfinite(x) for x in xs) or np.isnan(naive):
            return naive
        if op in ("rcp", "div") and xs[-1] == 0:
            return naive
        fr = [Fraction(float(x)) for x in xs]
        q = {"add": lambda: fr[0] + fr[1], "sub": lambda: fr[0] - fr[1],
             "mul": lambda: fr[0] * fr[1], "rcp": lambda: 1 / fr[0],
             "div": lambda: fr[0] / fr[1], "fma": lambda: fr[0] * fr[1] + fr[2]}[op]()
        if q == 0:
            if op == "add":
                return _zero_sign(mode, ft, xs[0], xs[1])
            if op == "sub":
                return _zero_sign(mode, ft, xs[0], -xs[1])
            if op == "fma":
                p = ft(-0.0) if np.signbit(xs[0]) != np.signbit(xs[1]) else ft(0.0)
                return _zero_sign(mode, ft, p, xs[2])
            return naive  # a product or quotient's zero has the operands' sign
        return round_rational(q, ft, mode)
    return _elementwise(one, {"rcp": 1, "fma": 3}.get(op, 2), ft)


def directed_sqrt(mode: str, f32: bool) -> Callable:
    """sqrt in `mode`: the neighbours of the true root found by squaring exactly."""
    ft = np.float32 if f32 else np.float64

    def one(x):
        x = ft(x)
        with np.errstate(all="ignore"):
            c = np.sqrt(x)
        if not np.isfinite(x) or x <= 0 or np.isnan(c):
            return c
        fx = Fraction(float(x))
        sq = Fraction(float(c)) ** 2
        if sq == fx:
            return c
        if sq < fx:
            a, b = c, np.nextafter(c, ft(np.inf))
        else:
            a, b = np.nextafter(c, ft(0)), c
        if mode in ("rd", "rz"):
            return a
        if mode == "ru":
            return b
        return c
    return _elementwise(one, 1, ft)


_INT_RANGE = {"i32": (-(2 ** 31), 2 ** 31 - 1), "u32": (0, 2 ** 32 - 1),
              "i64": (-(2 ** 63), 2 ** 63 - 1), "u64": (0, 2 ** 64 - 1)}
_NP = {"i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64,
       "fp32": np.float32, "fp64": np.float64}


def float_to_int(mode: str, dst: str, ret: str, src: str = "fp32") -> Callable:
    """cvt.{rni,rzi,rmi,rpi}.<dst>.f32/f64: round to an integer in `mode`, saturate to the
    destination's range; the bits returned as Triton's result dtype `ret`. NaN: 0 from fp32
    to 32 bits, else the destination's top bit alone (0x80000000, 0x8000000000000000,
    unsigned too), as an H200 gives (2026-11-29)."""
    lo, hi = _INT_RANGE[dst]
    top = not (src == "fp32" and dst in ("i32", "u32"))
    rnd = {"rn": np.rint, "rz": np.trunc, "rd": np.floor, "ru": np.ceil}[mode]

    def f(x):
        x = np.asarray(x, np.float64)
        with np.errstate(all="ignore"):
            t = rnd(x)
        out = np.zeros(x.shape, np.int64 if dst != "u64" else np.uint64)
        ok = (t >= lo) & (t < float(hi) + 1)  # (NaN fails both: 0)
        out = np.where(ok, np.where(ok, t, 0).astype(out.dtype), out)
        out = np.where(t >= float(hi) + 1, out.dtype.type(hi), out)
        out = np.where(t < lo, out.dtype.type(lo) if lo else out.dtype.type(0), out)
        if top:
            w = 8 * _NP[dst]().itemsize
            nan = np.array(2 ** (w - 1), np.uint64).astype(out.dtype) if dst == "u64" else \
                np.array(-(2 ** (w - 1)) if dst[0] == "i" else 2 ** (w - 1)).astype(out.dtype)
            out = np.where(np.isnan(x), nan, out)
        return out.astype(_NP[dst]).view(_NP[ret]) if _NP[dst]().itemsize == \
            _NP[ret]().itemsize else out.astype(_NP[ret])
    return f


def int_to_float(mode: str, src: str, dst: str) -> Callable:
    """cvt.{rn,rz,rm,rp}.f32/f64.<src>: the exact integer rounded in `mode`."""
    ft = _NP[dst]

    def one(v):
        return round_rational(Fraction(int(v)), ft, mode)
    vec = np.frompyfunc(one, 1, 1)
    return lambda x: np.asarray(vec(np.asarray(x).astype(_NP[src]))).astype(ft)


def double_to_float(mode: str) -> Callable:
    """cvt.{rn,rz,rm,rp}.f32.f64 (denormals kept, overflow per the mode)."""
    def one(v):
        v = np.float64(v)
        if not np.isfinite(v):
            return np.float32(v)
        if v == 0:
            return np.float32(v)
        return round_rational(Fraction(float(v)), np.float32, mode)
    vec = np.frompyfunc(one, 1, 1)
    return lambda x: np.asarray(vec(np.asarray(x, np.float64))).astype(np.float32)
