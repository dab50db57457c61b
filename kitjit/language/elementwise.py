"""Elementwise math and selection on tiles (Triton's names and semantics)."""

from __future__ import annotations

from .base import builtin


@builtin
def where(condition, x, y):
    """Elementwise select."""


@builtin
def minimum(x, y, propagate_nan=0):
    """Elementwise minimum; a NaN gives the other operand unless propagate_nan is
    kit.PropagateNan.ALL (then NaN)."""


@builtin
def maximum(x, y, propagate_nan=0):
    """Elementwise maximum; a NaN gives the other operand unless propagate_nan is
    kit.PropagateNan.ALL (then NaN)."""


@builtin
def exp(x, ftz=False):
    """e**x, as Triton's tl.exp: on fp32 (and fp16/bf16, computed in fp32) the hardware's
    ex2.approx.f32 of x * log2(e) rounded to fp32, so the relative error grows with |x|: at
    most 2 + |x| ulp (20 ulp at x = 18, 90 near the overflow at 88.7). The interpreter
    rounds the same product, so the two paths agree within 2 ulp at any x. fp64: libdevice
    (1 ulp). For exp accurate at large |x| use kitjit.language.extra.libdevice.exp.
    ftz: see kit.exp2."""


@builtin
def exp2(x, ftz=False):
    """2**x. ftz=True flushes results below 2**-126 to zero: the bare MUFU.EX2 instead of
    three instructions (what softmax wants: such terms vanish in its sums anyway)."""


@builtin
def log(x):
    """Natural logarithm: libdevice's logf (1 ulp), as Triton's tl.log."""


@builtin
def log2(x):
    """Base-2 logarithm: libdevice's log2f (1 ulp), as Triton's tl.log2."""


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
    """Sine: libdevice's sinf (2 ulp at any argument, with an exact range reduction), as
    Triton's tl.sin. The interpreter rounds the exact value once, so the two paths agree
    within 2 ulp. (The hardware's sin.approx.f32, Triton's libdevice.fast_sinf, is not
    offered yet: its absolute error grows as |x| * 2**-24, 2**-16 at x = 255.)"""


@builtin
def cos(x):
    """Cosine: libdevice's cosf (2 ulp at any argument), as Triton's tl.cos; see kit.sin."""


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


@builtin
def inline_asm_elementwise(asm, constraints, args, dtype, is_pure, pack):
    """Triton's inline assembly over tiles: `asm` (PTX, operands `$0`..., outputs first) runs
    once per `pack` elements of the broadcast `args`; `constraints` is LLVM's ("=r,r,r");
    elements narrower than 32 bits are packed into 32-bit registers (4 x int8 in one "r");
    `dtype` is one dtype (one result tile) or a tuple (a tuple of tiles); `is_pure=False`
    keeps the asm even when its results are unused. GPU only: the CPU interpreter cannot run
    PTX (as Triton's interpreter, it raises)."""


@builtin
def map_elementwise(scalar_fn, *args, pack=1):
    """Triton's: `scalar_fn` (a @kit.jit function of scalars) over the broadcast `args`;
    returns one tile or a tuple. kitjit inlines it over whole tiles (its ops are
    elementwise); per-element control flow in it and pack > 1 are not supported yet."""
