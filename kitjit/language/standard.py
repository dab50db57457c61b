"""Triton's small standard-library helpers written in the language itself (`@kit.jit`
functions over the markers, inlined where they are called): `zeros_like`, `swizzle2d`,
`softmax`; and the compile-time helpers `_log2`, `_is_power_of_two` that kernels copied from
Triton's own library import from `triton.language.standard`."""

from __future__ import annotations

from ..jit import jit
from . import core, elementwise, reduction  # noqa: F401  (the markers are registered)
from .base import BUILTINS as _B

_full, _minimum, _exp, _fdiv = _B["full"], _B["minimum"], _B["exp"], _B["fdiv"]
_max, _sum = _B["max"], _B["sum"]


@jit
def zeros_like(input):
    """A tile of zeros with `input`'s shape and dtype."""
    return _full(input.shape, 0, input.dtype)


@jit
def swizzle2d(i, j, size_i, size_j, size_g):
    """Maps the row-major index (i, j) of a size_i x size_j grid to the order that walks
    groups of `size_g` rows column by column (tile orders that reuse operands in L2); the
    last group may have fewer rows. Returns (new_i, new_j)."""
    linear = i * size_j + j
    per_group = size_g * size_j
    first_row = (linear // per_group) * size_g
    rows = _minimum(size_i - first_row, size_g)
    within = linear % per_group
    return first_row + within % rows, within // rows


@jit
def softmax(x, dim=None, keep_dims=False, ieee_rounding=False):
    """exp(x - max) / sum along `dim` (0 when None), as Triton's `tl.softmax` computes it;
    `keep_dims` is passed to the max and the sum, `ieee_rounding` to the division."""
    if dim is None:
        d = 0
    else:
        d = dim
    e = _exp(x - _max(x, d, keep_dims=keep_dims))
    return _fdiv(e, _sum(e, d, keep_dims=keep_dims), ieee_rounding)


def _log2(i: int) -> int:
    """floor(log2(i)) of a compile-time int (Triton's `tl.standard._log2`, which kernels copied
    from Triton's bitonic sort call)."""
    n = int(getattr(i, "value", i))
    return max(n.bit_length() - 1, 0)


def _is_power_of_two(i: int) -> bool:
    """Whether a compile-time int is a power of two (Triton's `tl.standard._is_power_of_two`)."""
    n = int(getattr(i, "value", i))
    return n > 0 and n & (n - 1) == 0


STANDARD = ["zeros_like", "swizzle2d", "softmax", "add", "sub", "mul", "load_tensor_descriptor",
            "store_tensor_descriptor"]


@jit
def add(x, y, sanitize_overflow=True):
    """Triton's functional `tl.add(x, y)`: `x + y` (`sanitize_overflow` belongs to Triton's
    overflow sanitizer, which kitjit does not have: ignored)."""
    return x + y


@jit
def sub(x, y, sanitize_overflow=True):
    """Triton's functional `tl.sub(x, y)`: `x - y` (`sanitize_overflow`: as in `add`)."""
    return x - y


@jit
def mul(x, y, sanitize_overflow=True):
    """Triton's functional `tl.mul(x, y)`: `x * y` (`sanitize_overflow`: as in `add`)."""
    return x * y


@jit
def _logical_and(x, y):
    """Triton's `x.logical_and(y)` of boolean tiles (x != 0 and y != 0 for others, where
    Triton refuses non-bool tiles)."""
    return (x != 0) & (y != 0)


@jit
def _logical_or(x, y):
    """Triton's `x.logical_or(y)` (as `_logical_and`)."""
    return (x != 0) | (y != 0)


from .triton_names import language_attr as _language_attr  # noqa: E402
from .triton_names import module_getattr as _module_getattr  # noqa: E402
from .triton_names import top_attr as _top_attr  # noqa: E402

__getattr__ = _module_getattr("kitjit.language.standard", "triton.language.standard",
                              _language_attr, _top_attr)


@jit
def load_tensor_descriptor(desc, offsets):
    """Triton's functional `tl.load_tensor_descriptor(desc, offsets)`: `desc.load(offsets)`."""
    return desc.load(offsets)


@jit
def store_tensor_descriptor(desc, offsets, value):
    """Triton's functional `tl.store_tensor_descriptor(desc, offsets, value)`:
    `desc.store(offsets, value)`."""
    desc.store(offsets, value)
