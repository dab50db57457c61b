"""numpy semantics of the `math` op's functions (kitjit/ir/libm.py).

fp32 operands are widened to float64, the function runs there (numpy; torch's float64
special functions where numpy has none: erf, erfc, erfinv, ndtri, lgamma; mpmath at 80 bits
for normcdf, cyl_bessel_i0/i1, where torch's float64 versions lose accuracy or get
infinities wrong; the Bessel functions, tgamma, erfcinv and erfcx, with libdevice's own
answers on its special cases, are in libm_special.py) and the result rounds once to fp32. For
the correctly rounded functions (sqrt_rn, div_rn, fma and the exact ones) that is the exact
fp32 answer (53 >= 2*24+2 bits; fma rounds to odd first); for the rest it is within 1 ulp of
the true value, and libdevice on the GPU is within its documented bound (libm.FNS[...].ulp,
.abs) of it. The functions with a named rounding mode (add_rz, fma_ru, sqrt_rd, ...) are
rounded exactly (libm_round.py). NaN, infinities and signed zeros follow C99 in both. fp64
runs numpy's double functions (glibc, < 1 ulp; libdevice's double versions are within 2 ulp).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from .floats import maxnum, minnum
from .libm_round import MODES, directed_arith, directed_sqrt
from .libm_special import SPECIAL, special_fn


def _torch64(name: str) -> Callable:
    def f(x):
        import torch

        return getattr(torch.special, name)(torch.from_numpy(np.ascontiguousarray(
            x, np.float64))).numpy()
    return f


def _round(x):  # half away from zero (C's round), unlike np.round
    t = np.trunc(x)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


def _pred(f: Callable) -> Callable:
    return lambda x: f(x).astype(np.int32)


def _fma_exact(x, y, z):
    """fma in float64 rounded once: exact rationals for finite operands."""
    def one(a, b, c):
        if np.isfinite(a) and np.isfinite(b) and np.isfinite(c):
            r = Fraction(a) * Fraction(b) + Fraction(c)
            if r == 0:  # IEEE's sign of an exact zero sum
                return (a * b) + c
            try:
                return float(r)
            except OverflowError:
                return float("inf") if r > 0 else float("-inf")
        if np.isinf(c) and np.isfinite(a) and np.isfinite(b):
            return c
        return a * b + c
    return np.asarray(np.frompyfunc(one, 3, 1)(x, y, z)).astype(np.float64)


def gpu_nan_sign(f: Callable, f32: bool) -> Callable:
    """`f` with the sign a GPU gives a NaN it makes from non-NaN operands (inf * 0,
    sqrt(-1), remainder(inf, y)): + in fp32, - in fp64 (H200, 2026-11-29). numpy's come
    from x86, whose default NaN is negative; math.nan is positive."""
    def g(*xs):
        r = np.asarray(f(*xs))
        made = np.isnan(r) & ~np.any([np.isnan(np.asarray(x, np.float64)) for x in xs],
                                     axis=0)
        if not np.any(made):
            return r
        nan = r.dtype.type(np.nan)
        return np.where(made, nan if f32 else -nan, r).astype(r.dtype)
    return g


def _fma(f32: bool) -> Callable:
    if not f32:
        return _fma_exact

    def fma32(x, y, z):
        # x*y is exact in float64; the sum rounded to odd, then to fp32, is fma's rounding
        p = np.asarray(x, np.float64) * np.asarray(y, np.float64)
        s = p + np.asarray(z, np.float64)
        bb = s - p
        err = (p - (s - bb)) + (np.asarray(z, np.float64) - bb)
        fin = np.isfinite(s) & np.isfinite(err) & (err != 0)
        toward0 = np.where(fin & (np.sign(err) != np.sign(s)), np.nextafter(s, 0.0), s)
        bits = toward0.view(np.int64) | np.where(fin, 1, 0)
        return np.where(fin, bits.view(np.float64), s).astype(np.float32)
    return fma32


def _directed_div(mode: str, f32: bool) -> Callable:
    ft = np.float32 if f32 else np.float64
    big = ft(np.finfo(ft).max)

    def one(a, b):
        with np.errstate(all="ignore"):  # numpy floats: x / 0 is inf or NaN, not an error
            c = ft(np.float64(a) / np.float64(b))  # (frompyfunc hands fp64 as Python floats)
        if not (np.isfinite(a) and np.isfinite(b)) or b == 0 or np.isnan(c):
            return c
        if np.isinf(c):  # overflow: the directed modes stop at the largest finite value
            pos = c > 0
            keep = (mode == "ru" and pos) or (mode == "rd" and not pos)
            return c if keep else (big if pos else -big)
        q = Fraction(float(a)) / Fraction(float(b))
        fc = Fraction(float(c))
        if mode == "rz" and abs(fc) > abs(q):
            c = np.nextafter(c, ft(0))
        elif mode == "rd" and fc > q:
            c = np.nextafter(c, ft(-np.inf))
        elif mode == "ru" and fc < q:
            c = np.nextafter(c, ft(np.inf))
        return c
    return lambda x, y: np.asarray(np.frompyfunc(one, 2, 1)(x, y)).astype(ft)


def _fast_dividef(x, y):
    """div.approx.f32 (libdevice's __fdividef without FTZ): 2 ulp for |y| <= 2**126; for
    2**126 < |y| < 2**128 it gives 0 (NaN for an infinite x), which is kept here."""
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    with np.errstate(all="ignore"):
        r = (x.astype(np.float64) / y).astype(np.float32)
        hugey = (np.abs(y) > np.float32(2.0 ** 126)) & np.isfinite(y)
        return np.where(hugey, np.where(np.isinf(x), np.float32(np.nan), np.float32(0) * x * y),
                        r).astype(np.float32)


def _logb(x: np.ndarray) -> np.ndarray:
    """The unbiased exponent of x as a float (logb(0) = -inf, logb(+-inf) = inf), exact for
    denormals too (frexp, not log2)."""
    e = np.frexp(x)[1].astype(np.float64) - 1
    return np.where(x == 0, -np.inf, np.where(np.isinf(x), np.inf,
                                              np.where(np.isnan(x), np.nan, e)))


def _sinpi(x):
    """sin(pi x) with the argument reduced exactly (x mod 2, then onto [-1/2, 1/2])."""
    r = np.fmod(x, 2.0)                       # exact, sign of x
    r = np.where(r > 1, r - 2, np.where(r < -1, r + 2, r))
    r = np.where(r > 0.5, 1 - r, np.where(r < -0.5, -1 - r, r))
    return np.where(np.isinf(x), np.nan, np.sin(np.pi * r) + 0 * x)


def _cospi(x):
    r = np.abs(np.fmod(x, 2.0))
    r = np.where(r > 1, 2 - r, r)             # cos(pi r), r in [0, 1]
    out = np.where(r <= 0.25, np.cos(np.pi * r), _sinpi(0.5 - r))
    return np.where(np.isinf(x), np.nan, out)


def _remainder(x, y):
    def one(a, b):
        try:
            return math.remainder(a, b)
        except ValueError:  # x infinite or y zero
            return math.nan
    return np.asarray(np.frompyfunc(one, 2, 1)(x, y)).astype(np.float64)


def _norm(*xs):
    r = xs[0] * 0.0
    for x in xs:
        r = np.hypot(r, x)
    return r


def _rnorm(*xs):
    """1 / norm, scaled by the largest |x| so that it neither overflows nor underflows early
    (rnorm3d of three DBL_MAX is a subnormal, not 1 / inf)."""
    m = np.max([np.abs(np.asarray(x, np.float64)) for x in xs], axis=0)
    with np.errstate(all="ignore"):
        ok = np.isfinite(m) & (m > 0)
        ms = np.where(ok, m, 1.0)
        s = np.sqrt(np.sum([(np.asarray(x, np.float64) / ms) ** 2 for x in xs], axis=0))
        r = (1.0 / s) / ms
    return np.where(ok, r, 1.0 / _norm(*xs))


def _mp(name: str) -> Callable:
    """A special function in mpmath at 80 bits (a dependency of kitjit's),
    rounded once to a double, elementwise: correctly rounded where the libdevice function
    is within a few ulp, with none of the float64 shortcuts' losses (torch.special.ndtr(-10)
    is 0, not 7.6e-24; its i0/i1 of inf are NaN and its i0 overflows past 713). Slow (~0.1-2
    ms an element): these are rare in kernels."""
    import mpmath

    def normcdf(v):
        return (0 if v < 0 else 1) if abs(v) > 1e100 else mpmath.ncdf(v)

    def besseli(n, v):
        if mpmath.isinf(v):
            return mpmath.inf if n == 0 or v > 0 else -mpmath.inf
        return mpmath.besseli(n, v)

    f = {"normcdf": normcdf,
         "cyl_bessel_i0": lambda v: besseli(0, v), "cyl_bessel_i1": lambda v: besseli(1, v)}[name]

    def one(v):
        v = float(v)
        if v != v:
            return math.nan
        with mpmath.workprec(80):
            return float(f(mpmath.mpf(v)))
    return lambda x: np.asarray(np.frompyfunc(one, 1, 1)(x)).astype(np.float64)


_F64: dict[str, Callable] = {
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint,
    "nearbyint": np.rint, "fabs": np.abs, "round": _round,
    "copysign": np.copysign, "fmin": minnum, "fmax": maxnum, "fmod": np.fmod,
    "sqrt_rn": np.sqrt, "sqrt": np.sqrt, "div_rn": np.true_divide,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "cbrt": np.cbrt, "hypot": np.hypot,
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(10.0, x), "expm1": np.expm1,
    "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "pow": np.power, "powi": lambda x, n: np.power(x, np.asarray(n, np.float64)),
    "ldexp": lambda x, n: np.ldexp(x, np.asarray(n, np.int32)),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "atan2": np.arctan2, "sinh": np.sinh, "cosh": np.cosh,
    "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "erf": _torch64("erf"), "erfc": _torch64("erfc"),
    "erfinv": _torch64("erfinv"), "normcdf": _mp("normcdf"),
    "normcdfinv": _torch64("ndtri"), "cyl_bessel_i0": _mp("cyl_bessel_i0"),
    "cyl_bessel_i1": _mp("cyl_bessel_i1"),
    "rcbrt": lambda x: 1.0 / np.cbrt(x),
    "logb": lambda x: _logb(np.asarray(x, np.float64)),
    "fdim": lambda x, y: np.where(np.isnan(x) | np.isnan(y), x + y,
                                  np.where(x > y, x - y, 0.0)),
    "rhypot": lambda x, y: 1.0 / np.hypot(x, y),
    "saturatef": lambda x: np.where(np.isnan(x), 0.0, np.clip(x, 0.0, 1.0)),
    "rsqrt_rn": lambda x: 1.0 / np.sqrt(x),
    "fast_expf": np.exp, "fast_logf": np.log,
    "fast_sinf": np.sin, "fast_cosf": np.cos, "fast_tanf": np.tan, "fast_log2f": np.log2,
    "fast_log10f": np.log10, "fast_exp10f": lambda x: np.power(10.0, x),
    "fast_powf": lambda x, y: np.exp2(y * np.log2(x)),  # ex2(y * lg2(x)): specials too
    "remainder": _remainder, "scalbn": lambda x, n: np.ldexp(x, np.asarray(n, np.int32)),
    "sinpi": _sinpi, "cospi": _cospi,
    "norm3d": _norm, "norm4d": _norm,
    "rnorm3d": _rnorm, "rnorm4d": _rnorm,
    "lgamma": _torch64("gammaln"),
}

_PRED = {"isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
         "signbit": np.signbit}


def math_fn(fn: str, f32: bool) -> Callable:
    """The numpy function of `fn` on fp32 (f32=True) or fp64 operands."""
    if fn in _PRED:
        return _pred(_PRED[fn])
    if fn in ("fma", "fma_rn"):
        return gpu_nan_sign(_fma(f32), f32)
    if fn == "remainder":
        return gpu_nan_sign(_remainder, f32)
    if fn in ("div_rz", "div_rd", "div_ru"):
        return _directed_div(fn[-2:], f32)
    op, _, mode = fn.rpartition("_")
    if mode in MODES and op in ("add", "sub", "mul", "rcp", "fma"):
        return gpu_nan_sign(directed_arith(op, mode, f32), f32)
    if mode in MODES and op == "sqrt" and fn != "sqrt_rn":
        return gpu_nan_sign(directed_sqrt(mode, f32), f32)
    if fn == "fast_dividef":
        return _fast_dividef
    if fn in SPECIAL:  # Bessel, tgamma, erfcinv, erfcx: libdevice's special cases too
        g = special_fn(fn, f32)
        def g32(*xs):
            with np.errstate(over="ignore"):
                return g(*xs).astype(np.float32)
        return g32 if f32 else g
    if fn == "nextafter":  # in the operands' own precision, not float64's
        t = np.float32 if f32 else np.float64
        return lambda x, y: np.nextafter(np.asarray(x, t), np.asarray(y, t))
    g = _F64[fn]
    if not f32:
        def f64(*xs):
            with np.errstate(all="ignore"):
                return np.asarray(g(*xs), np.float64)
        return f64

    def f(*xs):
        ws = [np.asarray(x) if np.asarray(x).dtype.kind in "iu" else
              np.asarray(x, np.float64) for x in xs]
        with np.errstate(all="ignore"):
            r = np.asarray(g(*ws)).astype(np.float32)
        return r
    return f
