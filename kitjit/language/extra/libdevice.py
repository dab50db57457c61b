"""Triton's libdevice functions (`from triton.language.extra.libdevice import tanh` becomes
`from kitjit.language.extra.libdevice import tanh`).

Each is a marker that compiles to the tile IR's `math` op (kitjit/ir/libm.py). On the GPU the
function is CUDA's libdevice (linked from the `nvidia-cuda-nvcc` wheel's libdevice.10.bc) or
one instruction where PTX has it (rint, fma, sqrt.rn, div.rn, min/max, ...), with libdevice's
error bounds (fp32: tanh 2 ulp, erf 2 ulp, pow 4 ulp, ... see libm.FNS); the interpreter
computes in float64 and rounds once, so the two agree within those bounds, and exactly on
NaN, infinities, zeros and the exact functions; erfcinv, erfcx, tgamma and the Bessel
functions give libdevice's own answer wherever its code decides one (jn(7, 0.0) is NaN,
kitjit/interpreter/libm_special.py). fp32 and fp64 tiles are accepted (fp64 calls
the double version); fp16/bf16 and integer tiles compute in fp32 (Triton refuses them), and
fp16/bf16 results round back. Predicates (isnan, isinf, finitef, isfinited, signbit) return
int32 0/1. libdevice.sqrt on fp32 is sqrt.approx.f32 (1 ulp; as in Triton, whose
NVVMReflect also leaves __CUDA_PREC_SQRT at 0): sqrt_rn is the correctly rounded one.
The integer, conversion and bit functions (clz, mulhi, float2int_rn, ull2double_ru, llrint,
...) take Triton's overloads exactly (kitjit/ir/libm_typed.py) and are exact in the
interpreter, as are the rounding-mode ones (add_rz, fma_ru, sqrt_rd, rcp_rn, ...).
"""

from __future__ import annotations

from ...ir.libm_typed import TYPED
from ..base import namespaced

# Triton's name -> the libm function it is (pow picks powi for an integer exponent)
SUPPORTED = {
    "abs": "fabs", "fabs": "fabs", "floor": "floor", "ceil": "ceil", "trunc": "trunc",
    "rint": "rint", "nearbyint": "nearbyint", "round": "round",
    "sqrt": "sqrt", "sqrt_rn": "sqrt_rn", "rsqrt": "rsqrt", "cbrt": "cbrt", "hypot": "hypot",
    "exp": "exp", "exp2": "exp2", "exp10": "exp10", "expm1": "expm1",
    "log": "log", "log2": "log2", "log10": "log10", "log1p": "log1p",
    "pow": "pow", "ldexp": "ldexp", "fma": "fma",
    "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
    "atan2": "atan2", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "asinh",
    "acosh": "acosh", "atanh": "atanh", "erf": "erf", "erfc": "erfc",
    "isnan": "isnan", "isinf": "isinf", "finitef": "isfinite", "isfinited": "isfinite",
    "signbit": "signbit", "fmod": "fmod", "fmin": "fmin", "fmax": "fmax",
    "copysign": "copysign", "div_rn": "div_rn", "div_rz": "div_rz", "div_rd": "div_rd",
    "div_ru": "div_ru", "fast_expf": "fast_expf", "fast_logf": "fast_logf",
    "fast_dividef": "fast_dividef",
    # (normcdf, cyl_bessel_i0/i1: mpmath in the interpreter; torch's references had been
    # wrong: ndtr(-10) = 0, i0(inf) = NaN)
    "erfcx": "erfcx", "normcdf": "normcdf", "cyl_bessel_i0": "cyl_bessel_i0",
    "cyl_bessel_i1": "cyl_bessel_i1",
    "erfinv": "erfinv", "normcdfinv": "normcdfinv", "rcbrt": "rcbrt",
    "logb": "logb", "fdim": "fdim", "rhypot": "rhypot", "saturatef": "saturatef",
    "rsqrt_rn": "rsqrt_rn", "nextafter": "nextafter",
}

# libdevice's integer, conversion and bit functions (kitjit/ir/libm_typed.py) and the
# float functions added with them (rounding modes, fast_*, special functions)
SUPPORTED.update({n: n for n in TYPED})
SUPPORTED.update({n: n for n in (
    *(f"{op}_{m}" for op in ("add", "sub", "mul", "rcp", "fma") for m in ("rn", "rz", "rd", "ru")),
    "sqrt_rz", "sqrt_rd", "sqrt_ru", "fast_sinf", "fast_cosf", "fast_tanf", "fast_log2f",
    "fast_log10f", "fast_exp10f", "fast_powf", "remainder", "scalbn", "sinpi", "cospi",
    "norm3d", "rnorm3d", "norm4d", "rnorm4d", "erfcinv", "lgamma", "tgamma", "j0", "j1", "y0",
    "y1", "jn", "yn")})

# Functions that stay "not supported yet" until the interpreter is shown to give the GPU's
# answer (none today). erfcinv, erfcx, tgamma and the Bessel functions, withdrawn after
# session 7's H200 run, are back: the interpreter now gives libdevice's own answer on its
# special cases and the true value elsewhere (kitjit/interpreter/libm_special.py), within
# CUDA's documented bounds of an H200's (tests/libdevice_bounds.py,
# tests/data/libdevice_h200_special.json).
WITHDRAWN: frozenset[str] = frozenset()
for _name in WITHDRAWN:
    SUPPORTED.pop(_name, None)

# The rest of Triton's libdevice (triton/language/extra/cuda/libdevice.py)
TRITON_OTHERS: tuple[str, ...] = tuple(sorted(WITHDRAWN))

_doc = __doc__
for _name in SUPPORTED:
    globals()[_name] = namespaced(f"libdevice.{_name}",
                                  f"libdevice.{_name} (Triton's): see the module docstring")

# libdevice's bit reinterpretations: @kit.jit functions in libdevice_bits.py
_BITS = ("float_as_int", "float_as_uint", "int_as_float", "uint_as_float",
         "double_as_longlong", "longlong_as_double")

__all__ = list(SUPPORTED)


def __getattr__(name: str):
    if name in _BITS:  # @kit.jit functions: imported on use (kitjit.jit needs the language)
        from . import libdevice_bits

        return getattr(libdevice_bits, name)
    if name in TRITON_OTHERS:
        from ..math import unsupported

        return unsupported("libdevice", name, "libdevice")
    from ..triton_names import missing_module_name_message

    raise AttributeError(missing_module_name_message("libdevice",
                                                     "triton.language.extra.libdevice", name))
