"""One op name, three layers: the registry that ties an op's typing rule, its lowering and
its interpreter semantics together.

Every tile-IR op is declared once in `kitjit/ir/ops.py` with its family. Each layer keeps
one module per family under the same name and registers what it implements there:

========== ======================================= ==========================================
layer      module                                  registers, with
========== ======================================= ==========================================
typing     ``frontend/semantic/<family>.py``       ``@typing_rule("load")`` on the Builder
                                                   method that type-checks and emits the op
lowering   ``backend/lower/<family>.py``           ``@lowering("load")`` on the Lowering
                                                   method that emits its LLVM IR
semantics  ``kitjit/interpreter/<family>.py``      ``@semantics("load")`` on the function that
                                                   makes its numpy handler
========== ======================================= ==========================================

The backend and the interpreter dispatch through this table (`lowering_of`, `semantics_of`),
so an op is reachable in a layer exactly when it is registered there, and
`tests/test_registry.py` fails when a declared op lacks any of the three. The registry holds
plain functions; the layers decide how to call them (the backend passes its `Lowering`,
the interpreter its compiler).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# The families, in the order docs/architecture.md lists them. A family's module has the
# same name in every layer.
FAMILIES = ("core", "elementwise", "memory", "reduction", "scan", "shape", "dot", "tma",
            "control", "random", "signal", "cluster")

LAYERS = ("typing", "lowering", "semantics")


@dataclass
class OpDef:
    """An op of the tile IR: its family and what each layer registered for it."""

    name: str
    family: str
    typing: Callable | None = None
    lowering: Callable | None = None
    semantics: Callable | None = None
    made_by: str | None = None  # a pass that emits it instead of a typing rule
    where: dict[str, str] = field(default_factory=dict)  # layer -> module that registered it


OPS: dict[str, OpDef] = {}


def declare(family: str, *names: str, made_by: str | None = None) -> None:
    """Declare ops of `family` (kitjit/ir/ops.py does this for every op). `made_by` names the
    pass that creates the op where no typing rule of the frontend does (convert_layout)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown op family '{family}' (one of {', '.join(FAMILIES)})")
    for n in names:
        if n in OPS and OPS[n].family != family:
            raise ValueError(f"op '{n}' declared in families '{OPS[n].family}' and '{family}'")
        OPS.setdefault(n, OpDef(n, family, made_by=made_by))


def _register(layer: str, names: tuple[str, ...]) -> Callable[[Callable], Callable]:
    def deco(fn: Callable) -> Callable:
        for n in names:
            d = OPS.get(n)
            if d is None:
                raise KeyError(f"{layer} registered for undeclared op '{n}': declare it in "
                               "kitjit/ir/ops.py first")
            if getattr(d, layer) is not None and getattr(d, layer) is not fn:
                raise ValueError(f"op '{n}' has two {layer} entries "
                                 f"({d.where[layer]} and {fn.__module__})")
            setattr(d, layer, fn)
            d.where[layer] = fn.__module__
        return fn
    return deco


def typing_rule(*names: str) -> Callable[[Callable], Callable]:
    """Mark a frontend Builder method as the typing rule of ops `names`."""
    return _register("typing", names)


def lowering(*names: str) -> Callable[[Callable], Callable]:
    """Mark a backend Lowering method `(self, op) -> None` as the lowering of ops `names`."""
    return _register("lowering", names)


def semantics(*names: str) -> Callable[[Callable], Callable]:
    """Mark an interpreter function as the semantics of ops `names`."""
    return _register("semantics", names)


def lowering_of(name: str) -> Callable | None:
    d = OPS.get(name)
    return d.lowering if d is not None else None


def semantics_of(name: str) -> Callable | None:
    d = OPS.get(name)
    return d.semantics if d is not None else None


def family_of(name: str) -> str | None:
    d = OPS.get(name)
    return d.family if d is not None else None


def load_all_layers() -> None:
    """Import every layer, so each has registered its entries (the backend is otherwise
    imported only when something compiles)."""
    import kitjit.backend.lower  # noqa: F401
    import kitjit.frontend.semantic  # noqa: F401
    import kitjit.interpreter  # noqa: F401


def missing() -> list[tuple[str, str]]:
    """(op, layer) pairs with no entry, after `load_all_layers()`."""
    out = []
    for d in OPS.values():
        for layer in LAYERS:
            if layer == "typing" and d.made_by:
                continue
            if getattr(d, layer) is None:
                out.append((d.name, layer))
    return out
