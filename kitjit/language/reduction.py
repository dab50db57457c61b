"""Reductions along an axis."""

from __future__ import annotations

from .base import builtin


@builtin
def sum(input, axis=None, keep_dims=False, dtype=None):
    """Sum along `axis` (all axes if None), with Triton 3.6's result dtype: `dtype` if given
    (the tile is converted to it first); else signed ints narrower than 32 bits give int32,
    unsigned ones and bool uint32, and floats keep their dtype. fp16/bf16/fp8 sums accumulate
    in fp32 and are rounded once to that dtype (Triton adds in the narrow dtype itself)."""


@builtin
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True,
        keep_dims=False):
    """Maximum along `axis`, as Triton 3.6 types it: floats narrower than 32 bits (fp16,
    bf16, fp8) give fp32, ints narrower than 32 bits (bool and unsigned too) int32. With
    `return_indices=True` (an axis is then needed): the pair (maximum, index of the first
    maximum), the values in the input's dtype but bf16's in fp32, as in Triton.
    `return_indices_tie_break_left=False` lets Triton return any index of a tie: kitjit
    returns the first one either way."""


@builtin
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True,
        keep_dims=False):
    """Minimum along `axis`; `return_indices` as for `kit.max`."""


@builtin
def argmax(input, axis, tie_break_left=True, keep_dims=False):
    """Index of the maximum along `axis` (the first one on ties; with
    `tie_break_left=False` Triton may return any, kitjit still returns the first)."""


@builtin
def argmin(input, axis, tie_break_left=True, keep_dims=False):
    """Index of the minimum along `axis` (the first one on ties, as for `kit.argmax`)."""


@builtin
def reduce(input, axis, combine_fn, keep_dims=False):
    """Reduce `input` (a tile, or a tuple of tiles of one shape) along `axis` (all axes,
    last first, if None) with `combine_fn`, a `@kit.jit` function of 2N scalars (the left
    group's N values, then the right group's) that returns N values of the inputs' dtypes.
    `combine_fn` must be associative (and commutative: the GPU combines in a tree whose
    order follows the layout; the interpreter halves the axis pairwise). Returns a tile, or
    a tuple for a tuple input."""


@builtin
def xor_sum(input, axis=None, keep_dims=False):
    """Bitwise xor of the integers along `axis` (all axes if None), in their own dtype."""


@builtin
def reduce_or(input, axis, keep_dims=False):
    """Bitwise or of the integers along `axis`, in their own dtype."""
