"""Calls: kit builtins (through the call rules of `frontend/semantic`, one table keyed by
the builtin's name), inlined @kit.jit functions, tile methods (x.to, x.sum, ...), Python
builtins on tiles, and plain Python functions run at compile time."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from kitjit.ir.core import Value
from kitjit.ir.types import DType, float32, int1, int32

from ..errors import CompileError
from ..semantic import CALL_RULES, Call, describe

if TYPE_CHECKING:
    from .build import FunctionCodegen, ParsedFunction

MAX_INLINE_DEPTH = 32
_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update", "add",
                       "setdefault", "discard", "popitem", "sort", "reverse",
                       "__setitem__", "__delitem__", "difference_update",
                       "intersection_update", "symmetric_difference_update"})


class CallsMixin:
    """The call part of FunctionCodegen."""

    def expr_Call(self, node: ast.Call) -> Any:
        fn = self.expr(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                v = self.expr(a.value)
                if isinstance(v, Value) or not isinstance(v, (tuple, list)):
                    raise self.err(a, f"cannot unpack {describe(v)} with *")
                args.extend(v)
            else:
                args.append(self.expr(a))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                raise self.err(k, "**kwargs is not supported in kernels")
            kwargs[k.arg] = self.expr(k.value)
        self.at(node)
        return self.call(fn, args, kwargs, node)

    def call(self, fn: Any, args: list, kwargs: dict, node) -> Any:
        from kitjit.jit import JITFunction

        if isinstance(fn, (_Method, _AggregateMethod)):
            return fn.call(args, kwargs, node) if isinstance(fn, _Method) else \
                fn.fn(self, args, kwargs, node)
        name = getattr(fn, "__kit_builtin__", None)
        if name is not None:
            return _call_builtin(self, name, args, kwargs, node)
        if isinstance(fn, JITFunction):
            return self.inline(fn, args, kwargs, node)
        if fn is print:  # as in Triton, print in a kernel is kit.device_print
            from ..semantic.control import python_print

            return python_print(self, args, kwargs, node)
        if isinstance(fn, DType):
            from ..semantic.elementwise import scalar_constructor

            return scalar_constructor(self, fn, args, kwargs, node)
        if fn is isinstance and len(args) == 2 and not kwargs:
            return _isinstance(args[0], args[1])
        values = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Value)]
        if values:
            return self.python_builtin_on_values(fn, args, kwargs, node)
        if callable(fn):
            self._no_global_mutation(fn, node)
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                raise self.err(node, f"calling {getattr(fn, '__name__', fn)!r} at compile time "
                               f"failed: {type(e).__name__}: {e}",
                               "only @kit.jit functions and kit builtins can take tiles") from e
        raise self.err(node, f"{describe(fn)} is not callable")

    def _no_global_mutation(self, fn: Any, node) -> None:
        """A kernel body runs once per compile, not per launch: a call that mutates a
        module-level (or closed-over) list, dict or set would happen at a time the user
        cannot predict (and not at all on a cache hit), so it is refused."""
        obj = getattr(fn, "__self__", None)
        name = getattr(fn, "__name__", "")
        if not isinstance(obj, (list, dict, set, bytearray)) or name not in _MUTATORS:
            return
        owners = [k for k, v in list(self.globals.items()) + list(self.closure.items())
                  if v is obj]
        if owners:
            raise self.err(node, f"a kernel must not mutate Python objects: '{owners[0]}."
                           f"{name}(...)' changes a {type(obj).__name__} outside the kernel "
                           "at compile time, once per compilation, not per launch",
                           "compute values in the kernel and store them through a pointer; "
                           "kit.static_print shows compile-time values")

    def python_builtin_on_values(self, fn, args, kwargs, node) -> Any:
        b = self.b
        if fn in (min, max) and len(args) == 2 and not kwargs:
            return b.binary("minimum" if fn is min else "maximum", args[0], args[1])
        if fn is abs and len(args) == 1:
            return b.unary("abs", args[0])
        if fn in (float, int, bool) and len(args) == 1:
            return b.cast(args[0], {float: float32, int: int32, bool: int1}[fn])
        name = getattr(fn, "__name__", repr(fn))
        raise self.err(node, f"'{name}' cannot take tiles or run-time values",
                       "only @kit.jit functions and kit builtins run on the GPU; "
                       "decorate helpers with @kit.jit")

    def inline(self, jf, args: list, kwargs: dict, node) -> Any:
        if self.depth >= MAX_INLINE_DEPTH:
            raise self.err(node, f"calls nest deeper than {MAX_INLINE_DEPTH} (recursion?)",
                           "kitjit inlines every call; recursion is not supported")
        parsed = jf.parsed
        params = parsed.params
        fnode = parsed.node
        defaults = fnode.args.defaults
        scope: dict[str, Any] = {}
        if len(args) > len(params):
            raise self.err(node, f"'{jf.__name__}' takes {len(params)} arguments, got "
                           f"{len(args)}")
        for p, a in zip(params, args):
            scope[p] = a
        for k, v in kwargs.items():
            if k not in params:
                raise self.err(node, f"'{jf.__name__}' has no parameter '{k}'")
            if k in scope:
                raise self.err(node, f"'{jf.__name__}' got two values for '{k}'")
            scope[k] = v
        for i, p in enumerate(params):
            if p not in scope:
                di = i - (len(params) - len(defaults))
                if di < 0:
                    raise self.err(node, f"'{jf.__name__}' is missing the argument '{p}'")
                scope[p] = (jf.fn.__defaults__ or ())[di]
        # A kit.constexpr annotation on a callee's parameter does not make a run-time
        # argument constant: as in Triton, the argument decides (06-fused-attention passes
        # the run-time N_CTX and the tiles offs_m/offs_n to constexpr-annotated
        # parameters); a use that needs a constant says so at its own line.
        sub = type(self)(parsed, self.b, scope, self.depth + 1)
        call_loc = self.p.loc(node)
        try:
            result = sub.run()
        except CompileError as e:
            e.add_note(f"in the call of '{jf.__name__}' from here", call_loc)
            raise
        self.b.loc = call_loc
        return result


class _AggregateMethod:
    """A method of a compile-time structure (desc.load of a tensor descriptor), called with
    (codegen, args, kwargs, node)."""

    def __init__(self, fn):
        self.fn = fn


class _Method:
    """A tile method (x.to, x.sum, ...) waiting for its call."""

    def __init__(self, cg: FunctionCodegen, value: Value, name: str, fn: Any = None):
        self.cg, self.value, self.name, self.fn = cg, value, name, fn

    def call(self, args, kwargs, node):
        if self.name == "to":
            return _call_builtin(self.cg, "cast", [self.value, *args], kwargs, node)
        if self.fn is not None:  # a kit builtin or @kit.jit helper: x.cumsum(0), x.softmax()
            return self.cg.call(self.fn, [self.value, *args], kwargs, node)
        return _call_builtin(self.cg, self.name, [self.value, *args], kwargs, node)


def _call_builtin(cg: FunctionCodegen, name: str, args: list, kwargs: dict, node) -> Any:
    try:
        return _call_builtin_checked(cg, name, args, kwargs, node)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as e:
        # a user value that Python itself refused (kit.cdiv(4, 0), kit.minimum("a", 3))
        raise cg.err(node, f"kit.{name}: {type(e).__name__}: {e}") from None


def _call_builtin_checked(cg: FunctionCodegen, name: str, args: list, kwargs: dict,
                          node) -> Any:
    rule = CALL_RULES.get(name)
    if rule is None and name.startswith("unsupported."):
        from kitjit.language.base import NAMESPACED

        raise cg.err(node, NAMESPACED[name].__doc__,
                     "compute it from supported functions, or file an issue")
    if rule is None:
        raise cg.err(node, f"kit.{name} is not implemented yet")
    try:
        ba = rule.signature.bind(*args, **kwargs)
    except TypeError as e:
        raise cg.err(node, f"kit.{name}: {e}") from None
    ba.apply_defaults()
    return rule.fn(Call(cg, name, ba.arguments, node))


def _is_constexpr_ann(ann: ast.expr, parsed: ParsedFunction) -> bool:
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return "constexpr" in ann.value
    try:
        text = ast.unparse(ann)
    except Exception:
        return False
    if text.endswith("constexpr"):
        return True
    return False


def _isinstance(x: Any, types: Any) -> bool:
    """`isinstance(x, T)` at compile time, with the language's types standing for what a
    kernel holds: kit.tensor for tiles and scalars, kit.tensor_descriptor for descriptors,
    kit.constexpr for compile-time values; other types as in Python."""
    from kitjit.language import constexpr, tensor, tensor_descriptor
    from kitjit.language.core import base_value

    from ..semantic.block_ptr import TensorDescriptor

    if not isinstance(types, tuple):
        types = (types,)
    for t in types:
        if t is base_value:  # Triton: every kernel value (constexprs too) is one
            return True
        if t is tensor:
            if isinstance(x, Value):
                return True
        elif t is tensor_descriptor:
            if isinstance(x, TensorDescriptor):
                return True
        elif t is constexpr:
            if not isinstance(x, Value) and not hasattr(x, "kit_flatten"):
                return True
        elif isinstance(t, type) and isinstance(x, t):
            return True
    return False
