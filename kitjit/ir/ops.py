"""The op catalogue of the tile IR.

Conventions: operands of elementwise ops have the same shape and dtype as each other (the
frontend inserts `splat`, `broadcast`, `expand_dims` and `cast` first); scalars have shape
``()``; a pointer tile has a `PointerDType` element type.

========== ============================== ========================================== =========
op         operands                       attrs                                      results
========== ============================== ========================================== =========
constant   -                              value (python int/float/bool)              scalar
program_id -                              axis                                       i32
num_programs -                            axis                                       i32
arange     -                              start, end                                 i32 [end-start]
splat      scalar                         -                                          tile
broadcast  tile                           - (result shape: size-1 dims grow)         tile
expand_dims tile                          axis                                       tile
<binary>   a, b                           - (see BINARY)                             same type
cmp        a, b                           pred in CMP_PREDS                          i1
<unary>    a                              - (see UNARY)                              same type
cast       a                              - (to the result dtype; float->int truncates) tile
select     cond, a, b                     -                                          type of a
addptr     ptr, offset(int)               - (offset counts elements)                 ptr
load       ptr [, mask [, other]]         has_mask, has_other                        element
store      ptr, value [, mask]            has_mask                                   -
reduce     a                              kind in REDUCE_KINDS, axis                 a minus axis
dot        a [M,K], b [K,N], acc [M,N]    -                                          acc's type
convert_layout a                          - (same shape and dtype, other layout)     tile
for        lb, ub, step, *init            - ; region 0: args (iv, *carried), ends in yield   carried
if         cond(i1 scalar)                - ; regions then/else, each ends in yield  yielded
while      *init                          - ; region 0 (cond): args (*carried), yields  carried
                                          the i1 condition; region 1 (body): args
                                          (*carried), yields the next carried
yield      *values                        -                                          -
print      *values                        prefix, hex (kit.device_print / print)     -
assert     cond                           msg (kit.device_assert)                    -
gdc_wait, gdc_launch_dependents  -        - (griddepcontrol)                         -
hint       a                              kind (multiple_of|max_contiguous|          type of a
                                          max_constancy), values (one per dim)
assume     cond (i1 scalar)               - (kit.assume)                             -
========== ============================== ========================================== =========

Integer division `floordiv` and remainder `mod` follow Triton (and C): they truncate toward
zero. `div` is true division on floats only (the frontend casts ints to fp32 first).
"""

BINARY = frozenset({
    "add", "sub", "mul", "div", "floordiv", "mod",
    "and", "or", "xor", "shl", "shr", "minimum", "maximum",
})

UNARY = frozenset({
    "neg", "not", "invert", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs",
    "sin", "cos", "sigmoid", "floor", "ceil",
})

# Math that runs through fp32 when its input is fp16/bf16, and needs a float input.
FLOAT_MATH = frozenset({"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos",
                        "sigmoid", "floor", "ceil"})

CMP_PREDS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})

REDUCE_KINDS = frozenset({"sum", "max", "min", "argmax", "argmin"})

ELEMENTWISE = BINARY | UNARY | {"cmp", "cast", "select", "addptr"}

CONTROL = frozenset({"for", "while", "if", "yield"})

# ----------------------------------------------------------------------------- families
# Every op above, declared with its family: each layer keeps the op in its module of that
# name (see kitjit/ir/registry.py and docs/architecture.md).
from .registry import declare  # noqa: E402

declare("core", "constant", "program_id", "num_programs", "arange")
declare("elementwise", *sorted(BINARY), *sorted(UNARY), "cmp", "cast", "select", "addptr")
declare("memory", "load", "store")
declare("reduction", "reduce")
declare("shape", "splat", "broadcast", "expand_dims")
declare("shape", "convert_layout", made_by="frontend/layout_pass.py")
declare("dot", "dot", "wgmma")
declare("tma", "smem_alloc", "smem_index", "smem_trans", "tma_load", "tma_store",
        "mbar_wait", "mbar_arrive", "barrier", "warpgroup_id", "setmaxnreg")
declare("control", "for", "if")
declare("control", "while")
declare("control", "print", "assert", "gdc_wait", "gdc_launch_dependents")
declare("core", "hint", "assume")
declare("control", "yield", made_by="frontend/codegen (the end of a for/if region)")
