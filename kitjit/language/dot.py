"""Matrix multiply on tensor cores (level 1: mma.sync)."""

from __future__ import annotations

from ..ir.types import float32
from .base import builtin


@builtin
def dot(input, other, acc=None, input_precision=None, allow_tf32=None,
        max_num_imprecise_acc=None, out_dtype=None):
    """input @ other (+ acc) on tensor cores (mma.sync), Triton's parameters: fp16/bf16/fp8
    inputs with fp32 accumulation (fp16 results with out_dtype=kit.float16), fp32 inputs as
    bf16 splits (input_precision "tf32"/"bf16x3": 3 products, "ieee"/"tf32x3"/"bf16x6": 6),
    int8 inputs into int32; max_num_imprecise_acc accepted (every fp8 product is summed in
    fp32). 3-d tiles [B, M, K] x [B, K, N] (acc [B, M, N]) give Triton's batched dot: one
    2-d dot per batch index (M, N, K >= 16), each by the rules above."""


@builtin
def dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None,
               fast_math=False, lhs_k_pack=True, rhs_k_pack=True, out_dtype=float32):
    """Triton's microscaled product: acc + (lhs * lhs_scale) @ (rhs * rhs_scale) with fp32
    accumulation. Formats "e2m1" (two fp4 codes per uint8, the first in the low nibble,
    packed along K, or along M / N with lhs_k_pack / rhs_k_pack=False), "e4m3", "e5m2" (uint8
    bits or the fp8 dtype), "bf16", "fp16"; scales are uint8 e8m0 exponents (2**(s-127),
    255 = NaN), lhs_scale [M, K//32] and rhs_scale [N, K//32] (not transposed), or None.
    Lowered as Triton does on Hopper: each side upcast to bf16 (fp16 when a side is "fp16";
    bf16 with fp16 is refused, as by Triton's sm_90 compiler), multiplied by its scale in that
    type (Triton's bits: s = 0 is 0.0, not 2**-127), then kit.dot. A scale of 255 makes its
    32 operand values NaN; fast_math=True skips that select (Triton's fast_math), leaving
    value * inf. out_dtype must be kit.float32; 2-d tiles only for now. (*_k_pack=False
    works here; Triton 3.6's sm_90 compiler cannot build it.)"""
