"""How far libdevice's Bessel functions, tgamma, erfcinv and erfcx may be from the
interpreter's value (the true value rounded, kitjit/interpreter/libm_special.py): CUDA's
documented error bounds (CUDA C++ Programming Guide, "Mathematical Functions" appendix,
tables of maximum ulp error for single and double precision), per dtype and argument range.

Everything libdevice decides outright must be equal bit for bit: the answer on a special
input (+-0, +-inf, NaN, a negative order), a NaN (its sign too), an infinity, a zero's sign
where both are zero (j0(0) is 1 + 2**-23 in fp32, not 1, as libdevice computes it). The rest
is within `ulp` units in the last place of the interpreter's value plus an absolute `abs`
(the Bessel functions' documented bound away from 0 is absolute: at 1e30 even the sign of J0
is noise).
"""

from __future__ import annotations

import math

import numpy as np

SPECIAL_FNS = ("erfcinv", "erfcx", "tgamma", "j0", "j1", "y0", "y1", "jn", "yn")

# CUDA's figures: fp32 ("f" functions) / fp64
_ULP = {
    "erfcinv": (4, 6),   # erfcinvf 4, erfcinv 6 ulp (full range)
    "erfcx": (4, 4),     # erfcxf 4, erfcx 4 ulp (full range)
    "tgamma": (5, 10),   # tgammaf 5, tgamma 10 ulp (full range)
}
# j0/j1/y0/y1: 9 ulp (fp32) / 7 ulp (fp64) for |x| < 8, otherwise an absolute 2.2e-6 /
# 5e-12; jn: "for n = 128" an absolute 2.2e-6 / 5e-12, the only figure given, used for every
# n >= 2; ynf: ceil(2 + 2.5 n) ulp for |x| < n, otherwise an absolute 2.2e-6; yn (fp64): an
# absolute 5e-12 for |x| > 1.5 n, nothing given below that: there fp32's ceil(2 + 2.5 n) ulp
# plus the absolute 5e-12 (an H200 gave yn(30, 29.5) 1.46e-13 off, ~2600 ulp, 2026-11-29).
# jn/yn of n = 0 and 1 are j0/j1/y0/y1 (libdevice calls them).
_BESSEL_ULP = (9, 7)
_BESSEL_ABS = (2.2e-6, 5e-12)


def bounds(fn: str, f32: bool, xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(ulp, abs) allowed per element for libdevice's `fn` on operands `xs` (orders first)."""
    i = 0 if f32 else 1
    x = np.abs(np.asarray(xs[-1], np.float64))
    shape = x.shape
    if fn in _ULP:
        return np.full(shape, float(_ULP[fn][i])), np.zeros(shape)
    n = np.asarray(xs[0], np.int64) if fn in ("jn", "yn") else \
        np.full(shape, 1 if fn[-1] == "1" else 0)
    near = x < 8
    ulp = np.where(near, _BESSEL_ULP[i], 0.0)
    absb = np.where(near, 0.0, _BESSEL_ABS[i])
    if fn == "jn":
        high = n >= 2
        ulp = np.where(high, 0.0, ulp)
        absb = np.where(high, _BESSEL_ABS[i], absb)
    if fn == "yn":
        high = n >= 2
        small = x < (n if f32 else 1.5 * n)
        ulp = np.where(high, np.where(small, np.ceil(2 + 2.5 * n), 0.0), ulp)
        absb = np.where(high, np.where(small & f32, 0.0, _BESSEL_ABS[i]), absb)
    return ulp, absb


def mismatches(fn: str, f32: bool, xs: list[np.ndarray], got, want,
               nan_sign: bool = True) -> list[str]:
    """The elements where the GPU's `got` is not within libdevice's bound of the
    interpreter's `want` (empty: they agree). nan_sign=False: NaN signs unknown in `got`."""
    ft = np.float32 if f32 else np.float64
    got, want = np.asarray(got, ft), np.asarray(want, ft)
    ulp, absb = bounds(fn, f32, xs)
    bad = []
    for k in range(got.size):
        g, w = float(got.flat[k]), float(want.flat[k])
        where = f"{fn}({', '.join(repr(x.flat[k].item()) for x in xs)})"
        x = float(xs[-1].flat[k])
        special_in = not math.isfinite(x) or x == 0 or len(xs) == 2 and xs[0].flat[k] < 0
        decided = special_in or math.isnan(g) or math.isnan(w) or math.isinf(g) or \
            math.isinf(w) or (g == 0 and w == 0)
        if decided:
            same = (math.isnan(g) and math.isnan(w) or g == w) and \
                (math.copysign(1, g) == math.copysign(1, w) or
                 not nan_sign and math.isnan(g))
            if not same:
                bad.append(f"{where}: GPU {g!r} {'-' if math.copysign(1, g) < 0 else '+'}, "
                           f"interpreter {w!r} {'-' if math.copysign(1, w) < 0 else '+'}")
            continue
        room = ulp.flat[k] * float(np.spacing(ft(abs(w)))) + absb.flat[k] + \
            float(np.finfo(ft).smallest_subnormal)
        if abs(g - w) > room:
            bad.append(f"{where}: GPU {g!r}, interpreter {w!r}, off by {abs(g - w):.3g} > "
                       f"{room:.3g}")
    return bad
