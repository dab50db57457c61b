"""Pointers to const (Triton's `X: tl.const` parameter annotation): loads through them are
fine, a store or an atomic through one, or through a pointer computed from one, is a compile
error at the user's line (Triton's compiler: "Cannot store to a constant pointer").

kitjit's pointer dtypes carry no const flag; instead the kernel records which parameters are
const (`fn.attrs["_const_ptrs"]`: value id -> parameter name) and a store walks its pointer's
definition back through the ops that computed it. A pointer carried through a loop or chosen
by an `if` is not followed past the loop or branch (no error there; Triton's would)."""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Op, Value


def const_root(fn: Any, ptr: Value) -> str | None:
    """The name of the const parameter `ptr` was computed from, or None."""
    const = fn.attrs.get("_const_ptrs")
    if not const:
        return None
    seen: set[int] = set()
    stack = [ptr]
    while stack:
        v = stack.pop()
        if v.id in seen:
            continue
        seen.add(v.id)
        if v.id in const:
            return const[v.id]
        if isinstance(v.owner, Op):
            stack += [o for o in v.owner.operands if o.dtype.is_ptr()]
    return None


def is_const_annotation(annotation: Any) -> bool:
    """`kit.const` / `tl.const`, or its name as a string annotation (`from __future__ import
    annotations`)."""
    from kitjit.language.base import const

    if annotation is const:
        return True
    return isinstance(annotation, str) and annotation.strip("'\"").split(".")[-1] == "const"
