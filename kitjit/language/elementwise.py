"""Elementwise math and selection on tiles (Triton's names and semantics)."""

from __future__ import annotations

from .base import builtin


@builtin
def where(condition, x, y):
    """Elementwise select."""


@builtin
def minimum(x, y):
    """Elementwise minimum."""


@builtin
def maximum(x, y):
    """Elementwise maximum."""


@builtin
def exp(x, ftz=False):
    """e**x (fp32 inputs use the hardware's exp2 with a scale). ftz: see kit.exp2."""


@builtin
def exp2(x, ftz=False):
    """2**x. ftz=True flushes results below 2**-126 to zero: the bare MUFU.EX2 instead of
    three instructions (what softmax wants: such terms vanish in its sums anyway)."""


@builtin
def log(x):
    """Natural logarithm."""


@builtin
def log2(x):
    """Base-2 logarithm."""


@builtin
def sqrt(x):
    """Square root (correctly rounded)."""


@builtin
def rsqrt(x):
    """1/sqrt(x) (approximate, like CUDA's rsqrtf)."""


@builtin
def abs(x):
    """Absolute value."""


@builtin
def sin(x):
    """Sine (hardware approximation: sin.approx.f32, absolute error <= 2^-20.5 for |x| <=
    100 pi; the interpreter computes it exactly rounded, so they agree to that bound).
    For libdevice accuracy use kitjit.language.extra.libdevice.sin."""


@builtin
def cos(x):
    """Cosine (hardware approximation: cos.approx.f32, absolute error <= 2^-20.5 for |x| <=
    100 pi; see kit.sin)."""


@builtin
def sigmoid(x):
    """1 / (1 + exp(-x))."""


@builtin
def floor(x):
    """Round toward -inf."""


@builtin
def ceil(x):
    """Round toward +inf."""


@builtin
def cast(x, dtype):
    """Convert to `dtype` (same as `x.to(dtype)`)."""


@builtin
def umulhi(x, y):
    """The high N bits of the 2N-bit product of N-bit integers x and y (int32, uint32,
    int64, uint64). The product is unsigned whatever the signedness, as Triton's
    `tt.mulhiui` (`mul.hi.u32`/`.u64`): the bits of int32 inputs read as uint32."""


@builtin
def fma(x, y, z):
    """x * y + z with one rounding (fma.rn; fp16/bf16 compute in fp32)."""


@builtin
def erf(x):
    """The error function (libdevice's erff/erf: 2 ulp on fp32)."""


@builtin
def fdiv(x, y, ieee_rounding=False):
    """x / y on floats: ieee_rounding=False is `/` (div.full.f32, 2 ulp), True is div_rn."""


@builtin
def div_rn(x, y):
    """x / y correctly rounded (div.rn)."""


@builtin
def sqrt_rn(x):
    """Square root, correctly rounded (sqrt.rn)."""


@builtin
def clamp(x, min, max, propagate_nan=0):
    """min(max(x, min), max) on floats. A NaN x gives `min` unless propagate_nan is
    kit.PropagateNan.ALL, which keeps it NaN; NaN bounds are undefined in Triton and give
    the other operand in kitjit (fmax/fmin)."""


class PropagateNan:
    """Triton's tl.PropagateNan, for kit.clamp."""

    NONE = 0
    ALL = 0xFFFF
