"""The `signal` family: flags in memory that programs (on this GPU or on peers, through
torch's symmetric memory) wait on and set, with the memory order that makes the data written
before a flag visible to whoever sees the flag.

Call rules: kit.signal_wait, kit.signal_set, kit.signal_add. Each takes one pointer (a
scalar, not a tile) to a 32- or 64-bit integer; the whole program (CTA) takes part: one
thread spins or writes, a CTA barrier orders the others around it (backend/lower/signal.py).
"""

from __future__ import annotations

from typing import Any

from kitjit.ir import ops as O
from kitjit.ir.core import Value
from kitjit.ir.registry import typing_rule

from .base import _describe
from .call_rules import Call, call_rule

_INT_NAMES = ("i32", "u32", "i64", "u64")


class SignalOps:
    """Typing rules of the signal family."""

    def _signal_operands(self, what: str, ptr: Any, value: Any) -> list[Value]:
        if not isinstance(ptr, Value) or not ptr.dtype.is_ptr():
            raise self.error(f"kit.{what} needs a pointer to a signal, got {_describe(ptr)}",
                             "pass a signal pad (an int32/uint32 tensor) plus an offset, or "
                             "a pointer loaded from handle.signal_pad_ptrs_dev")
        if ptr.shape != ():
            raise self.error(f"kit.{what} on a tile of pointers is not supported yet",
                             "wait on (or set) one signal per call: a scalar pointer")
        elem = ptr.dtype.element_ty
        if elem.name not in _INT_NAMES:
            raise self.error(f"kit.{what} does not support signals of {elem}",
                             "signals are 32- or 64-bit integers (torch's signal pads are "
                             "uint32)")
        value = self.cast(value, elem) if isinstance(value, Value) else \
            self.constant(value, elem)
        if value.shape != ():
            raise self.error(f"kit.{what}: the value must be a scalar, got {_describe(value)}")
        return [ptr, value]

    def _signal_order(self, what: str, sem: Any, sems: tuple, default: str,
                      scope: Any) -> dict:
        sem = default if sem is None else sem
        scope = "sys" if scope is None else scope
        if sem not in sems:
            raise self.error(f"kit.{what}: sem must be one of {', '.join(map(repr, sems))}, "
                             f"got {_describe(sem)}")
        if scope not in O.SIGNAL_SCOPES:
            raise self.error(f"kit.{what}: scope must be one of "
                             f"{', '.join(map(repr, O.SIGNAL_SCOPES))}, got {_describe(scope)}",
                             "'sys' for signals that peers over NVLink or the host read, "
                             "'gpu' for programs of one GPU")
        return {"sem": sem, "scope": scope}

    @typing_rule("signal_wait")
    def signal_wait(self, ptr: Any, value: Any, cmp: Any = None, sem: Any = None,
                    scope: Any = None) -> None:
        cmp = "eq" if cmp is None else cmp
        if cmp not in O.SIGNAL_CMPS:
            raise self.error(f"kit.signal_wait: cmp must be one of "
                             f"{', '.join(map(repr, O.SIGNAL_CMPS))}, got {_describe(cmp)}")
        operands = self._signal_operands("signal_wait", ptr, value)
        attrs = {"cmp": cmp, **self._signal_order("signal_wait", sem, O.SIGNAL_WAIT_SEMS,
                                                  "acquire", scope)}
        self.emit("signal_wait", operands, [], attrs)

    @typing_rule("signal_set")
    def signal_set(self, ptr: Any, value: Any, sem: Any = None, scope: Any = None) -> None:
        operands = self._signal_operands("signal_set", ptr, value)
        self.emit("signal_set", operands, [],
                  self._signal_order("signal_set", sem, O.SIGNAL_SET_SEMS, "release", scope))

    @typing_rule("signal_add")
    def signal_add(self, ptr: Any, value: Any, sem: Any = None, scope: Any = None) -> None:
        operands = self._signal_operands("signal_add", ptr, value)
        self.emit("signal_add", operands, [],
                  self._signal_order("signal_add", sem, O.SIGNAL_ADD_SEMS, "release", scope))


# -------------------------------------------------------------------- kit.<name> calls
_STR = "a constant string"


@call_rule("signal_wait", lambda pointer, value, cmp="eq", sem="acquire", scope="sys": None)
def _signal_wait(c: Call) -> Any:
    return c.b.signal_wait(c["pointer"], c["value"], c.const("cmp", _STR),
                           c.const("sem", _STR), c.const("scope", _STR))


@call_rule("signal_set", lambda pointer, value, sem="release", scope="sys": None)
def _signal_set(c: Call) -> Any:
    return c.b.signal_set(c["pointer"], c["value"], c.const("sem", _STR),
                          c.const("scope", _STR))


@call_rule("signal_add", lambda pointer, value, sem="release", scope="sys": None)
def _signal_add(c: Call) -> Any:
    return c.b.signal_add(c["pointer"], c["value"], c.const("sem", _STR),
                          c.const("scope", _STR))
