"""Group TMA loads that complete on one mbarrier.

An mbarrier made by `kit.mbarriers(n)` expects one arrival per phase. TMA loads written in a
row on the same barrier (`a[s]` and `b[s]` on `ready[s]`) must therefore share a single
`arrive.expect_tx` carrying their total byte count. This pass marks the first load of each
run with `expect` = total bytes and the others with `expect` = 0; the backend and the
interpreter both read the mark, so they agree on the arrivals.

Two barriers are "the same" when their expressions are equal after value numbering:
`ready[j % S]` written twice computes the same barrier.
"""

from __future__ import annotations

from kitjit.ir.core import Block, Function, Op, Value

_PURE = frozenset({"constant", "add", "sub", "mul", "floordiv", "mod", "and", "or", "xor",
                   "shl", "shr", "cast", "smem_index", "program_id", "minimum", "maximum"})
# ops after which a new run starts
_BREAK = frozenset({"mbar_wait", "mbar_arrive", "wgmma", "barrier", "named_bar", "for",
                    "while", "if",
                    "store", "tma_store", "yield"})


def value_number(v: Value, depth: int = 0):
    o = v.owner
    if depth > 16 or not isinstance(o, Op) or o.name not in _PURE:
        return ("v", v.id)
    attrs = tuple(sorted((k, repr(x)) for k, x in o.attrs.items()))
    return (o.name, attrs, tuple(value_number(x, depth + 1) for x in o.operands))


def group_tma_loads(fn: Function) -> Function:
    _block(fn.body)
    return fn


def _block(block: Block) -> None:
    first: Op | None = None
    key = None
    for op in block.ops:
        for r in op.regions:
            _block(r)
        if op.name == "tma_load":
            k = value_number(op.operands[-1])
            if first is not None and k == key:
                first.attrs["expect"] += op.attrs.get("recv", op.attrs["bytes"])
                op.attrs["expect"] = 0
            else:
                first, key = op, k
                op.attrs["expect"] = op.attrs.get("recv", op.attrs["bytes"])
        elif op.name in _BREAK:
            first = key = None
