"""The functions of the `math` op (Triton's libdevice names): one table that the frontend, the
backend and the interpreter all read, so a name means one thing in every layer.

A `math` op has attr `fn` (a key of `FNS`), operands of one float dtype (fp32 or fp64; the
frontend computes fp16/bf16 in fp32, as kitjit's other float math does) except where an `Fn`
says an operand is an int32, and a result of that dtype (int32 for the predicates).

`symbol` names the libdevice function the backend calls (``__nv_<symbol>f`` on fp32,
``__nv_<symbol>`` on fp64, unless `f32`/`f64` spell it out); `inline` ones lower to one LLVM
intrinsic or a few instructions and need no libdevice. `ulp` is the documented error bound of
CUDA's libdevice on fp32 (CUDA C Programming Guide, "Mathematical Functions"); the
interpreter computes in float64 and rounds once to fp32, so it is correctly rounded (or within
1 ulp) and the GPU is within `ulp` of it.

Known difference: on fp64, libdevice's hypot overflows to inf within a few ulp of the
largest double (hypot(DBL_MAX, 1.0) is inf on the GPU), where the interpreter gives the true
value, DBL_MAX (norm3d/norm4d may do the same: their GPU test leaves such inputs out).
libdevice's functions with other operand or result types (clz, float2int_rn, ...) are in
libm_typed.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fn:
    nargs: int = 1
    symbol: str | None = None   # libdevice base name (default: the key)
    f32: str | None = None      # full fp32 symbol where it is not __nv_<symbol>f
    f64: str | None = None      # full fp64 symbol where it is not __nv_<symbol>; "" = none
    inline: bool = False        # lowered without libdevice
    int_args: tuple[int, ...] = ()  # operand positions that are int32
    pred: bool = False          # returns int32 0/1
    ulp: float = 0              # fp32 error bound on the GPU (0: correctly rounded/exact)
    abs: float = 0              # an absolute error the GPU may have besides `ulp` (Bessel,
                                # lgamma near its zeros, the fast_* approximations)


FNS: dict[str, Fn] = {
    # exact or correctly rounded: inline instructions
    "floor": Fn(inline=True), "ceil": Fn(inline=True), "trunc": Fn(inline=True),
    "rint": Fn(inline=True), "nearbyint": Fn(inline=True), "fabs": Fn(inline=True),
    "fma": Fn(3, inline=True), "copysign": Fn(2, inline=True),
    "fmin": Fn(2, inline=True), "fmax": Fn(2, inline=True),
    "sqrt_rn": Fn(inline=True), "div_rn": Fn(2, inline=True),
    "isnan": Fn(inline=True, pred=True), "isinf": Fn(inline=True, pred=True),
    "isfinite": Fn(inline=True, pred=True), "signbit": Fn(inline=True, pred=True),
    # libdevice
    "round": Fn(), "fmod": Fn(2),
    "sqrt": Fn(ulp=1),  # fp32: sqrt.approx.f32 (__CUDA_PREC_SQRT is 0, as in Triton)
    "cbrt": Fn(ulp=1),
    "rsqrt": Fn(ulp=2), "hypot": Fn(2, ulp=3),
    "exp": Fn(ulp=2), "exp2": Fn(ulp=2), "exp10": Fn(ulp=2), "expm1": Fn(ulp=1),
    "log": Fn(ulp=1), "log2": Fn(ulp=1), "log10": Fn(ulp=2), "log1p": Fn(ulp=1),
    "pow": Fn(2, ulp=4), "powi": Fn(2, f32="__nv_powif", f64="__nv_powi", int_args=(1,),
                                   ulp=4),
    "ldexp": Fn(2, int_args=(1,)),
    "sin": Fn(ulp=2), "cos": Fn(ulp=2), "tan": Fn(ulp=4),
    "asin": Fn(ulp=2), "acos": Fn(ulp=2), "atan": Fn(ulp=2), "atan2": Fn(2, ulp=3),
    "sinh": Fn(ulp=3), "cosh": Fn(ulp=2), "tanh": Fn(ulp=2),
    "asinh": Fn(ulp=3), "acosh": Fn(ulp=4), "atanh": Fn(ulp=3),
    "erf": Fn(ulp=2), "erfc": Fn(ulp=4),
    # special functions (ulp: the larger of CUDA's fp32 and fp64 bounds)
    "erfinv": Fn(ulp=5), "erfcx": Fn(ulp=4), "normcdf": Fn(ulp=5), "normcdfinv": Fn(ulp=8),
    "cyl_bessel_i0": Fn(ulp=6), "cyl_bessel_i1": Fn(ulp=6), "rcbrt": Fn(ulp=1),
    "logb": Fn(), "fdim": Fn(2), "rhypot": Fn(2, ulp=2), "nextafter": Fn(2),
    "saturatef": Fn(f32="__nv_saturatef", f64=""),
    "rsqrt_rn": Fn(f32="__nv_frsqrt_rn", f64=""),
    "div_rz": Fn(2, f32="__nv_fdiv_rz", f64="__nv_ddiv_rz"),
    "div_rd": Fn(2, f32="__nv_fdiv_rd", f64="__nv_ddiv_rd"),
    "div_ru": Fn(2, f32="__nv_fdiv_ru", f64="__nv_ddiv_ru"),
    # fp32 only: ex2.approx / lg2.approx / div.approx (no FTZ: libdevice is linked with
    # __CUDA_FTZ=0); fast_expf's error grows with |x| (2 + 1.16*|x| ulp), fast_logf's is
    # 2**-21.41 absolute on [0.5, 2], fast_dividef gives 0 for 2**126 < |y| < 2**128
    "fast_expf": Fn(f32="__nv_fast_expf", f64="", ulp=2),
    "fast_logf": Fn(f32="__nv_fast_logf", f64="", ulp=2),
    "fast_dividef": Fn(2, f32="__nv_fast_fdividef", f64="", ulp=2),
    # sin.approx/cos.approx/lg2.approx/ex2.approx with a multiply or divide: absolute error
    # ~2**-21 (sin, cos, log2 near 1), relative ~2 ulp + |x| * 2**-22 (exp10, pow)
    "fast_sinf": Fn(f32="__nv_fast_sinf", f64="", ulp=2, abs=2.0 ** -20),
    "fast_cosf": Fn(f32="__nv_fast_cosf", f64="", ulp=2, abs=2.0 ** -20),
    "fast_tanf": Fn(f32="__nv_fast_tanf", f64="", ulp=4, abs=2.0 ** -17),  # (|x| < 1.2)
    "fast_log2f": Fn(f32="__nv_fast_log2f", f64="", ulp=2, abs=2.0 ** -21),
    "fast_log10f": Fn(f32="__nv_fast_log10f", f64="", ulp=2, abs=2.0 ** -21),
    "fast_exp10f": Fn(f32="__nv_fast_exp10f", f64="", ulp=64),
    "fast_powf": Fn(2, f32="__nv_fast_powf", f64="", ulp=64),
    # IEEE operations in a named rounding mode: exact (the interpreter rounds exactly)
    **{f"{op}_{m}": Fn(n, f32=f"__nv_{p}{op}{s}_{m}", f64=f"__nv_{d}{op}_{m}")
       for op, n, p, d, s in (("add", 2, "f", "d", ""), ("sub", 2, "f", "d", ""),
                              ("mul", 2, "f", "d", ""), ("rcp", 1, "f", "d", ""),
                              ("fma", 3, "", "", "f"))
       for m in ("rn", "rz", "rd", "ru")},
    **{f"sqrt_{m}": Fn(f32=f"__nv_fsqrt_{m}", f64=f"__nv_dsqrt_{m}") for m in ("rz", "rd", "ru")},
    "remainder": Fn(2), "scalbn": Fn(2, int_args=(1,)),
    "sinpi": Fn(ulp=2), "cospi": Fn(ulp=2),
    "norm3d": Fn(3, ulp=2), "rnorm3d": Fn(3, ulp=2), "norm4d": Fn(4, ulp=2),
    "rnorm4d": Fn(4, ulp=2),
    # erfcinv, tgamma and the Bessel functions: bounds per dtype and argument range in
    # tests/libdevice_bounds.py (these are the loosest, fp32's); the interpreter gives
    # libdevice's own answers on its special cases (kitjit/interpreter/libm_special.py)
    "erfcinv": Fn(ulp=6), "lgamma": Fn(ulp=6, abs=2.0 ** -20), "tgamma": Fn(ulp=10),
    # Bessel functions: 9 ulp for |x| < 8, else an absolute 2.2e-6 (fp32; fp64 is tighter)
    "j0": Fn(ulp=9, abs=2.2e-6), "j1": Fn(ulp=9, abs=2.2e-6),
    "y0": Fn(ulp=9, abs=2.2e-6), "y1": Fn(ulp=9, abs=2.2e-6),
    # order n first (an int32); CUDA bounds jn for n = 128 only (absolute 2.2e-6, fp32)
    "jn": Fn(2, int_args=(0,), ulp=16, abs=2.2e-6), "yn": Fn(2, int_args=(0,), ulp=16,
                                                              abs=2.2e-6),
}


def symbol(name: str, f64: bool) -> str | None:
    """The libdevice function `name` calls on fp32 (f64=False) or fp64; None: no such one."""
    fn = FNS[name]
    if f64:
        if fn.f64 == "":
            return None
        return fn.f64 or f"__nv_{fn.symbol or name}"
    return fn.f32 or f"__nv_{fn.symbol or name}f"
