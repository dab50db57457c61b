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
math       a [, b [, c]]                  fn (a key of kitjit/ir/libm.py's FNS)      a's type
addptr     ptr, offset(int)               - (offset counts elements)                 ptr
load       ptr [, mask [, other]]         has_mask, has_other                        element
store      ptr, value [, mask]            has_mask                                   -
atomic_rmw ptr, val [, mask]              kind in ATOMIC_KINDS, sem, scope, has_mask old values
atomic_cas ptr, cmp, val                  sem, scope                                 old values
signal_wait ptr(scalar), value            cmp in SIGNAL_CMPS, sem, scope (spin until  -
                                          `*ptr cmp value`; the whole program waits)
signal_set ptr(scalar), value             sem, scope (after the program's earlier     -
                                          writes, one thread stores value)
signal_add ptr(scalar), value             sem, scope (as signal_set, adds; no result) -
umulhi     a, b (ints)                    - (high half of the 2N-bit product)        same type
inline_asm *args (same shape)             asm, constraints, is_pure, pack            1+ tiles
                                          (kit.inline_asm_elementwise)               of args'
                                                                                     shape
reduce     a                              kind in REDUCE_KINDS, axis                 a minus axis
reduce_combine *xs (same shape)           axis; region 0: 2N scalar args (lhs, rhs)  xs minus axis
                                          ends in yield of N (the combine_fn)
scan       *xs (same shape)               axis, reverse; region 0 as reduce_combine  like xs
sort       x                              descending, k (the top k kept, <= the      [.., k]
                                          last dim)
histogram  x(int) [, mask]                num_bins, has_mask                         i32 [num_bins]
dot        a [M,K], b [K,N], acc [M,N]    -                                          acc's type
convert_layout a                          - (same shape and dtype, other layout)     tile
permute    a                              dims (result dim i is a's dim dims[i])     tile
reshape    a                              - (result shape; row-major order kept)     tile
join       a, b (same type)               -                                          [..., 2]
split      a [..., 2]                     -                                          2 tiles
cat        a, b (same type)               - (along dim 0)                            [2n, ...]
flip       a                              dim                                        tile
gather     src, index(int)                axis                                       index's shape
for        lb, ub, step, *init            - ; region 0: args (iv, *carried), ends in yield   carried
if         cond(i1 scalar)                - ; regions then/else, each ends in yield  yielded
while      *init                          - ; region 0 (cond): args (*carried), yields  carried
                                          the i1 condition; region 1 (body): args
                                          (*carried), yields the next carried
yield      *values                        -                                          -
print      *values                        prefix, hex (kit.device_print / print)     -
assert     cond                           msg (kit.device_assert)                    -
gdc_wait, gdc_launch_dependents  -        - (griddepcontrol)                         -
read_sreg  -                              name: smid | globaltimer (Triton's            i32 |
                                          tl.extra.cuda.smid / globaltimer)           i64
cluster_id, cluster_ctaid  -                axis (a CTA's place in its cluster:        i32
                                          thread-block clusters, `cluster=` launch)
cluster_ctarank, num_cluster_ctas  -      -                                          i32
cluster_barrier -                         - (barrier.cluster arrive.release + wait)  -
cluster_load src (2-d shared), rank       - (the tile of CTA `rank` of the cluster:  tile
                                          mapa + ld.shared::cluster)
cluster_store dst (2-d shared), rank, value - (st.shared::cluster into CTA `rank`)   -
cluster_arrive bar (one mbarrier), rank   - (kit.mbarrier_arrive(bar, cta=rank):     -
                                          mbarrier.arrive on CTA `rank`'s copy of
                                          bar; release scope: fn.attrs mbar_scope,
                                          frontend/cluster_scope.py)
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

# kit.atomic_<kind>; float max/min use Triton's trick on the bits (see frontend/semantic/
# atomics.py). The memory orders and scopes of atomics, Triton's spelling.
ATOMIC_KINDS = frozenset({"add", "max", "min", "and", "or", "xor", "xchg"})
ATOMIC_SEMS = ("acq_rel", "acquire", "release", "relaxed")
ATOMIC_SCOPES = ("gpu", "cta", "sys")

# kit.signal_wait / signal_set / signal_add (the `signal` family: flags in peer or local
# memory, for kernels that communicate across GPUs or across the programs of one grid)
SIGNAL_CMPS = ("eq", "ne", "ge", "gt", "le", "lt")
SIGNAL_WAIT_SEMS = ("acquire", "relaxed")
SIGNAL_SET_SEMS = ("release", "relaxed")
SIGNAL_ADD_SEMS = ("release", "acq_rel", "relaxed")
SIGNAL_SCOPES = ("sys", "gpu")

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
declare("reduction", "reduce", "reduce_combine")
declare("scan", "scan", "sort", "histogram")
declare("shape", "splat", "broadcast", "expand_dims")
declare("shape", "convert_layout", made_by="frontend/layout_pass.py")
declare("dot", "dot", "wgmma")
declare("tma", "smem_alloc", "smem_index", "smem_trans", "tma_load", "tma_store",
        "mbar_wait", "mbar_arrive", "barrier", "warpgroup_id", "setmaxnreg")
declare("tma", "named_bar")
declare("tma", "smem_store", "smem_load")
declare("tma", "tma_desc_create")
declare("control", "for", "if")
declare("control", "while")
declare("control", "print", "assert", "gdc_wait", "gdc_launch_dependents", "read_sreg")
declare("core", "hint", "assume")
declare("control", "yield", made_by="frontend/codegen (the end of a for/if region)")
declare("shape", "permute", "reshape", "join", "split", "cat", "flip", "gather")
declare("memory", "atomic_rmw", "atomic_cas")
declare("elementwise", "umulhi")
declare("elementwise", "inline_asm")
declare("elementwise", "math")
declare("signal", "signal_wait", "signal_set", "signal_add")
declare("cluster", "cluster_id", "cluster_ctaid", "cluster_ctarank", "num_cluster_ctas",
        "cluster_barrier", "cluster_load", "cluster_store", "cluster_arrive")
