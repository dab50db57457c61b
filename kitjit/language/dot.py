"""Matrix multiply on tensor cores (level 1: mma.sync)."""

from __future__ import annotations

from .base import builtin


@builtin
def dot(input, other, acc=None, input_precision=None, allow_tf32=None,
        max_num_imprecise_acc=None, out_dtype=None):
    """input @ other (+ acc) on tensor cores (mma.sync), Triton's parameters: fp16/bf16/fp8
    inputs with fp32 accumulation (fp16 results with out_dtype=kit.float16), fp32 inputs as
    bf16 splits (input_precision "tf32"/"bf16x3": 3 products, "ieee"/"tf32x3"/"bf16x6": 6),
    int8 inputs into int32; max_num_imprecise_acc accepted (every fp8 product is summed in
    fp32)."""
