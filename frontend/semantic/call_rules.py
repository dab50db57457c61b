"""The table of `kit.<name>(...)` call rules.

Each family module registers the builtins it implements with `@call_rule(names, signature)`:
`signature` is a lambda whose parameters are the builtin's (its body is never run), and the
rule is a function of one `Call`. `frontend/codegen/calls.py` binds the user's arguments to the
signature, applies the defaults and calls the rule::

    @call_rule("load", lambda pointer, mask=None, other=None, cache_modifier=None,
               eviction_policy=None, volatile=False: None)
    def _load(c: Call) -> Any:
        return c.b.load(c["pointer"], c["mask"], c["other"])
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kitjit.ir.core import Value

from .base import describe


@dataclass
class CallRule:
    """How `kit.<name>(...)` compiles: its signature and the rule that emits it."""

    name: str
    signature: inspect.Signature
    fn: Callable[[Call], Any]


CALL_RULES: dict[str, CallRule] = {}


def call_rule(names: str | tuple[str, ...], signature: Callable) -> Callable:
    """Register the decorated `fn(c: Call)` as the rule of builtins `names`, whose arguments
    bind to the parameters of `signature`."""
    if isinstance(names, str):
        names = (names,)
    sig = inspect.signature(signature)

    def deco(fn: Callable[[Call], Any]) -> Callable[[Call], Any]:
        for n in names:
            if n in CALL_RULES and CALL_RULES[n].fn is not fn:
                raise ValueError(f"kit.{n} has two call rules ({CALL_RULES[n].fn.__module__} "
                                 f"and {fn.__module__})")
            CALL_RULES[n] = CallRule(n, sig, fn)
        return fn
    return deco


@dataclass
class Call:
    """One `kit.<name>(...)` call being compiled: `args` are bound, defaults applied."""

    cg: Any  # the FunctionCodegen compiling the call
    name: str
    args: dict[str, Any]
    node: ast.AST

    @property
    def b(self) -> Any:
        """The Builder."""
        return self.cg.b

    def __getitem__(self, key: str) -> Any:
        return self.args[key]

    def err(self, msg: str, hint: str | None = None):
        """A CompileError at the call."""
        return self.cg.err(self.node, msg, hint)

    def const(self, key: str, what: str = "a constexpr") -> Any:
        """Argument `key`, which must be known at compile time."""
        v = self.args[key]
        if isinstance(v, Value):
            raise self.err(f"kit.{self.name}: '{key}' must be {what}, got {describe(v)}",
                           "pass it as a kit.constexpr parameter")
        return v
