"""Python AST -> tile IR.

The body of a `@kit.jit` function is walked once per specialization. Every expression
evaluates either to an IR `Value` (something the GPU computes) or to a plain Python object
(a constexpr, a dtype, a module, a function): operations on Python objects run at compile
time, which is all the constant folding the language needs. `kit.static_range` loops unroll
and `if` on a constant compiles one branch; `range` loops and `if` on a runtime value become
`for` / `if` ops whose carried values are the variables the body assigns.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import math
import textwrap
from typing import Any

from kitjit import language as kl
from kitjit.ir.core import Block, Function, Loc, Value
from kitjit.ir.types import DType, TileType, float32, int1, int32, int64

from .errors import CompileError
from .semantic import Builder, describe, literal_dtype, promote, shape_str, weak_dtype

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
           ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.BitAnd: "and", ast.BitOr: "or",
           ast.BitXor: "xor", ast.LShift: "shl", ast.RShift: "shr"}
_PY_BINOPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
              "div": lambda a, b: a / b, "floordiv": lambda a, b: a // b,
              "mod": lambda a, b: a % b, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
              "xor": lambda a, b: a ^ b, "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b,
              "pow": lambda a, b: a ** b}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq",
           ast.NotEq: "ne"}
_PY_CMP = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
           "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}
_SAFE_PY_BUILTINS = {"range", "min", "max", "float", "int", "bool", "len", "abs", "isinstance",
                     "tuple", "list", "print", "enumerate", "zip", "round", "pow", "divmod",
                     "True", "False", "None", "ValueError", "TypeError", "AssertionError"}
MAX_INLINE_DEPTH = 32


class _Return(Exception):
    pass


class ParsedFunction:
    """The AST of a Python function, with what error messages need to point into its file."""

    def __init__(self, fn):
        self.fn = fn
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            raise CompileError(f"cannot read the source of '{fn.__name__}': {e}",
                               hint="define kernels in a .py file") from None
        src = "".join(lines)
        self.indent = len(src) - len(src.lstrip()) if src[:1] in " \t" else 0
        self.source = textwrap.dedent(src)
        self.first_line = first
        self.file = inspect.getsourcefile(fn) or "<unknown>"
        tree = ast.parse(self.source)
        node = tree.body[0]
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise CompileError(f"'{fn.__name__}' is not a plain function")
        self.node: ast.FunctionDef = node
        self.params = [a.arg for a in node.args.args]

    def loc(self, node: ast.AST) -> Loc:
        line = getattr(node, "lineno", self.node.lineno) + self.first_line - 1
        col = getattr(node, "col_offset", 0) + self.indent
        end = getattr(node, "end_col_offset", None)
        if end is not None and getattr(node, "end_lineno", None) == getattr(node, "lineno", None):
            end += self.indent
        else:
            end = None
        return Loc(self.file, line, col, end, self.fn.__name__)


class FunctionCodegen:
    """Compiles one function body (the kernel, or an inlined @kit.jit callee) into the
    builder's current block."""

    def __init__(self, parsed: ParsedFunction, builder: Builder, scope: dict[str, Any],
                 depth: int = 0):
        self.p = parsed
        self.b = builder
        self.scope = scope
        self.depth = depth
        self.globals = parsed.fn.__globals__
        self.closure = _closure_vars(parsed.fn)
        self.return_value: Any = None
        self.assign_locs: dict[str, Loc] = {}

    # ------------------------------------------------------------------ helpers
    def err(self, node: ast.AST, msg: str, hint: str | None = None) -> CompileError:
        return CompileError(msg, self.p.loc(node), hint)

    def at(self, node: ast.AST):
        self.b.loc = self.p.loc(node)

    def run(self) -> Any:
        try:
            self.block(self.p.node.body)
        except _Return:
            pass
        return self.return_value

    def block(self, stmts: list[ast.stmt]) -> None:
        for s in stmts:
            self.stmt(s)

    # ------------------------------------------------------------------ statements
    def stmt(self, node: ast.stmt) -> None:
        self.at(node)
        meth = getattr(self, "stmt_" + type(node).__name__, None)
        if meth is None:
            raise self.err(node, f"'{type(node).__name__}' statements are not supported in "
                                 "kitjit kernels", _HINTS.get(type(node).__name__))
        meth(node)

    def stmt_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.expr(node.value)

    def stmt_Pass(self, node) -> None:
        pass

    def stmt_Assign(self, node: ast.Assign) -> None:
        value = self.expr(node.value)
        for target in node.targets:
            self.assign(target, value)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is None:
            return
        value = self.expr(node.value)
        ann = self.try_eval(node.annotation)
        if ann is kl.constexpr and isinstance(value, Value):
            raise self.err(node.value, f"'{ast.unparse(node.target)}' is annotated "
                           "kit.constexpr but its value is computed at run time")
        self.assign(node.target, value)

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.err(node, f"'{type(node.op).__name__}' is not supported")
        cur = self.expr(_load_ctx(node.target))
        self.at(node)
        self.assign(node.target, self.binop(op, cur, self.expr(node.value), node))

    def assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.scope[target.id] = value
            self.assign_locs[target.id] = self.p.loc(target)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, (tuple, list)) or len(value) != len(target.elts):
                raise self.err(target, f"cannot unpack {describe(value)} into "
                               f"{len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self.assign(t, v)
        else:
            raise self.err(target, "only plain names can be assigned in kernels",
                           "tiles are values: compute a new tile instead of writing into one")

    def stmt_Assert(self, node: ast.Assert) -> None:
        cond = self.expr(node.test)
        if isinstance(cond, Value):
            raise self.err(node.test, "assert needs a compile-time condition",
                           "use it on constexprs; runtime checks belong to the caller")
        if not cond:
            msg = self.expr(node.msg) if node.msg is not None else "assertion failed"
            raise self.err(node, f"static assertion failed: {msg}")

    def stmt_Return(self, node: ast.Return) -> None:
        self.return_value = self.expr(node.value) if node.value is not None else None
        raise _Return()

    def stmt_If(self, node: ast.If) -> None:
        cond = self.expr(node.test)
        if not isinstance(cond, Value):
            self.block(node.body if cond else node.orelse)
            return
        self.at(node.test)
        if not cond.type.is_scalar:
            raise self.err(node.test, f"an `if` needs a scalar condition, got {describe(cond)}",
                           "use kit.where(cond, a, b) to choose per element")
        if not cond.dtype.is_bool():
            cond = self.b.compare("ne", cond, 0)
        before = dict(self.scope)
        branches = []
        roles = _role_split(cond, self.b.role)
        outer_warps, outer_role = self.b.warps, self.b.role
        for i, body in enumerate((node.body, node.orelse)):
            blk = Block()
            self.scope = dict(before)
            self.b.blocks.append(blk)
            if roles is not None:
                self.b.warps = 4 * roles[i][1]
                self.b.role = roles[i]
            try:
                self.block(body)
            except _Return:
                raise self.err(node, "`return` inside an `if` on a run-time value is not "
                               "supported", "assign to a variable and return it at the "
                               "end") from None
            finally:
                self.b.blocks.pop()
                self.b.warps, self.b.role = outer_warps, outer_role
            branches.append((blk, self.scope))
        self.scope = before
        names = sorted(set(_assigned(node.body)) | set(_assigned(node.orelse)))
        if roles is not None:  # roles run side by side: what they assign stays theirs
            for n in names:
                if n in self.scope and isinstance(self.scope[n], Value):
                    self.scope.pop(n)
            names = []
        merged, types = [], []
        for n in names:
            vals = [sc.get(n, _MISSING) for _, sc in branches]
            if any(v is _MISSING for v in vals):
                self.scope.pop(n, None)
                continue
            if all(not isinstance(v, Value) for v in vals) and vals[0] is vals[1]:
                self.scope[n] = vals[0]
                continue
            t = self._merge_type(n, vals, node)
            merged.append(n)
            types.append(t)
        for (blk, sc), _ in zip(branches, range(2)):
            self.b.blocks.append(blk)
            try:
                ys = [self._coerce(sc[n], t, node, n) for n, t in zip(merged, types)]
                self.b.emit("yield", ys, [])
            finally:
                self.b.blocks.pop()
        self.at(node)
        op = self.b.emit("if", [cond], types, regions=[branches[0][0], branches[1][0]])
        if roles is not None:
            op.attrs["roles"] = roles
        for n, r in zip(merged, op.results):
            r.name = n
            self.scope[n] = r

    def _merge_type(self, name: str, vals: list, node) -> TileType:
        tys = [v.type for v in vals if isinstance(v, Value)]
        if not tys:
            # Python numbers in both branches (`s = 2` / `s = 3.5`): their literal dtypes
            # meet by promotion, so neither side is truncated.
            dt = None
            for v in vals:
                vd = literal_dtype(v) if isinstance(v, (int, float, bool)) else None
                if vd is None:
                    self.at(node)
                    return self.b.to_value(v).type  # raises: not a number
                dt = vd if dt is None else promote(dt, vd)
            return TileType(dt)
        t = tys[0]
        for u in tys[1:]:
            if u.shape != t.shape or u.dtype is not t.dtype:
                raise CompileError(
                    f"'{name}' is {_tdesc(t)} in one branch and {_tdesc(u)} in the other",
                    self.assign_locs.get(name, self.p.loc(node)),
                    "give it the same dtype and shape in both branches (.to(...), "
                    "kit.broadcast_to)")
        for v in vals:
            # a Python number next to a tile takes the tile's dtype only where it fits
            # (weak typing); a float next to an int tile would be silently truncated
            if isinstance(v, (int, float, bool)) and weak_dtype(v, t.dtype) is not t.dtype:
                raise CompileError(
                    f"'{name}' is {_tdesc(t)} in one branch and the number {v!r} in the "
                    "other, which does not fit that dtype",
                    self.assign_locs.get(name, self.p.loc(node)),
                    f"write the number as a {t.dtype} value, or convert the tile with .to()")
        return TileType(t.dtype, t.shape)

    def _coerce(self, v: Any, t: TileType, node, name: str) -> Value:
        if isinstance(v, Value):
            return v
        self.at(node)
        c = self.b.to_value(v) if not isinstance(v, (int, float, bool)) else \
            self.b.constant(v, t.dtype)
        return self.b.broadcast_to(c, t.shape)

    def stmt_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.err(node, "for/else is not supported")
        it = node.iter
        if not isinstance(it, ast.Call):
            raise self.err(it, "kernels loop over range(...) or kit.static_range(...)")
        fn = self.expr(it.func)
        args = [self.expr(a) for a in it.args]
        kwargs = {k.arg: self.expr(k.value) for k in it.keywords}
        if fn is kl.static_range:
            if any(isinstance(a, Value) for a in args) or kwargs:
                raise self.err(it, "kit.static_range needs constexpr bounds",
                               "use range(...) for a loop whose bounds are known at run time")
            try:
                sr = kl.static_range(*args)
                values = list(range(sr.start, sr.stop, sr.step))
            except (TypeError, ValueError) as e:
                raise self.err(it, f"kit.static_range{tuple(args)}: {e}") from None
            for i in values:
                self.assign(node.target, i)
                self.block(node.body)
            return
        if fn is not range:
            raise self.err(it, f"kernels loop over range(...) or kit.static_range(...), not "
                           f"{describe(fn)}")
        if kwargs:
            raise self.err(it, "range() takes no keyword arguments here")
        if not 1 <= len(args) <= 3:
            raise self.err(it, "range() takes 1 to 3 arguments")
        if len(args) == 1:
            args = [0, args[0]]
        lb, ub = args[0], args[1]
        step = args[2] if len(args) > 2 else 1
        if not isinstance(node.target, ast.Name):
            raise self.err(node.target, "the loop variable must be a plain name")
        self.at(it)
        for name, v in (("start", lb), ("stop", ub), ("step", step)):
            if isinstance(v, Value) and (not v.type.is_scalar or not v.dtype.is_int()):
                raise self.err(it, f"range() {name} must be a scalar integer, got {describe(v)}")
            if not isinstance(v, (Value, int)) or isinstance(v, bool):
                raise self.err(it, f"range() {name} must be an integer, got {describe(v)}")
        if isinstance(step, int) and step == 0:
            raise self.err(it, "range() step must not be zero")
        wide = any(isinstance(v, Value) and v.dtype.bits == 64 for v in (lb, ub, step)) or \
            any(isinstance(v, int) and not -(2 ** 31) <= v < 2 ** 31 for v in (lb, ub, step))
        ity = int64 if wide else int32
        lbv, ubv, stv = (self.b.cast(v, ity) if isinstance(v, Value) else self.b.constant(v, ity)
                         for v in (lb, ub, step))
        assigned = _assigned(node.body)
        carried = [n for n in assigned if n in self.scope and n != node.target.id
                   and (isinstance(self.scope[n], Value)
                        or isinstance(self.scope[n], (int, float)))]
        for n in assigned:
            if n in self.scope and n not in carried and n != node.target.id:
                raise self.err(node, f"'{n}' holds {describe(self.scope[n])} and is reassigned "
                               "inside a runtime loop", "only tiles and numbers can change "
                               "from one iteration to the next")
        inits = []
        for n in carried:
            v = self.scope[n]
            if not isinstance(v, Value):
                v = self.b.to_value(v)
            inits.append(v)
        body = Block()
        iv = body.add_arg(TileType(ity), node.target.id)
        args_ = [body.add_arg(TileType(v.dtype, v.shape), n) for n, v in zip(carried, inits)]
        before = dict(self.scope)
        self.scope[node.target.id] = iv
        for n, a in zip(carried, args_):
            self.scope[n] = a
        self.b.blocks.append(body)
        try:
            try:
                self.block(node.body)
            except _Return:
                raise self.err(node, "`return` inside a loop is not supported",
                               "assign to a variable and return it after the loop") from None
            ys = []
            for n, a in zip(carried, args_):
                v = self.scope.get(n, _MISSING)
                if v is _MISSING:
                    raise self.err(node, f"'{n}' is deleted inside the loop")
                if not isinstance(v, Value):
                    self.at(node)
                    fits = isinstance(v, (int, float, bool)) and \
                        weak_dtype(v, a.dtype) is a.dtype
                    v = self.b.broadcast_to(self.b.constant(v, a.dtype), a.shape) \
                        if fits else v  # a float into an int is a type change, not a cast
                if not isinstance(v, Value) or v.shape != a.shape or v.dtype is not a.dtype:
                    raise CompileError(
                        f"loop-carried variable '{n}' changes type in the loop: it enters as "
                        f"{_tdesc(a.type)} and is reassigned as {describe(v)}",
                        self.assign_locs.get(n, self.p.loc(node)),
                        f"initialise '{n}' before the loop with the type it has inside, e.g. "
                        f"kit.zeros({shape_str(v.shape) if isinstance(v, Value) else '...'}, "
                        f"kit.{_dtype_attr(v)})")
                ys.append(v)
            self.b.emit("yield", ys, [])
        finally:
            self.b.blocks.pop()
        self.scope = before
        self.at(node)
        op = self.b.emit("for", [lbv, ubv, stv, *inits], [a.type for a in args_],
                         regions=[body])
        for n, r in zip(carried, op.results):
            r.name = n
            self.scope[n] = r
        for n in assigned:
            if n not in carried and n not in before:
                self.scope.pop(n, None)

    def stmt_While(self, node) -> None:
        raise self.err(node, "while loops are not supported in kitjit kernels",
                       "use `for i in range(...)` with a bound known at launch")

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
            if attr in ("to", "cast"):
                return _Method(self, base, "to")
            if attr in ("sum", "max", "min", "argmax", "argmin", "exp", "exp2", "log", "log2",
                        "sqrt", "abs", "sigmoid", "broadcast_to"):
                return _Method(self, base, attr)
            if attr == "T":
                if base.type.is_shared:
                    self.at(node)
                    return self.b.smem_trans(base)
                raise self.err(node, "transposes of register tiles are not supported yet",
                               "shared tiles have .T (a view, for kit.mma's b operand)")
            raise self.err(node, f"a tile has no attribute '{attr}'",
                           "tiles have .dtype, .shape and .to(dtype)")
        try:
            return _unwrap(getattr(base, attr))
        except AttributeError:
            raise self.err(node, f"{describe(base)} has no attribute '{attr}'") from None

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

        if isinstance(fn, _Method):
            return fn.call(args, kwargs, node)
        name = getattr(fn, "__kit_builtin__", None)
        if name is not None:
            return _call_builtin(self, name, args, kwargs, node)
        if isinstance(fn, JITFunction):
            return self.inline(fn, args, kwargs, node)
        if isinstance(fn, DType):
            raise self.err(node, f"use x.to(kit.{_dtype_attr_of(fn)}) to convert a tile")
        values = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Value)]
        if values:
            return self.python_builtin_on_values(fn, args, kwargs, node)
        if callable(fn):
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                raise self.err(node, f"calling {getattr(fn, '__name__', fn)!r} at compile time "
                               f"failed: {type(e).__name__}: {e}",
                               "only @kit.jit functions and kit builtins can take tiles") from e
        raise self.err(node, f"{describe(fn)} is not callable")

    def python_builtin_on_values(self, fn, args, kwargs, node) -> Any:
        b = self.b
        if fn in (min, max) and len(args) == 2 and not kwargs:
            return b.binary("minimum" if fn is min else "maximum", args[0], args[1])
        if fn is abs and len(args) == 1:
            return b.unary("abs", args[0])
        if fn in (float, int, bool) and len(args) == 1:
            return b.cast(args[0], {float: float32, int: int32, bool: int1}[fn])
        if fn is print:
            raise self.err(node, "print() of tiles is not supported on the GPU",
                           "run with KITJIT_INTERPRET=1 and inspect values in Python")
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
        for p, ann in zip(params, fnode.args.args):
            if ann.annotation is not None and _is_constexpr_ann(ann.annotation, parsed) and \
                    isinstance(scope[p], Value):
                raise self.err(node, f"'{p}' of '{jf.__name__}' is a kit.constexpr but gets a "
                               "run-time value")
        sub = FunctionCodegen(parsed, self.b, scope, self.depth + 1)
        call_loc = self.p.loc(node)
        try:
            result = sub.run()
        except CompileError as e:
            e.add_note(f"in the call of '{jf.__name__}' from here", call_loc)
            raise
        self.b.loc = call_loc
        return result


class _Method:
    """A tile method (x.to, x.sum, ...) waiting for its call."""

    def __init__(self, cg: FunctionCodegen, value: Value, name: str):
        self.cg, self.value, self.name = cg, value, name

    def call(self, args, kwargs, node):
        if self.name == "to":
            dtype = args[0] if args else kwargs.get("dtype")
            if kwargs.get("bitcast"):
                raise self.cg.err(node, "bitcast is not supported yet")
            if not isinstance(dtype, DType):
                raise self.cg.err(node, f".to() needs a dtype such as kit.float32, got "
                                  f"{describe(dtype)}")
            return self.cg.b.cast(self.value, dtype)
        return _call_builtin(self.cg, self.name, [self.value, *args], kwargs, node)


_MISSING = object()


def _call_builtin(cg: FunctionCodegen, name: str, args: list, kwargs: dict, node) -> Any:
    try:
        return _call_builtin_checked(cg, name, args, kwargs, node)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as e:
        # a user value that Python itself refused (kit.cdiv(4, 0), kit.minimum("a", 3))
        raise cg.err(node, f"kit.{name}: {type(e).__name__}: {e}") from None


def _call_builtin_checked(cg: FunctionCodegen, name: str, args: list, kwargs: dict,
                          node) -> Any:
    b = cg.b
    try:
        sig = inspect.signature(_SIGS[name])
        ba = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise cg.err(node, f"kit.{name}: {e}") from None
    ba.apply_defaults()
    a = ba.arguments

    def const(key, what="a constexpr"):
        v = a[key]
        if isinstance(v, Value):
            raise cg.err(node, f"kit.{name}: '{key}' must be {what}, got {describe(v)}",
                         "pass it as a kit.constexpr parameter")
        return v

    if name in ("program_id", "num_programs"):
        axis = const("axis")
        if axis not in (0, 1, 2):
            raise cg.err(node, f"kit.{name}: axis must be 0, 1 or 2, got {axis!r}")
        return b.emit1(name, [], TileType(int32), {"axis": axis})
    if name == "arange":
        return b.arange(const("start"), const("end"))
    if name == "zeros":
        return b.full(const("shape"), 0, const("dtype"))
    if name == "full":
        return b.full(const("shape"), a["value"], const("dtype"))
    if name == "load":
        return b.load(a["pointer"], a["mask"], a["other"])
    if name == "store":
        return b.store(a["pointer"], a["value"], a["mask"])
    if name == "where":
        return b.where(a["condition"], a["x"], a["y"])
    if name in ("minimum", "maximum"):
        if not isinstance(a["x"], Value) and not isinstance(a["y"], Value):
            return (min if name == "minimum" else max)(a["x"], a["y"])
        return b.binary(name, a["x"], a["y"])
    if name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sin", "cos", "sigmoid",
                "floor", "ceil"):
        x = a["x"]
        ftz = bool(const("ftz", "True or False")) if name in ("exp", "exp2") else False
        if not isinstance(x, Value):
            return _fold_math(cg, node, name, x)
        return b.unary(name, x, ftz=ftz)
    if name in ("sum", "max", "min", "argmax", "argmin"):
        axis = const("axis")
        return b.reduce(name, a["x"], axis, bool(const("keep_dims")))
    if name == "dot":
        return b.dot(a["a"], a["b"], a["acc"])
    if name == "cdiv":
        x, d = a["x"], a["div"]
        if not isinstance(x, Value) and not isinstance(d, Value):
            return -(-x // d)
        return b.binary("floordiv", b.binary("sub", b.binary("add", x, d), 1), d)
    if name == "cast":
        dt = const("dtype")
        if not isinstance(a["x"], Value):
            return b.constant(a["x"], dt)
        return b.cast(a["x"], dt)
    if name == "expand_dims":
        return b.expand_dims(b.to_value(a["x"]), const("axis"))
    if name == "broadcast_to":
        shape = b.check_shape(const("shape"), "kit.broadcast_to")
        return b.broadcast_to(b.to_value(a["x"]), shape)
    if name == "shared":
        return b.shared(const("shape"), const("dtype"))
    if name == "mbarriers":
        return b.mbarriers(const("count"), const("arrivals"))
    if name == "mbarrier_arrive":
        return b.mbarrier_arrive(a["barrier"])
    if name == "warpgroup_id":
        return b.emit1("warpgroup_id", [], TileType(int32))
    if name == "setmaxnreg":
        n = const("count")
        if not isinstance(n, int) or not 24 <= n <= 256 or n % 8:
            raise cg.err(node, f"kit.setmaxnreg takes a multiple of 8 in [24, 256], got {n!r}")
        b.emit("setmaxnreg", [], [], {"count": n})
        return None
    if name == "tma_load":
        return b.tma_load(a["dst"], a["tensor"], a["coords"], a["barrier"])
    if name == "mbarrier_wait":
        return b.mbarrier_wait(a["barrier"], a["phase"])
    if name == "mma":
        return b.wgmma(a["a"], a["b"], a["acc"], const("pending"))
    if name == "tma_store":
        return b.tma_store(a["tensor"], a["coords"], a["value"])
    if name == "barrier":
        b.emit("barrier", [], [])
        return None
    if name == "static_assert":
        cond = const("cond")
        if not cond:
            raise cg.err(node, f"static assertion failed{': ' + str(a['msg']) if a['msg'] else ''}")
        return None
    raise cg.err(node, f"kit.{name} is not implemented yet")


def _fold_math(cg, node, name, x):
    fns = {"exp": math.exp, "exp2": lambda v: 2.0 ** v, "log": math.log, "log2": math.log2,
           "sqrt": math.sqrt, "rsqrt": lambda v: 1 / math.sqrt(v), "abs": builtins.abs,
           "sin": math.sin, "cos": math.cos, "sigmoid": lambda v: 1 / (1 + math.exp(-v)),
           "floor": math.floor, "ceil": math.ceil}
    try:
        return fns[name](x)
    except Exception as e:
        raise cg.err(node, f"kit.{name}({x!r}) failed at compile time: {e}") from None


_SIGS: dict[str, Any] = {}
for _n in ("program_id", "num_programs"):
    _SIGS[_n] = lambda axis=0: None
_SIGS["arange"] = lambda start, end: None
_SIGS["zeros"] = lambda shape, dtype=float32: None
_SIGS["full"] = lambda shape, value, dtype: None
_SIGS["load"] = lambda pointer, mask=None, other=None, cache_modifier=None, \
    eviction_policy=None, volatile=False: None
_SIGS["store"] = lambda pointer, value, mask=None, cache_modifier=None, \
    eviction_policy=None: None
_SIGS["where"] = lambda condition, x, y: None
_SIGS["minimum"] = lambda x, y: None
_SIGS["maximum"] = lambda x, y: None
for _n in ("log", "log2", "sqrt", "rsqrt", "abs", "sin", "cos", "sigmoid", "floor", "ceil"):
    _SIGS[_n] = lambda x: None
for _n in ("exp", "exp2"):
    _SIGS[_n] = lambda x, ftz=False: None
for _n in ("sum", "max", "min"):
    _SIGS[_n] = lambda x, axis=None, keep_dims=False: None
for _n in ("argmax", "argmin"):
    _SIGS[_n] = lambda x, axis, keep_dims=False: None
_SIGS["dot"] = lambda a, b, acc=None, input_precision=None, allow_tf32=None, \
    out_dtype=float32: None
_SIGS["cdiv"] = lambda x, div: None
_SIGS["cast"] = lambda x, dtype: None
_SIGS["expand_dims"] = lambda x, axis: None
_SIGS["broadcast_to"] = lambda x, shape: None
_SIGS["static_assert"] = lambda cond, msg="": None
_SIGS["shared"] = lambda shape, dtype: None
_SIGS["mbarriers"] = lambda count, arrivals=1: None
_SIGS["mbarrier_arrive"] = lambda barrier: None
_SIGS["warpgroup_id"] = lambda: None
_SIGS["setmaxnreg"] = lambda count: None
_SIGS["tma_load"] = lambda dst, tensor, coords, barrier: None
_SIGS["mbarrier_wait"] = lambda barrier, phase: None
_SIGS["mma"] = lambda a, b, acc, pending=0: None
_SIGS["barrier"] = lambda: None
_SIGS["tma_store"] = lambda tensor, coords, value: None


def _role_split(cond: Value, role: tuple[int, int]):
    """((first warpgroup, count), (first, count)) of the then/else branches when `cond`
    compares kit.warpgroup_id() with a constant, splitting the current role `role` (first,
    count); None for any other condition."""
    o = cond.owner
    if not (getattr(o, "name", None) == "cmp"):
        return None
    x, k = o.operands
    if getattr(x.owner, "name", None) != "warpgroup_id" or \
            getattr(k.owner, "name", None) != "constant":
        return None
    first, n = role
    k = k.owner.attrs["value"]
    pred = o.attrs["pred"]
    if n > 1 and pred in ("eq", "ne") and k in (first, first + n - 1):
        one, rest = (k, 1), ((first + 1, n - 1) if k == first else (first, n - 1))
        return (one, rest) if pred == "eq" else (rest, one)
    if pred in ("lt", "ge") and first < k < first + n:
        lo, hi = (first, k - first), (k, first + n - k)
        return (lo, hi) if pred == "lt" else (hi, lo)
    return None


def _assigned(stmts: list[ast.stmt]) -> list[str]:
    """Names a block of statements assigns, in order of first assignment."""
    out: list[str] = []
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in out:
                out.append(n.id)
    return out


def _load_ctx(node: ast.expr) -> ast.expr:
    n = ast.Name(id=node.id, ctx=ast.Load()) if isinstance(node, ast.Name) else node
    return ast.copy_location(n, node)


def _closure_vars(fn) -> dict[str, Any]:
    if not fn.__closure__:
        return {}
    return {n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, fn.__closure__)
            if _cell_ok(c)}


def _cell_ok(c) -> bool:
    try:
        c.cell_contents  # noqa: B018
        return True
    except ValueError:
        return False


def _unwrap(v: Any) -> Any:
    return v.value if isinstance(v, kl.constexpr) else v


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



def _tdesc(t: TileType) -> str:
    art = "an" if t.dtype.name[0] in "aeiou" else "a"
    if t.is_scalar:
        return f"{art} {t.dtype} scalar"
    return f"{art} {t.dtype} tile of shape {shape_str(t.shape)}"


def _dtype_attr_of(dt: DType) -> str:
    return {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64",
            "i1": "int1"}.get(dt.name, dt.name.replace("i", "int").replace("u", "uint"))


def _dtype_attr(v: Any) -> str:
    return _dtype_attr_of(v.dtype) if isinstance(v, Value) else "float32"


_HINTS = {
    "While": "use `for i in range(...)`",
    "With": "kernels have no context managers",
    "Try": "kernels cannot catch exceptions; check values with kit.where and masks",
    "Lambda": "define a @kit.jit function instead",
    "ListComp": "use kit.static_range to unroll, or build tiles with kit.arange",
    "GeneratorExp": "use kit.static_range to unroll, or build tiles with kit.arange",
    "DictComp": "kernels work on tiles and numbers",
    "Dict": "kernels work on tiles and numbers",
    "Set": "kernels work on tiles and numbers",
    "Global": "pass the value as an argument",
    "Nonlocal": "pass the value as an argument",
    "FunctionDef": "define helpers at module level with @kit.jit",
    "ClassDef": "define classes outside the kernel",
    "Delete": "names go out of use by themselves",
    "Raise": "use kit.static_assert for compile-time checks",
    "Import": "import at module level",
    "ImportFrom": "import at module level",
    "Await": "kernels are not coroutines",
    "Yield": "kernels are not generators",
    "Starred": None,
    "NamedExpr": "assign on its own line",
}


def build_kernel_ir(jf, arg_specs: dict[str, Any], num_warps: int) -> Function:
    """The tile IR of kernel `jf` for one specialization.

    `arg_specs` maps each parameter to either a `TileType` (a run-time argument: a pointer,
    an int, a float) or ('const', value) for values folded in (constexprs, ints equal to 1,
    None).
    """
    parsed = jf.parsed
    args = []
    scope: dict[str, Any] = {}
    for p in parsed.params:
        spec = arg_specs[p]
        if isinstance(spec, TileType):
            v = Value(spec, p)
            args.append(v)
            scope[p] = v
        else:
            scope[p] = spec[1]
    fn = Function(parsed.fn.__name__, args, {"num_warps": num_warps})
    builder = Builder(fn)
    cg = FunctionCodegen(parsed, builder, scope)
    cg.run()
    return fn
