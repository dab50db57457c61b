"""Memory ops: kit.load and kit.store through tiles of pointers, with masks, and atomics.

Call rules: kit.load, kit.store, kit.atomic_{add,max,min,and,or,xor,xchg}, kit.atomic_cas.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir import ops as O
from kitjit.ir.core import Value
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import DType, TileType, int1

from .base import _describe
from .block_ptr import BlockPointer, load_block, store_block
from .call_rules import Call, call_rule
from .const_ptr import const_root


class MemoryOps:
    """Typing rules of the memory family."""

    @typing_rule("load")
    def load(self, ptr: Any, mask: Any = None, other: Any = None) -> Value:
        if not isinstance(ptr, Value) or not ptr.dtype.is_ptr():
            raise self.error(f"kit.load needs a pointer or a tile of pointers, got "
                             f"{_describe(ptr)}", "pass a tensor argument plus offsets")
        elem = ptr.dtype.element_ty
        operands = [ptr]
        shape = ptr.shape
        if mask is not None:
            mask = self._mask(mask)
            shape = self.broadcast_shapes(shape, mask.shape)
        ptr = self.broadcast_to(ptr, shape)
        operands = [ptr]
        if mask is not None:
            operands.append(self.broadcast_to(mask, shape))
            if other is not None:
                o = self.cast(other, elem) if isinstance(other, Value) else \
                    self.constant(other, elem)
                operands.append(self.broadcast_to(o, shape))
        return self.emit1("load", operands, TileType(elem, shape),
                          {"has_mask": mask is not None,
                           "has_other": mask is not None and other is not None})

    @typing_rule("store")
    def store(self, ptr: Any, value: Any, mask: Any = None) -> None:
        if not isinstance(ptr, Value) or not ptr.dtype.is_ptr():
            raise self.error(f"kit.store needs a pointer or a tile of pointers, got "
                             f"{_describe(ptr)}")
        self._check_writable(ptr, "kit.store")
        elem = ptr.dtype.element_ty
        value = self.cast(value, elem) if isinstance(value, Value) else self.constant(value, elem)
        shape = self.broadcast_shapes(ptr.shape, value.shape)
        if mask is not None:
            mask = self._mask(mask)
            shape = self.broadcast_shapes(shape, mask.shape)
        if shape != ptr.shape:
            # Triton broadcasts the value and the mask to the pointers, never the pointers
            from .base import _shape

            what = "value" if self.broadcast_shapes(ptr.shape, value.shape) != ptr.shape \
                else "mask"
            got = value.shape if what == "value" else mask.shape
            raise self.error(f"kit.store: the {what} of shape {_shape(got)} does not fit the "
                             f"pointers of shape {_shape(ptr.shape)} (Triton stores through "
                             "the pointers' shape)", "give the pointers the value's shape "
                             "(offsets[:, None] * stride + cols[None, :])")
        operands = [self.broadcast_to(ptr, shape), self.broadcast_to(value, shape)]
        if mask is not None:
            operands.append(self.broadcast_to(mask, shape))
        self.emit("store", operands, [], {"has_mask": mask is not None})

    # ---------------------------------------------------------------- atomics
    @typing_rule("atomic_rmw")
    def atomic_rmw(self, kind: str, ptr: Any, val: Any, mask: Any = None, sem: Any = None,
                   scope: Any = None) -> Value:
        """kit.atomic_<kind>: checks the element type as Triton does (fp16/bf16 only add;
        no 8/16-bit ints), casts `val` to it and broadcasts pointer, value and mask."""
        what = f"kit.atomic_{kind}"
        elem = self._atomic_ptr(ptr, what)
        ok = elem.name in ("i32", "u32", "i64", "u64")
        if kind == "add":
            ok = ok or elem.is_floating()
        elif kind in ("max", "min", "xchg"):
            ok = ok or elem.name in ("fp32", "fp64")
        if not ok:
            raise self.error(f"{what} does not support {elem}",
                             "atomics take 32/64-bit ints; add also fp16/bf16/fp32/fp64, "
                             "max/min/xchg also fp32/fp64")
        val = self.cast(val, elem) if isinstance(val, Value) else self.constant(val, elem)
        shape = self.broadcast_shapes(ptr.shape, val.shape)
        if mask is not None:
            mask = self._mask(mask)
            shape = self.broadcast_shapes(shape, mask.shape)
        operands = [self.broadcast_to(ptr, shape), self.broadcast_to(val, shape)]
        if mask is not None:
            operands.append(self.broadcast_to(mask, shape))
        attrs = {"kind": kind, "has_mask": mask is not None, **self._atomic_order(sem, scope,
                                                                                  what)}
        return self.emit1("atomic_rmw", operands, TileType(elem, shape), attrs)

    @typing_rule("atomic_cas")
    def atomic_cas(self, ptr: Any, cmp: Any, val: Any, sem: Any = None,
                   scope: Any = None) -> Value:
        elem = self._atomic_ptr(ptr, "kit.atomic_cas")
        if elem.name not in ("i32", "u32", "i64", "u64", "fp32", "fp64"):
            raise self.error(f"kit.atomic_cas does not support {elem} yet",
                             "compare-and-swap takes 32/64-bit ints and floats")
        cmp = self.cast(cmp, elem) if isinstance(cmp, Value) else self.constant(cmp, elem)
        val = self.cast(val, elem) if isinstance(val, Value) else self.constant(val, elem)
        shape = self.broadcast_shapes(self.broadcast_shapes(ptr.shape, cmp.shape), val.shape)
        operands = [self.broadcast_to(v, shape) for v in (ptr, cmp, val)]
        return self.emit1("atomic_cas", operands, TileType(elem, shape),
                          self._atomic_order(sem, scope, "kit.atomic_cas"))

    def _atomic_ptr(self, ptr: Any, what: str) -> DType:
        if not isinstance(ptr, Value) or not ptr.dtype.is_ptr():
            raise self.error(f"{what} needs a pointer or a tile of pointers, got "
                             f"{_describe(ptr)}", "pass a tensor argument plus offsets")
        self._check_writable(ptr, what)
        return ptr.dtype.element_ty

    def _check_writable(self, ptr: Value, what: str) -> None:
        """A store or atomic through a pointer to const (`X: kit.const`) is an error, as
        Triton's "Cannot store to a constant pointer"."""
        name = const_root(self.fn, ptr)
        if name is not None:
            raise self.error(f"{what} through a pointer to const: '{name}' is annotated "
                             "kit.const (Triton: cannot store to a constant pointer)",
                             f"drop the kit.const annotation of '{name}' to write through it")

    def _atomic_order(self, sem: Any, scope: Any, what: str) -> dict:
        sem = "acq_rel" if sem is None else sem
        scope = "gpu" if scope is None else scope
        if sem not in O.ATOMIC_SEMS:
            raise self.error(f"{what}: sem must be one of {', '.join(map(repr, O.ATOMIC_SEMS))}"
                             f", got {_describe(sem)}")
        if scope not in O.ATOMIC_SCOPES:
            raise self.error(f"{what}: scope must be one of "
                             f"{', '.join(map(repr, O.ATOMIC_SCOPES))}, got {_describe(scope)}")
        return {"sem": sem, "scope": scope}

    def _mask(self, mask: Any) -> Value:
        if isinstance(mask, bool):
            mask = self.constant(mask, int1)
        if not isinstance(mask, Value):
            raise self.error(f"a mask must be a bool tile, got {_describe(mask)}")
        if not mask.dtype.is_bool():
            mask = self.compare("ne", mask, 0)
        return mask


# -------------------------------------------------------------------- kit.<name> calls
# Triton's signatures, parameter for parameter, so that positional arguments bind as there
@call_rule("load", lambda pointer, mask=None, other=None, boundary_check=(), padding_option="",
           cache_modifier="", eviction_policy="", volatile=False: None)
def _load(c: Call) -> Any:
    p = c["pointer"]
    if isinstance(p, BlockPointer):
        if c["mask"] is not None or c["other"] is not None:
            raise c.err("kit.load of a block pointer takes no mask or other",
                        "use boundary_check=(0, 1) and padding_option='zero' or 'nan'")
        return load_block(c.b, p, c.const("boundary_check"), c.const("padding_option"))
    if c.args["boundary_check"] or c.args["padding_option"]:
        raise c.err("boundary_check and padding_option apply to block pointers only",
                    "use mask= and other= with a tile of pointers")
    if isinstance(p, Value) and p.type.is_shared:
        if c["mask"] is not None or c["other"] is not None:
            raise c.err("kit.load of a shared tile takes no mask or other")
        return c.b.smem_load(p)
    return c.b.load(p, c["mask"], c["other"])


@call_rule("store", lambda pointer, value, mask=None, boundary_check=(), cache_modifier="",
           eviction_policy="": None)
def _store(c: Call) -> Any:
    p = c["pointer"]
    if isinstance(p, BlockPointer):
        if c["mask"] is not None:
            raise c.err("kit.store through a block pointer takes no mask",
                        "use boundary_check=(0, 1)")
        return store_block(c.b, p, c["value"], c.const("boundary_check"))
    if c.args["boundary_check"]:
        raise c.err("boundary_check applies to block pointers only", "use mask=")
    if isinstance(p, Value) and p.type.is_shared:
        if c["mask"] is not None:
            raise c.err("kit.store into a shared tile takes no mask")
        return c.b.smem_store(p, c["value"])
    return c.b.store(p, c["value"], c["mask"])


@call_rule(tuple(f"atomic_{k}" for k in sorted(O.ATOMIC_KINDS)),
           lambda pointer, val, mask=None, sem=None, scope=None: None)
def _atomic_rmw(c: Call) -> Any:
    return c.b.atomic_rmw(c.name.removeprefix("atomic_"), c["pointer"], c["val"], c["mask"],
                          c.const("sem", "a constant string"),
                          c.const("scope", "a constant string"))


@call_rule("atomic_cas", lambda pointer, cmp, val, sem=None, scope=None: None)
def _atomic_cas(c: Call) -> Any:
    return c.b.atomic_cas(c["pointer"], c["cmp"], c["val"],
                          c.const("sem", "a constant string"),
                          c.const("scope", "a constant string"))


