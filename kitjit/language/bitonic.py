"""Triton's `tl.bitonic_merge`: the merge half of a bitonic sort, written over kitjit's own
ops (reshape, flip, where) and inlined where it is called. Kernels that build their own
sorts and top-k from merges of bitonic runs (`triton.language.standard` users) call it."""

from __future__ import annotations

from ..jit import jit
from . import control, core, elementwise, shape  # noqa: F401  (the markers are registered)
from .base import BUILTINS as _B
from .base import static_range

_arange, _reshape, _flip, _where = _B["arange"], _B["reshape"], _B["flip"], _B["where"]
_static_assert = _B["static_assert"]


@jit
def _compare_exchange(x, stride, descending):
    """One step of the network along the last dim: element i meets element i ^ stride; the
    lower one of the pair keeps the smaller (larger when descending), the upper one the
    other. As Triton's step, each side takes its partner when `(mine > partner) != (upper
    ^ descending)`, so a pair with a NaN (every comparison false) ends as two copies of one
    element (the lower one ascending, the upper one descending), exactly as Triton's
    interpreter and GPU code leave it."""
    # the last dim n as (n / (2 stride), 2, stride): axis -2 holds the two of each pair
    pairs = _reshape(x, x.shape[:-1] + (x.shape[-1] // (2 * stride), 2, stride))
    partner = _flip(pairs, len(x.shape))
    upper = _reshape(_arange(0, 2), (2, 1)) != 0
    take = (pairs > partner) != (upper ^ descending)
    return _reshape(_where(take, partner, pairs), x.shape)


@jit
def bitonic_merge(x, dim=None, descending=False):
    """Triton's `tl.bitonic_merge(x, dim=None, descending=False)`: merges each bitonic
    sequence along the last dim (`dim` must be None or the last, a power of two long) into
    ascending (descending) order, by log2(n) compare-exchange steps of strides n/2 ... 1.
    On input that is not bitonic the result is the same network's, as Triton's."""
    _static_assert(dim is None or dim == len(x.shape) - 1,
                   "kit.bitonic_merge: only the last dim is supported (as Triton)")
    n = x.shape[-1]
    steps = n.bit_length() - 1
    for i in static_range(steps):
        x = _compare_exchange(x, n >> (i + 1), descending)
    return x
