"""Expressions: constants, names, tuples, operators (folded on compile-time values),
comparisons, boolean logic, conditional expressions, attributes and subscripts."""

from __future__ import annotations

import ast
import builtins
import math
import types
from typing import Any

from kitjit import language as kl
from kitjit.ir.core import Value
from kitjit.ir.types import int1
from kitjit.language.triton_names import tensor_method_message, tensor_method_target

from ..errors import CompileError
from ..semantic import describe, shape_str
from ..semantic.typed_fold import fold_typed, is_typed
from .calls import _AggregateMethod, _Method
from .helpers import _HINTS

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
           ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.BitAnd: "and", ast.BitOr: "or",
           ast.BitXor: "xor", ast.LShift: "shl", ast.RShift: "shr"}
_PY_BINOPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
              "div": lambda a, b: a / b, "floordiv": lambda a, b: a // b,
              "mod": lambda a, b: a % b, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
              "xor": lambda a, b: a ^ b, "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b,
              "pow": lambda a, b: a ** b}
_TYPED_OPS = frozenset(_PY_BINOPS) - {"pow"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq",
           ast.NotEq: "ne"}
_PY_CMP = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
           "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}
# Triton's tensor methods of the shape family (x.trans(), x.reshape(...), ...)
_SHAPE_METHODS = frozenset({"trans", "permute", "reshape", "view", "ravel", "split",
                            "expand_dims", "flip", "gather"})
_SAFE_PY_BUILTINS = {"range", "min", "max", "float", "int", "bool", "len", "abs", "isinstance",
                     "tuple", "list", "print", "enumerate", "zip", "round", "pow", "divmod",
                     "True", "False", "None", "ValueError", "TypeError", "AssertionError"}


class ExpressionsMixin:
    """The expression part of FunctionCodegen (calls are in calls.py)."""

    # ------------------------------------------------------------------ expressions
    def expr(self, node: ast.expr) -> Any:
        meth = getattr(self, "expr_" + type(node).__name__, None)
        if meth is None:
            raise self.err(node, f"'{type(node).__name__}' expressions are not supported in "
                                 "kitjit kernels", _HINTS.get(type(node).__name__))
        r = meth(node)
        return r

    def try_eval(self, node: ast.expr) -> Any:
        try:
            return self.expr(node)
        except CompileError:
            return None

    def expr_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def expr_Name(self, node: ast.Name) -> Any:
        n = node.id
        if n in self.scope:
            v = self.scope[n]
            return v.value if isinstance(v, kl.constexpr) else v
        if n in self.closure:
            return _unwrap(self.closure[n])
        if n in self.globals:
            return _unwrap(self.globals[n])
        if n in _SAFE_PY_BUILTINS:
            return getattr(builtins, n)
        raise self.err(node, f"'{n}' is not defined: it is neither an argument, a local, a "
                             "kit builtin nor a global constant",
                       "pass it as an argument (kit.constexpr for compile-time values)")

    def expr_Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.expr(e) for e in node.elts)

    def expr_List(self, node: ast.List) -> Any:
        return [self.expr(e) for e in node.elts]

    def expr_JoinedStr(self, node) -> Any:
        vals = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                vals.append(str(v.value))
            else:
                x = self.expr(v.value)
                vals.append(str(x) if not isinstance(x, Value) else describe(x))
        return "".join(vals)

    def expr_BinOp(self, node: ast.BinOp) -> Any:
        a, b = self.expr(node.left), self.expr(node.right)
        if isinstance(node.op, ast.Pow):
            if isinstance(a, Value) or isinstance(b, Value):
                raise self.err(node, "'**' on tiles is not supported",
                               "use kit.exp2(y * kit.log2(x)), or x * x for small powers")
            return self.fold(node, "pow", a, b)
        if isinstance(node.op, ast.MatMult):
            self.at(node)
            return self.b.dot(a, b)
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.err(node, f"operator {type(node.op).__name__} is not supported")
        self.at(node)
        return self.binop(op, a, b, node)

    def binop(self, op: str, a: Any, b: Any, node) -> Any:
        if not isinstance(a, Value) and not isinstance(b, Value):
            return self.fold(node, op, a, b)
        self.at(node)
        return self.b.binary(op, a, b)

    def fold(self, node, op, a, b) -> Any:
        try:
            if op in _TYPED_OPS and (is_typed(a) or is_typed(b)):
                return fold_typed(op, a, b)   # an assigned number: Triton's tensor math
            return _PY_BINOPS[op](a, b)
        except Exception as e:
            raise self.err(node, f"cannot compute {describe(a)} {op} {describe(b)} at compile "
                           f"time: {e}") from None

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        x = self.expr(node.operand)
        name = {ast.USub: "neg", ast.UAdd: "pos", ast.Not: "not", ast.Invert: "invert"}[
            type(node.op)]
        if not isinstance(x, Value):
            try:
                return {"neg": lambda v: -v, "pos": lambda v: +v, "not": lambda v: not v,
                        "invert": lambda v: ~v}[name](x)
            except Exception as e:
                raise self.err(node, f"cannot apply {name} to {describe(x)}: {e}") from None
        if name == "pos":
            return x
        self.at(node)
        return self.b.unary(name, x)

    def expr_Compare(self, node: ast.Compare) -> Any:
        left = self.expr(node.left)
        result = None
        for opn, right_node in zip(node.ops, node.comparators):
            right = self.expr(right_node)
            if isinstance(opn, (ast.Is, ast.IsNot)):
                if isinstance(left, Value) and isinstance(right, Value):
                    raise self.err(node, "'is' compares compile-time objects only")
                # A run-time value (a tensor argument, a tile) is never a compile-time object
                # such as None: `if Bias is not None:` folds, as in Triton.
                r = (left is right) if isinstance(opn, ast.Is) else (left is not right)
            elif isinstance(opn, (ast.In, ast.NotIn)):
                if isinstance(left, Value) or isinstance(right, Value):
                    raise self.err(node, "'in' works on compile-time values only")
                r = (left in right) if isinstance(opn, ast.In) else (left not in right)
            else:
                pred = _CMPOPS[type(opn)]
                if isinstance(left, Value) or isinstance(right, Value):
                    self.at(node)
                    r = self.b.compare(pred, left, right)
                else:
                    try:
                        r = _PY_CMP[pred](left, right)
                    except Exception as e:
                        raise self.err(node, f"cannot compare {describe(left)} with "
                                       f"{describe(right)}: {e}") from None
            result = r if result is None else self.logical("and", result, r, node)
            left = right
        return result

    def logical(self, op: str, a: Any, b: Any, node) -> Any:
        if not isinstance(a, Value) and not isinstance(b, Value):
            return (a and b) if op == "and" else (a or b)
        self.at(node)
        if isinstance(a, Value) and not a.dtype.is_bool():
            a = self.b.compare("ne", a, 0)
        if isinstance(b, Value) and not b.dtype.is_bool():
            b = self.b.compare("ne", b, 0)
        if not isinstance(a, Value):
            a = self.b.constant(bool(a), int1)
        if not isinstance(b, Value):
            b = self.b.constant(bool(b), int1)
        return self.b.binary(op, a, b)

    def expr_BoolOp(self, node: ast.BoolOp) -> Any:
        op = "and" if isinstance(node.op, ast.And) else "or"
        result = self.expr(node.values[0])
        for v in node.values[1:]:
            if not isinstance(result, Value):  # short-circuit on constants, as Python does
                if op == "and" and not result or op == "or" and result:
                    return result
                result = self.expr(v)
                continue
            result = self.logical(op, result, self.expr(v), node)
        return result

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.expr(node.test)
        if not isinstance(cond, Value):
            return self.expr(node.body if cond else node.orelse)
        a, b = self.expr(node.body), self.expr(node.orelse)
        self.at(node)
        return self.b.where(cond, a, b)

    def expr_Attribute(self, node: ast.Attribute) -> Any:
        base = self.expr(node.value)
        attr = node.attr
        if isinstance(base, Value):
            if attr == "dtype":
                return base.dtype
            if attr == "shape":
                return base.shape
            if attr == "numel":  # Triton's tensor.numel: a compile-time int
                return math.prod(base.shape)
            if attr == "type":  # Triton's tensor.type: a block_type, a scalar's dtype
                from kitjit.language.types import block_type

                return block_type(base.dtype, base.shape) if base.shape else base.dtype
            if attr in ("to", "cast"):
                return _Method(self, base, "to")
            method = tensor_method_target(attr)
            if method is not None and not (base.type.is_shared and attr in _SHAPE_METHODS):
                return _Method(self, base, attr, method)
            if attr == "T":
                self.at(node)
                if base.type.is_shared:
                    return self.b.smem_trans(base)
                return self.b.permute(base, (1, 0), "x.T")  # as Triton: 2-d tiles only
            raise self.err(node, tensor_method_message(attr),
                           "tiles have .dtype, .shape, .type, .T and Triton's tensor methods "
                           "(docs/triton_parity.md)")
        methods = base.kit_methods() if hasattr(base, "kit_methods") and \
            not isinstance(base, type) else {}
        if attr in methods:  # desc.load(...), desc.store(...)
            return _AggregateMethod(methods[attr])
        attrs = base.kit_attrs() if hasattr(base, "kit_attrs") and \
            not isinstance(base, type) else {}
        if attr in attrs:  # desc.dtype, desc.block_shape, ... (as Triton's)
            return attrs[attr]
        try:
            return _unwrap(getattr(base, attr))
        except AttributeError as e:
            if isinstance(base, types.ModuleType) and base.__name__.split(".")[0] == "kitjit":
                from kitjit.language.triton_names import missing_name_message

                msg = str(e) if "not supported yet" in str(e) else \
                    missing_name_message(attr, ast.unparse(node.value))
                raise self.err(node, msg,
                               "see README.md for what kitjit supports") from None
            if isinstance(base, types.ModuleType):
                raise self.err(node, f"module '{base.__name__}' has no attribute '{attr}'") \
                    from None
            raise self.err(node, f"{describe(base)} has no attribute '{attr}'") from e

    def expr_Subscript(self, node: ast.Subscript) -> Any:
        base = self.expr(node.value)
        sl = node.slice
        if isinstance(base, Value) and base.type.is_shared:
            idx = self.expr(sl)
            self.at(node)
            return self.b.smem_index(base, idx)
        if isinstance(base, Value):
            items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            v = base
            dim = 0
            self.at(node)
            for it in items:
                if isinstance(it, ast.Constant) and it.value is None:
                    v = self.b.expand_dims(v, dim)
                    dim += 1
                elif isinstance(it, ast.Slice) and it.lower is None and it.upper is None \
                        and it.step is None:
                    dim += 1
                else:
                    raise self.err(it, "tiles can only be indexed with ':' and None "
                                   "(x[:, None], x[None, :])",
                                   "load the elements you need with kit.load and a mask")
            if dim - sum(1 for it in items if isinstance(it, ast.Constant)) > len(base.shape):
                raise self.err(node, f"too many indices for a tile of shape "
                               f"{shape_str(base.shape)}")
            return v
        idx = self.expr(sl)
        if isinstance(idx, Value):
            raise self.err(sl, "a compile-time sequence cannot be indexed with a run-time value")
        try:
            return base[idx]
        except Exception as e:
            raise self.err(node, f"cannot index {describe(base)} with {idx!r}: {e}") from None

    def expr_Slice(self, node: ast.Slice) -> slice:
        """`a:b:c` indexing a compile-time tuple or list (`x.shape[:-1]`, Triton's
        tl.slice): its bounds must be known at compile time."""
        bounds = []
        for part in (node.lower, node.upper, node.step):
            v = None if part is None else _unwrap(self.expr(part))
            if isinstance(v, Value):
                raise self.err(part, "a compile-time sequence cannot be sliced with a "
                               "run-time value")
            bounds.append(v)
        return slice(*bounds)


def _unwrap(v: Any) -> Any:
    return v.value if isinstance(v, kl.constexpr) else v
