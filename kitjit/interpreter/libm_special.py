"""The interpreter's Bessel (j0, j1, y0, y1, jn, yn), tgamma, erfcinv and erfcx: the true
value (mpmath at 80+ bits, rounded once) wherever libdevice computes an approximation of it,
and libdevice's own answer, bit for bit, wherever libdevice's code decides the answer
outright: the special inputs (0, -0, +-inf, NaN, negative orders, x < 0 for y*), the inputs
on which its recurrences overflow, and the constants its polynomials give near 0.

The rules are read off libdevice.10.bc (`__nv_jn`, `__nv_ynf`, ...) and checked against an
H200's answers (tests/data/libdevice_h200_special.json):
- NaN: libdevice's own NaN constants are +NaN (0x7fffffff) in fp32 and -NaN
  (0xfff8000000000000) in fp64, as are the NaNs the hardware makes (`gpu_nan_sign`); yn
  with n >= 2 returns that constant for a NaN x too (its test is `!(x >= 0)`).
- j0(+-inf) = +0, j1(+-inf) = +-0, y0/y1(+inf) = +0; jn/yn(n >= 2, +-inf) are the signed
  zeros of the forward recurrence from those.
- j0 near 0 is a polynomial in |x| - z0 (z0 = J0's first zero), so below half an ulp of z0
  it returns one constant: 1 + 2**-23 in fp32, 1 - 2**-52 in fp64.
- jn(n >= 2, x) with |x| <= n - 1 (fp64; n, or n + 1 for n > 4, in fp32) is Miller's
  backward recurrence in 2/x: it overflows to NaN for x = 0 and tiny x (jn(7, 0) is NaN).
  The recurrence is run here in the GPU's precision to find those inputs.
- yn(n >= 2, x): x < 1e-308 gives -0.6366197723675814 / x in fp64 (so yn(2, -0.0) = +inf),
  x < FLT_MIN gives -inf in fp32; an overflowing recurrence gives -inf.
- tgamma(-5e-324) = -inf (1/x overflows: mpmath's value, rounded); erfcinv(1) = +0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

_F32_TINY = float(np.finfo(np.float32).tiny)
_YN64_SMALL = 1e-308                       # __nv_yn: x below it is -(2/pi) / x
_TWO_OVER_PI_NEG = -0.6366197723675814     # 0xbfe45f306dc9c883
_J0_AT_0 = {True: 1.0 + 2.0 ** -23, False: 1.0 - 2.0 ** -52}
_J0_FLAT = {True: 2.0 ** -24, False: 2.0 ** -53}  # |x| - z0 rounds to -z0 below these


def _nan(f32: bool) -> float:
    """The NaN libdevice returns (its constant, and the hardware's made NaN)."""
    return math.nan if f32 else -math.nan


def _mpf(fn: Callable, *args, prec: int = 80) -> float:
    import mpmath

    with mpmath.workprec(prec):
        return float(fn(*args))


def _hankel(kind: str, n: int, x: float) -> float:
    """J_n / Y_n of a large x > 0 by Hankel's asymptotic series, cos and sin of x from
    mpmath (exactly reduced): mpmath's own Bessel functions take seconds out there."""
    import mpmath

    with mpmath.workprec(90):
        v = mpmath.mpf(x)
        mu = 4 * n * n
        p = q = mpmath.mpf(0)
        term = mpmath.mpf(1)
        for k in range(40):
            if k:
                term *= (mu - (2 * k - 1) ** 2) / (k * 8 * v)
            if k % 2 == 0:
                p += term if k % 4 == 0 else -term
            else:
                q += term if k % 4 == 1 else -term
            if k and abs(term) < mpmath.mpf(2) ** -90:
                break
        phi = (mpmath.mpf(n) / 2 + mpmath.mpf(1) / 4) * mpmath.pi
        c, s = mpmath.cos(v), mpmath.sin(v)
        cchi = c * mpmath.cos(phi) + s * mpmath.sin(phi)
        schi = s * mpmath.cos(phi) - c * mpmath.sin(phi)
        amp = mpmath.sqrt(2 / (mpmath.pi * v))
        return float(amp * (p * cchi - q * schi if kind == "j" else p * schi + q * cchi))


def _jy_true(kind: str, n: int, x: float) -> float:
    import mpmath

    if abs(x) >= max(1e6, 100.0 * n * n):
        r = _hankel(kind, n, abs(x))
        return -r if x < 0 and n % 2 else r  # (x < 0 only for J)
    f = mpmath.besselj if kind == "j" else mpmath.bessely
    r = _mpf(lambda: f(n, mpmath.mpf(x)))
    if r == 0:  # mpmath's zeros are unsigned: J_n(-x) = (-1)**n J_n(x)
        return math.copysign(0.0, x) if n % 2 else 0.0
    return r


def _zero_recurrence(n: int, x: float) -> float:
    """jn/yn(n, +-inf): the forward recurrence from J0/Y0 = +0, J1 = +-0 (Y1 = +0) with
    2/x = +-0, in IEEE's signed-zero arithmetic, as libdevice runs it."""
    t = 2.0 / x
    prev, cur = 0.0, math.copysign(0.0, x)
    for i in range(1, n):
        prev, cur = cur, (i * t) * cur + (-prev)
    return cur


def _miller_blows_up(n: int, x: float, f32: bool) -> float | None:
    """Run libdevice's backward recurrence for jn (|x| small against n) in the GPU's
    precision; its result where that is not finite (NaN: the recurrence overflowed), else
    None (the GPU then gives an approximation of the true value)."""
    ft = np.float32 if f32 else np.float64
    with np.errstate(all="ignore"):
        root = int(np.sqrt(ft(40 * n if f32 else 60 * n)))
        start = ((n + root) >> 1) << 1
        x_ = ft(x)
        two_x = ft(2) / x_
        scale = ft(1e-15)
        big = np.float32(1e15) if f32 else 1e15  # (fp64 compares |float(jim1)| to it)
        jip1, lam, s, ji1 = ft(0), ft(0), ft(0), ft(1)
        for i in range(start, 0, -1):
            step = (ft(2 * i) / x_) if f32 else ft(i) * two_x
            jim1 = step * ji1 - jip1
            if abs(np.float32(jim1)) > big:
                jim1, ji1, lam, s = jim1 * scale, ji1 * scale, lam * scale, s * scale
            jip1, ji1 = ji1, jim1
            if i - 1 == n:
                lam = jim1
            if i & 1:
                s = s + ft(2) * jim1
        r = lam / (s - ji1)
    return None if np.isfinite(r) else float(r)


def _j0(x: float, f32: bool) -> float:
    if math.isnan(x):
        return x
    if math.isinf(x):
        return 0.0
    if abs(x) < _J0_FLAT[f32]:
        return _J0_AT_0[f32]
    return _jy_true("j", 0, x)


def _j1(x: float, f32: bool) -> float:
    if math.isnan(x):
        return x
    if math.isinf(x):
        return math.copysign(0.0, x)
    return _jy_true("j", 1, x)


def _y01(n: int, x: float, f32: bool) -> float:
    if math.isnan(x):
        return x
    if x < 0:
        return _nan(f32)
    if x == 0:
        return -math.inf
    if math.isinf(x):
        return 0.0
    return _jy_true("y", n, x)


def jn(n: int, x: float, f32: bool) -> float:
    """libdevice's jn(n, x) (jnf on fp32)."""
    if n < 0:
        return _nan(f32)
    if n == 0:
        return _j0(x, f32)
    if n == 1:
        return _j1(x, f32)
    if math.isnan(x):
        return x
    if math.isinf(x):
        return _zero_recurrence(n, x)
    forward = abs(x) > (n + (n > 4) if f32 else n - 1)
    if not forward:
        blown = _miller_blows_up(n, x, f32)
        if blown is not None:
            return _nan(f32) if math.isnan(blown) else blown
    return _jy_true("j", n, x)


def yn(n: int, x: float, f32: bool) -> float:
    """libdevice's yn(n, x) (ynf on fp32)."""
    if n < 0:
        return _nan(f32)
    if n in (0, 1):
        return _y01(n, x, f32)
    if not x >= 0:  # NaN included: libdevice returns its NaN constant
        return _nan(f32)
    if f32 and x < _F32_TINY:
        return -math.inf            # -1e9 / |x| overflows
    if not f32 and x < _YN64_SMALL:
        with np.errstate(all="ignore"):
            return float(np.float64(_TWO_OVER_PI_NEG) / np.float64(x))
    if math.isinf(x):
        return 0.0                  # the recurrence from Y0 = Y1 = +0 with 2/x = +0
    r = _jy_true("y", n, x)
    lim = float(np.finfo(np.float32 if f32 else np.float64).max)
    return -math.inf if math.isinf(r) or abs(r) > lim else r


def tgamma(x: float, f32: bool) -> float:
    if math.isnan(x):
        return x
    if x == 0:
        return math.copysign(math.inf, x)
    if math.isinf(x):
        return math.inf if x > 0 else _nan(f32)
    if x < 0 and x == math.floor(x):
        return _nan(f32)
    import mpmath

    return _mpf(lambda: mpmath.gamma(mpmath.mpf(x)))


def erfcinv(y: float, f32: bool) -> float:
    """The x with erfc(x) = y, by Newton's method on mpmath's erfc (mpmath has no erfcinv,
    and 1 - y loses a denormal y)."""
    if math.isnan(y):
        return y
    if y < 0 or y > 2:
        return _nan(f32)
    if y == 0:
        return math.inf
    if y == 2:
        return -math.inf
    if y == 1:
        return 0.0
    if y > 1:
        return -erfcinv(2 - y, f32)  # (2 - y is exact for 1 <= y <= 2)
    import mpmath

    with mpmath.workprec(100):
        return _newton(mpmath.mpf(y), 1)


def _newton(t, sign: int) -> float:
    """erfcinv(t) for 0 < t < 1 (t an mpf), times `sign`."""
    import mpmath

    x = mpmath.sqrt(-mpmath.log(t))  # a start above the root; Newton converges from there
    for _ in range(100):
        step = (mpmath.erfc(x) - t) / (-2 / mpmath.sqrt(mpmath.pi) * mpmath.exp(-x * x))
        x -= step
        if abs(step) < abs(x) * mpmath.mpf(2) ** -90:
            break
    return sign * float(x)


def erfcx(x: float, f32: bool) -> float:
    import mpmath

    if math.isnan(x):
        return x
    if math.isinf(x):
        return 0.0 if x > 0 else math.inf
    if x > 1e4:  # the asymptotic series: its terms fall by 1/(2 x**2) < 5e-9
        with mpmath.workprec(100):
            v = mpmath.mpf(x)
            term, total = mpmath.mpf(1), mpmath.mpf(0)
            for k in range(8):
                total += term
                term *= -(2 * k + 1) / (2 * v * v)
            return float(total / (v * mpmath.sqrt(mpmath.pi)))
    if x < -30:
        return math.inf  # exp(x**2) > 1e390
    v = mpmath.mpf(x)
    return _mpf(lambda: mpmath.exp(v * v) * mpmath.erfc(v), prec=160)


_ONE = {"j0": _j0, "j1": _j1, "y0": lambda x, f32: _y01(0, x, f32),
        "y1": lambda x, f32: _y01(1, x, f32), "tgamma": tgamma, "erfcinv": erfcinv,
        "erfcx": erfcx}
SPECIAL = frozenset({*_ONE, "jn", "yn"})


def special_fn(fn: str, f32: bool) -> Callable:
    """The numpy function of libdevice's `fn` (a key of SPECIAL) on fp32/fp64 operands:
    float64 results, which the caller rounds to fp32 (NaN signs survive the rounding)."""
    if fn in ("jn", "yn"):
        g = jn if fn == "jn" else yn

        def two(n, x):
            n, x = np.broadcast_arrays(np.asarray(n), np.asarray(x, np.float64))
            out = np.empty(x.shape, np.float64)
            for i in np.ndindex(x.shape):
                out[i] = g(int(n[i]), float(x[i]), f32)
            return out
        return two
    h = _ONE[fn]

    def one(x):
        x = np.asarray(x, np.float64)
        out = np.empty(x.shape, np.float64)
        for i in np.ndindex(x.shape):
            out[i] = h(float(x[i]), f32)
        return out
    return one
