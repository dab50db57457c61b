"""A representative kernel of each test_lang_* topic compiled for sm_90a (PTX and cubin, no
GPU needed), so that the GPU backend sees the same kernels as the interpreter."""

from __future__ import annotations

import pytest
import torch
from lang_helpers import compile_gpu, rand
from test_lang_arith import binop_kernel, unary_kernel, where_kernel
from test_lang_control_flow import (
    loop_forms_kernel,
    merge_consts_kernel,
    pointer_loop_kernel,
    row_sum_loop_kernel,
    scalar_forms_kernel,
)
from test_lang_dtypes import cast_kernel
from test_lang_launch import grid_kernel, scalar_args_kernel
from test_lang_reductions import reduce_dtype_kernel, reduce_kernel
from test_lang_shapes import (
    cdiv_kernel,
    full_zeros_kernel,
    outer_kernel,
    tile3d_kernel,
    transpose_kernel,
)

import kitjit as kit


# ============================================================================ sm_90a
def _f(n, dt=torch.float32):
    return rand(n, dt)


SM90_CASES = {
    # name: (kernel, args, constexprs)
    "binop-bf16+fp16": lambda: (binop_kernel, (_f(64, torch.bfloat16), _f(64, torch.float16),
                                               _f(64), 64), dict(OP="add", EXPECT=kit.float16,
                                                                 BLOCK=64)),
    "binop-i8-floordiv": lambda: (binop_kernel, (_f(64, torch.int8), _f(64, torch.int8),
                                                 _f(64, torch.int8), 60),
                                  dict(OP="floordiv", EXPECT=kit.int8, BLOCK=64)),
    "binop-u8-shr": lambda: (binop_kernel, (_f(64, torch.uint8), _f(64, torch.uint8),
                                            _f(64, torch.uint8), 64),
                             dict(OP="shr", EXPECT=kit.uint8, BLOCK=64)),
    "binop-cmp": lambda: (binop_kernel, (_f(64), _f(64), _f(64, torch.bool), 64),
                          dict(OP="le", EXPECT=kit.int1, BLOCK=64)),
    "unary-sin-fp16": lambda: (unary_kernel, (_f(64, torch.float16), _f(64, torch.float16),
                                              64), dict(FN="sin", BLOCK=256)),
    "unary-sigmoid-bf16": lambda: (unary_kernel, (_f(64, torch.bfloat16),
                                                  _f(64, torch.bfloat16), 64),
                                   dict(FN="sigmoid", BLOCK=256)),
    "where": lambda: (where_kernel, (_f(64), _f(64), _f(64), 64), dict(BLOCK=128)),
    "argmin-axis0-keep": lambda: (reduce_kernel, (_f((16, 32)), _f(32, torch.int32), 16, 32,
                                                  32), dict(KIND="argmin", AXIS=0, KEEP=True,
                                                            BM=16, BN=32)),
    "max-axis1": lambda: (reduce_kernel, (_f((16, 32)), _f(16), 16, 32, 32),
                          dict(KIND="max", AXIS=1, KEEP=False, BM=16, BN=32)),
    "reduce-dtypes-i8": lambda: (reduce_dtype_kernel, (_f(64, torch.int8),
                                                       _f(4, torch.int32), 60), dict(BLOCK=64)),
    "cast-f32-u8": lambda: (cast_kernel, (_f(64), _f(64, torch.uint8), 64), dict(BLOCK=64)),
    "cast-bool-bf16": lambda: (cast_kernel, (_f(64, torch.bool), _f(64, torch.bfloat16), 64),
                               dict(BLOCK=64)),
    "outer": lambda: (outer_kernel, (_f(32), _f(64), _f((32, 64)), 32, 64, 64),
                      dict(BM=16, BN=32)),
    "transpose-strided": lambda: (transpose_kernel, (_f((32, 32)), _f((32, 32)), 32, 32, 64,
                                                     2, 32), dict(BM=16, BN=16)),
    "loop-carried": lambda: (row_sum_loop_kernel, (_f((4, 64)), _f((4, 3)), 200, 208),
                             dict(BLOCK=64)),
    "loop-forms": lambda: (loop_forms_kernel, (_f(16, torch.int32), 0, 10, 3), dict(BLOCK=16)),
    "grid-3d": lambda: (grid_kernel, (_f(64, torch.int32),), {}),
    "pointer-loop": lambda: (pointer_loop_kernel, (_f((4, 32)), _f(64), 4, 32),
                             dict(BLOCK=32)),
    "scalar-forms": lambda: (scalar_forms_kernel, (_f(1), _f(8), 5, 0, 10), {}),
    "3d-tiles": lambda: (tile3d_kernel, (_f((8, 8), torch.int32),), dict(BLOCK=8)),
    "merge-consts": lambda: (merge_consts_kernel, (_f(2), 5), {}),
    "scalar-args": lambda: (scalar_args_kernel, (_f(3, torch.int32), 20, 3.25, 2 ** 33 + 5),
                            {}),
    "cdiv": lambda: (cdiv_kernel, (_f(3, torch.int32), 100), dict(BLOCK=64)),
    "full-zeros": lambda: (full_zeros_kernel, (_f(64), 0.5), dict(BLOCK=64)),
}


@pytest.mark.parametrize("case", list(SM90_CASES))
def test_compiles_for_sm90(case):
    kernel, args, consts = SM90_CASES[case]()
    ck = compile_gpu(kernel, *args, **consts)
    assert ck.metadata["arch"] == "sm_90a"
