"""Scans, sorts and histograms."""

from __future__ import annotations

from .base import builtin


@builtin
def associative_scan(input, axis, combine_fn, reverse=False):
    """Inclusive scan of `input` (a tile, or a tuple of tiles of one shape) along `axis`
    with `combine_fn` (a `@kit.jit` function of 2N scalars returning N, as for
    `kit.reduce`), which must be associative: out[i] = x[0] + ... + x[i] with + the
    combine, left operand first. `reverse=True` scans from the end: out[i] = x[n-1] + ...
    + x[i] (the later element on the left, as a forward scan of the flipped axis)."""


@builtin
def cumsum(input, axis=0, reverse=False, dtype=None):
    """Inclusive cumulative sum along `axis`. As Triton: bf16 accumulates in fp32, signed
    ints narrower than 32 bits in int32, unsigned ones (and bool) in uint32; fp16 stays
    fp16; `dtype` overrides."""


@builtin
def cumprod(input, axis=0, reverse=False):
    """Inclusive cumulative product along `axis` (bf16 in fp32, other dtypes in their own)."""


@builtin
def sort(x, dim=None, descending=False):
    """Sort along the last dim (`dim` must be None or the last; a power of two long), by
    Triton's bitonic network and its compare-and-swap rule, bit for bit Triton 3.6's
    `tl.sort`. On finite values an ordinary sort; a pair holding a NaN (which compares
    false) or two equal values of different bits (-0.0, +0.0) ends as two copies of one of
    them, so with NaNs or signed zeros the result is Triton's, not a sorted permutation."""


@builtin
def topk(x, k, dim=None):
    """The `k` largest values along the last dim, largest first (values only), bit for bit
    Triton 3.6's `tl.topk`: bitonic stages up to k, then rounds of `kit.max` over the
    elements k apart (NaN skipped, as kit.max) each followed by a merge; `k` a power of two
    no larger than the dim. For k < n the values widen as kit.max widens (fp16/bf16 to
    fp32, ints narrower than 32 bits to int32), as Triton's. NaN and signed zeros: see
    `kit.sort`."""


@builtin
def histogram(input, num_bins, mask=None):
    """Counts (int32 [num_bins]) of the integers of `input` in bins of width 1 from 0.
    Values outside [0, num_bins) and masked-off elements are not counted (Triton leaves
    out-of-range values undefined)."""
