"""Control flow: the `for`, `while` and `if` ops (their regions and carried types come from
`frontend/codegen/statements.py`, which also ends each region with its `yield`).

Call rules: kit.static_assert.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Block, Op, Value
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import TileType

from .call_rules import Call, call_rule


class ControlOps:
    """Typing rules of the control family."""

    @typing_rule("for")
    def for_op(self, bounds: list[Value], inits: list[Value], types: list[TileType],
               body: Block) -> Op:
        """A `for` over `bounds` (lb, ub, step) carrying `inits` (of `types`) through `body`."""
        return self.emit("for", [*bounds, *inits], types, regions=[body])

    @typing_rule("if")
    def if_op(self, cond: Value, types: list[TileType], then: Block, orelse: Block) -> Op:
        """An `if` on the i1 scalar `cond` whose branches yield values of `types`."""
        return self.emit("if", [cond], types, regions=[then, orelse])


    @typing_rule("while")
    def while_op(self, inits: list[Value], types: list[TileType], cond: Block,
                 body: Block) -> Op:
        """A `while` carrying `inits` (of `types`): region `cond` takes the carried values and
        yields the i1 scalar condition; region `body` takes them and yields the next ones."""
        for a, t in zip(inits, types):
            if a.shape != t.shape or a.dtype is not t.dtype:
                raise self.error(f"internal: while carries {a.type} as {t}")
        return self.emit("while", list(inits), types, regions=[cond, body])


# -------------------------------------------------------------------- kit.<name> calls
@call_rule("static_assert", lambda cond, msg="": None)
def _static_assert(c: Call) -> Any:
    cond = c.const("cond")
    if not cond:
        raise c.err(f"static assertion failed{': ' + str(c['msg']) if c['msg'] else ''}")
    return None
