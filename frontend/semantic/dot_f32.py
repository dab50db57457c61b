"""fp32 `kit.dot` as sums of bf16 tensor-core products (split precision).

Why: Triton kernels call `tl.dot` on fp32 tiles all the time (tf32 by default, exact with
`input_precision="ieee"`); kitjit's mma paths take 16-bit inputs. An fp32 value x splits
into bf16 parts x = hi + mid + lo + r (each part the bf16 rounding of what is left, bf16
keeps fp32's exponent range), and a*b becomes a few bf16 mmas accumulated in fp32, the
small terms first:

- "tf32" (the default), "bf16x3": hi*hi + hi*lo + lo*hi with two parts (~16 bits of
  each input kept: at least tf32's 10-bit precision);
- "ieee", "tf32x3", "bf16x6": six products of three parts (~24 bits: fp32 inputs).

Limits: an infinite input makes its low parts inf - inf = NaN (a tf32 mma would give inf);
NaN propagates as usual. On the GPU the default costs three bf16 mmas where Triton issues
one tf32 mma (half bf16's rate): ~1.5x the tensor-core time of Triton's fp32 dot.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Value
from kitjit.ir.types import bfloat16, float32

PRECISIONS = ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")


def parts(b: Any, x: Value, n: int) -> list[Value]:
    """x split into n bf16 tiles whose sum approximates x, largest first."""
    out = []
    rest = x
    for i in range(n):
        p = b.cast(rest, bfloat16)
        out.append(p)
        if i + 1 < n:
            rest = b.binary("sub", rest, b.cast(p, float32))
    return out


def split_dot(b: Any, a: Value, w: Value, acc: Value, precision: str) -> Value:
    """acc + a @ w for fp32 a, w, as bf16 products summed smallest first."""
    if precision in ("tf32", "bf16x3"):
        (ah, al), (wh, wl) = parts(b, a, 2), parts(b, w, 2)
        terms = [(al, wh), (ah, wl), (ah, wh)]
    else:
        (ah, am, al), (wh, wm, wl) = parts(b, a, 3), parts(b, w, 3)
        terms = [(am, wm), (al, wh), (ah, wl), (am, wh), (ah, wm), (ah, wh)]
    for x, y in terms:
        acc = b.emit1("dot", [x, y, acc], acc.type)
    return acc
