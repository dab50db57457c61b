"""The tile IR: one small SSA form that the frontend writes, passes rewrite, and both the
LLVM backend and the interpreter read.

A `Function` has arguments and a body `Block`. A block is a list of `Op`s; an op has operand
values, result values, attributes, and (for ``for`` and ``if``) nested blocks called
regions. Every value has a `TileType`. The op catalogue is in `kitjit.ir.ops`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .types import TileType


@dataclass(frozen=True)
class Loc:
    """A place in the user's source: what error messages point at."""

    file: str
    line: int
    col: int = 0
    end_col: int | None = None
    func: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"


_ids = itertools.count()


class Value:
    """An SSA value. `owner` is the op that defines it, or the block whose argument it is."""

    __slots__ = ("type", "name", "owner", "id")

    def __init__(self, type: TileType, name: str = "", owner: Any = None):
        self.type = type
        self.name = name
        self.owner = owner
        self.id = next(_ids)

    @property
    def dtype(self):
        return self.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    def __repr__(self) -> str:
        return f"%{self.name or self.id}:{self.type}"


class Block:
    """A straight-line list of ops with block arguments (a loop's induction variable and
    carried values)."""

    def __init__(self, args: list[Value] | None = None):
        self.args: list[Value] = list(args or [])
        for a in self.args:
            a.owner = self
        self.ops: list[Op] = []

    def add_arg(self, type: TileType, name: str = "") -> Value:
        v = Value(type, name, self)
        self.args.append(v)
        return v

    def append(self, op: Op) -> Op:
        self.ops.append(op)
        return op

    @property
    def terminator(self) -> Op | None:
        return self.ops[-1] if self.ops and self.ops[-1].name == "yield" else None


@dataclass(eq=False)
class Op:
    """One operation. Attributes are plain Python values (ints, floats, strings, dtypes)."""

    name: str
    operands: list[Value]
    results: list[Value] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    regions: list[Block] = field(default_factory=list)
    loc: Loc | None = None

    def __post_init__(self):
        for r in self.results:
            r.owner = self

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, self.name
        return self.results[0]

    def __repr__(self) -> str:
        return f"Op({self.name})"


class Function:
    """A kernel (or, before inlining, a device function) in tile IR."""

    def __init__(self, name: str, args: list[Value], attrs: dict[str, Any] | None = None):
        self.name = name
        self.body = Block(args)
        self.attrs: dict[str, Any] = dict(attrs or {})

    @property
    def args(self) -> list[Value]:
        return self.body.args

    def walk(self):
        """Every op, pre-order, nested regions included."""
        yield from walk_block(self.body)

    def __str__(self) -> str:
        from .printer import print_function

        return print_function(self)


def walk_block(block: Block):
    for op in block.ops:
        yield op
        for r in op.regions:
            yield from walk_block(r)
