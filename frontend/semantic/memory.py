"""Memory ops: kit.load and kit.store through tiles of pointers, with masks.

Call rules: kit.load, kit.store.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Value
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import TileType, int1

from .base import _describe
from .call_rules import Call, call_rule


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
    _no_block_pointer_args(c, padding_option="")
    return c.b.load(c["pointer"], c["mask"], c["other"])


@call_rule("store", lambda pointer, value, mask=None, boundary_check=(), cache_modifier="",
           eviction_policy="": None)
def _store(c: Call) -> Any:
    _no_block_pointer_args(c)
    return c.b.store(c["pointer"], c["value"], c["mask"])


def _no_block_pointer_args(c: Call, **more: Any) -> None:
    """boundary_check and padding_option are for block pointers (kit.make_block_ptr), which
    kitjit does not have yet."""
    for k, default in {"boundary_check": (), **more}.items():
        v = c[k]
        if v is not None and v != default and not (isinstance(v, (tuple, list)) and not v):
            raise c.err(f"kit.{c.name}: '{k}' is for block pointers, which are not supported "
                        "yet", "mask the access instead")
