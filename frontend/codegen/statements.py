"""Statements: assignments, assert, return (also under a run-time `if`: `if_returning`), `if`
(folded, a branch, or warpgroup roles), `for` over range / kit.range (a loop with carried
values) or kit.static_range (unrolled), `while` on a run-time condition."""

from __future__ import annotations

import ast
import inspect
from typing import Any

from kitjit import language as kl
from kitjit.ir.core import Block, Value
from kitjit.ir.types import TileType, int32, int64

from ..errors import CompileError
from ..semantic import describe, literal_dtype, promote, shape_str, weak_dtype
from ..semantic.base import typed_number
from .expressions import _BINOPS
from .helpers import _HINTS, _MISSING, _dtype_attr_of, _Return


class StatementsMixin:
    """The statement part of FunctionCodegen."""

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
        value = _as_assigned(self.expr(node.value))
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
        self.assign(node.target, value if ann is kl.constexpr else _as_assigned(value))

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.err(node, f"'{type(node.op).__name__}' is not supported")
        cur = self.expr(_load_ctx(node.target))
        self.at(node)
        self.assign(node.target, _as_assigned(self.binop(op, cur, self.expr(node.value), node)))

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
            base = self.try_eval(target.value) if isinstance(target, (ast.Subscript,
                                                                      ast.Attribute)) else None
            if base is not None and not isinstance(base, Value) and \
                    not isinstance(base, (int, float, bool, str, tuple)):
                raise self.err(target, "a kernel must not mutate Python objects: this "
                               f"assignment changes {type(base).__name__} "
                               f"'{ast.unparse(target.value)}' at compile time, once per "
                               "compilation, not per launch",
                               "compute values in the kernel and store them through a pointer")
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
        cond = self._scalar_cond(cond, node.test, "an `if`")
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
        # what the `if` yields: one entry per variable, a block pointer or descriptor (the
        # same kind on both paths) as one entry per run-time leaf
        merged: list[tuple[str, list]] = []  # (leaf name, its value on each path)
        types: list[TileType] = []
        aggs: dict[str, tuple[Any, int]] = {}
        for n in names:
            vals = [sc.get(n, _MISSING) for _, sc in branches]
            if any(v is _MISSING for v in vals):
                self.scope.pop(n, None)
                continue
            if all(not isinstance(v, Value) for v in vals) and vals[0] is vals[1]:
                self.scope[n] = vals[0]
                continue
            if any(_is_aggregate(v) for v in vals):
                a, b = vals
                if not (_is_aggregate(a) and _is_aggregate(b)) or \
                        a.kit_static() != b.kit_static():
                    da = a.kit_describe() if _is_aggregate(a) else describe(a)
                    db = b.kit_describe() if _is_aggregate(b) else describe(b)
                    raise self.err(node, f"'{n}' is {da} on one path of this `if` and {db} "
                                   "on the other", "keep one kind of block pointer (block "
                                   "shape, order, element type) on both paths")
                leaves = list(zip(a.kit_flatten(), b.kit_flatten()))
                aggs[n] = (a, len(leaves))
                for i, pair in enumerate(leaves):
                    merged.append((f"{n}.{i}", list(pair)))
                    types.append(self._merge_type(n, list(pair), node))
                continue
            merged.append((n, vals))
            types.append(self._merge_type(n, vals, node))
        for k, (blk, _) in enumerate(branches):
            self.b.blocks.append(blk)
            try:
                ys = [self._coerce(vals[k], t, node, n.split(".")[0])
                      for (n, vals), t in zip(merged, types)]
                self.b.emit("yield", ys, [])
            finally:
                self.b.blocks.pop()
        self.at(node)
        op = self.b.if_op(cond, types, branches[0][0], branches[1][0])
        if roles is not None:
            op.attrs["roles"] = roles
        for (n, _), r in zip(merged, op.results):
            r.name = n
        results = iter(op.results)
        for n in dict.fromkeys(m.split(".")[0] if m.split(".")[0] in aggs else m
                               for m, _ in merged):
            if n in aggs:
                init, k = aggs[n]
                self.scope[n] = init.kit_rebuild([next(results) for _ in range(k)])
            else:
                self.scope[n] = next(results)

    def _scalar_cond(self, cond: Value, test: ast.expr, what: str) -> Value:
        """`cond` as an i1 scalar (a run-time condition of an if or a while)."""
        self.at(test)
        if not cond.type.is_scalar:
            raise self.err(test, f"{what} needs a scalar condition, got {describe(cond)}",
                           "use kit.where(cond, a, b) to choose per element")
        if not cond.dtype.is_bool():
            cond = self.b.compare("ne", cond, 0)
        return cond

    def if_returning(self, node: ast.If, rest: list[ast.stmt]) -> None:
        """An `if` that holds a `return`. As Triton, a run-time condition is allowed: the
        statements after the `if` (`rest`, up to the end of the function) run in each
        branch that falls through, so every path of the `if` op ends the function and the
        op yields the value returned (the values of both paths must meet in one type)."""
        cond = self.expr(node.test)
        if not isinstance(cond, Value):
            self.block(list(node.body if cond else node.orelse) + list(rest))
            return
        if self.loop_depth:
            raise self.err(_first_return(node), _RETURN_IN_LOOP, _RETURN_IN_LOOP_HINT)
        cond = self._scalar_cond(cond, node.test, "an `if`")
        if _role_split(cond, self.b.role) is not None:
            raise self.err(_first_return(node), "`return` inside an `if` on "
                           "kit.warpgroup_id() is not supported", "let every role reach the "
                           "end of the kernel")
        before = dict(self.scope)
        outs = []
        for body in (node.body, node.orelse):
            blk = Block()
            self.scope = dict(before)
            self.return_value = None
            self.b.blocks.append(blk)
            try:
                self.block(list(body) + list(rest))
            except _Return:
                pass
            finally:
                self.b.blocks.pop()
            outs.append((blk, self.return_value))
        self.scope = before
        pairs: list[tuple[Any, Any]] = []
        rebuild = _pair_leaves(outs[0][1], outs[1][1], pairs)
        if rebuild is None:
            raise self.err(node, "the two branches of this `if` return different kinds of "
                           f"values ({_rdesc(outs[0][1])} and {_rdesc(outs[1][1])})",
                           "return the same number of values of the same types on every "
                           "path")
        kept, types = [], []
        for i, (a, b) in enumerate(pairs):
            if not isinstance(a, Value) and not isinstance(b, Value) and \
                    (a is b or (type(a) is type(b) and a == b)):
                continue
            for v in (a, b):
                if v is None or not isinstance(v, (Value, int, float, bool)):
                    raise self.err(node, "the two branches of this `if` return "
                                   f"{_rdesc(a)} and {_rdesc(b)}", "return values of one type "
                                   "on every path")
            kept.append(i)
            types.append(self._merge_type("the returned value", [a, b], node))
        for k, (blk, _) in enumerate(outs):
            self.b.blocks.append(blk)
            try:
                ys = [self._coerce(pairs[i][k], t, node, "the returned value")
                      for i, t in zip(kept, types)]
                self.b.emit("yield", ys, [])
            finally:
                self.b.blocks.pop()
        self.at(node)
        op = self.b.if_op(cond, types, outs[0][0], outs[1][0])
        merged = [p[0] for p in pairs]
        for i, r in zip(kept, op.results):
            merged[i] = r
        self.return_value = rebuild(iter(merged))
        raise _Return()

    def stmt_Break(self, node: ast.Break) -> None:
        raise self.err(node, "`break` is not supported in kernels (Triton refuses it too)",
                       "loop with `while cond:` on the exit condition, or mask the work of "
                       "the remaining iterations")

    def stmt_Continue(self, node: ast.Continue) -> None:
        raise self.err(node, "`continue` is not supported in kernels (Triton refuses it too)",
                       "put the rest of the iteration under an `if`")

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
                values = range(sr.start, sr.stop, sr.step)
            except (TypeError, ValueError) as e:
                raise self.err(it, f"kit.static_range{tuple(args)}: {e}") from None
            if len(values) > MAX_UNROLL:
                raise self.err(it, f"kit.static_range unrolls {len(values)} iterations, over "
                               f"kitjit's unroll limit of {MAX_UNROLL}",
                               "use range(...) for a loop that runs at run time")
            self.loop_depth += 1
            try:
                for i in values:
                    self.assign(node.target, i)
                    self.block(node.body)
            finally:
                self.loop_depth -= 1
            return
        hints: dict[str, Any] = {}
        if fn is kl.range:
            args, hints = self._range_args(args, kwargs, it)
        elif fn is not range:
            raise self.err(it, f"kernels loop over range(...), kit.range(...) or "
                           f"kit.static_range(...), not {describe(fn)}")
        elif kwargs:
            raise self.err(it, "range() takes no keyword arguments",
                           "kit.range(...) takes Triton's loop hints (num_stages=, ...)")
        if not 1 <= len(args) <= 3:
            raise self.err(it, "range() takes 1 to 3 arguments")
        if len(args) == 1:
            args = [0, args[0]]
        lb, ub = args[0], args[1]
        step = args[2] if len(args) > 2 else 1
        self._no_return_in(node.body)
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
        carried, inits, aggs, leaf_names = self._carried(assigned, node, node.target.id)
        body = Block()
        iv = body.add_arg(TileType(ity), node.target.id)
        args_ = [body.add_arg(TileType(v.dtype, v.shape), n) for n, v in zip(leaf_names, inits)]
        before = dict(self.scope)
        self.scope[node.target.id] = iv
        self._loop_body(node, body, carried, args_, aggs)
        self.scope = before
        self.at(node)
        op = self.b.for_op([lbv, ubv, stv], inits, [a.type for a in args_], body)
        op.attrs.update(hints)
        self._bind_loop_results(op, carried, leaf_names, aggs)
        for n in assigned:
            if n not in carried and n not in before:
                self.scope.pop(n, None)

    def _range_args(self, args: list, kwargs: dict, it: ast.Call) -> tuple[list, dict]:
        """The bounds and the loop hints of `kit.range(...)` (Triton's `tl.range`). kitjit
        runs every loop as written: the hints are checked and kept on the `for` op (the tile
        IR shows them); loop_unroll_factor becomes LLVM loop metadata (backend/lower/
        control.py), the others do not change the code yet."""
        try:
            ba = inspect.signature(kl.range).bind(*args, **kwargs)
        except TypeError as e:
            raise self.err(it, f"kit.range: {e}") from None
        ba.apply_defaults()
        a = ba.arguments
        bounds = [a["arg1"]] + [a[k] for k in ("arg2", "step") if a[k] is not None]
        if a["arg2"] is None and a["step"] is not None:
            raise self.err(it, "kit.range: a step needs both start and stop")
        hints = {}
        for k, v in a.items():
            if k in ("arg1", "arg2", "step") or v is None or v is False:
                continue
            if isinstance(v, Value):
                raise self.err(it, f"kit.range: '{k}' must be known at compile time, got "
                               f"{describe(v)}")
            ok = isinstance(v, bool) if k not in ("num_stages", "loop_unroll_factor") else \
                isinstance(v, int) and not isinstance(v, bool) and v >= 0
            if not ok:
                raise self.err(it, f"kit.range: '{k}' cannot be {v!r}")
            hints[k] = v
        return bounds, hints

    def _no_return_in(self, body: list[ast.stmt]) -> None:
        """Triton refuses `return` in a run-time loop; so does kitjit, at the statement."""
        for s in body:
            r = _first_return(s)
            if r is not None:
                raise self.err(r, _RETURN_IN_LOOP, _RETURN_IN_LOOP_HINT)

    def _carried_yields(self, carried: list[str], args_: list[Value], node,
                        aggs: dict) -> list[Value]:
        """What a loop body yields for its carried variables, checked against the types
        they enter with."""
        ys = []
        for n, a in zip(carried, _group(carried, args_, aggs)):
            v = self.scope.get(n, _MISSING)
            if v is _MISSING:
                raise self.err(node, f"'{n}' is deleted inside the loop")
            if n in aggs:
                ys.extend(self._carry_aggregate(n, aggs[n][0], v, a, node))
                continue
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
        return ys

    def _carried(self, assigned: list[str], node, exclude: str | None = None):
        """The variables a run-time loop carries (assigned in its body and live before it:
        tiles, numbers and aggregates such as block pointers, whose run-time fields are
        carried as leaves): (names, the leaf values on entry, aggregates, leaf names)."""
        carried = [n for n in assigned if n in self.scope and n != exclude
                   and (isinstance(self.scope[n], Value) or _is_aggregate(self.scope[n])
                        or isinstance(self.scope[n], (int, float)))]
        # Names holding other things (None, a constexpr, a dtype) may be assigned in the
        # body's text and yet keep their value, e.g. `x = ... if FLAG else None` before the
        # loop and `if FLAG: x += ...` in it with FLAG false (Triton accepts that): checked
        # after the body is built (_check_unchanged), an error only where the value changed
        self._unchanged[id(node)] = {n: self.scope[n] for n in assigned if n in self.scope
                                     and n not in carried and n != exclude}
        inits: list[Value] = []
        aggs: dict[str, tuple[Any, int]] = {}  # name -> (the aggregate entering, its leaves)
        leaf_names: list[str] = []
        for n in carried:
            v = self.scope[n]
            if _is_aggregate(v):
                leaves = v.kit_flatten()
                aggs[n] = (v, len(leaves))
                inits.extend(leaves)
                leaf_names.extend(f"{n}.{i}" for i in range(len(leaves)))
                continue
            if not isinstance(v, Value):
                self.at(node)
                v = self.b.to_value(v)
            inits.append(v)
            leaf_names.append(n)
        return carried, inits, aggs, leaf_names

    def _check_unchanged(self, node) -> None:
        """The loop's non-carried names still hold what they entered with."""
        for n, old in self._unchanged.pop(id(node), {}).items():
            v = self.scope.get(n, _MISSING)
            same = v is old or (type(v) is type(old) and isinstance(old, (str, bool, type(None)))
                                and v == old)
            if not same:
                raise self.err(node, f"'{n}' holds {describe(old)} and is reassigned inside a "
                               "runtime loop", "only tiles and numbers can change from one "
                               "iteration to the next")

    def _loop_body(self, node, body: Block, carried: list[str], args_: list[Value],
                   aggs: dict) -> None:
        """The body of a run-time loop (for, while) into `body`, its carried variables bound
        to the block's arguments, ending in the yield of their new values."""
        for n, a in zip(carried, _group(carried, args_, aggs)):
            self.scope[n] = a
        self.b.blocks.append(body)
        self.loop_depth += 1
        try:
            self.block(node.body)
            self._check_unchanged(node)
            self.b.emit("yield", self._carried_yields(carried, args_, node, aggs), [])
        finally:
            self.b.blocks.pop()
            self.loop_depth -= 1

    def _bind_loop_results(self, op, carried: list[str], leaf_names: list[str],
                           aggs: dict) -> None:
        """After the loop, its carried variables are the loop op's results."""
        for r, ln in zip(op.results, leaf_names):
            r.name = ln
        for n, r in zip(carried, _group(carried, op.results, aggs)):
            self.scope[n] = r

    def _carry_aggregate(self, n: str, init: Any, v: Any, args: Any, node) -> list:
        """The leaves a loop-carried block pointer yields: the same kind of pointer (block
        shape, order, element type) with run-time fields of the types it entered with."""
        if not _is_aggregate(v) or v.kit_static() != init.kit_static():
            raise CompileError(
                f"loop-carried variable '{n}' changes type in the loop: it enters as "
                f"{init.kit_describe()} and is reassigned as "
                f"{v.kit_describe() if _is_aggregate(v) else describe(v)}",
                self.assign_locs.get(n, self.p.loc(node)),
                "advance a block pointer with kit.advance(ptr, offsets); keep its block shape")
        self.at(node)
        return [self.b.cast(x, a.dtype) for x, a in zip(v.kit_flatten(), args.kit_flatten())]

    def stmt_While(self, node: ast.While) -> None:
        """`while cond:` on a run-time condition: a `while` op whose first region computes
        the condition from the carried variables and whose second is the body."""
        if node.orelse:
            raise self.err(node, "while/else is not supported")
        self._no_return_in(node.body)
        assigned = _assigned(node.body)
        carried, inits, aggs, leaf_names = self._carried(assigned, node)
        types = [TileType(v.dtype, v.shape) for v in inits]
        before = dict(self.scope)
        cond_blk = Block()
        cargs = [cond_blk.add_arg(t, n) for n, t in zip(leaf_names, types)]
        for n, a in zip(carried, _group(carried, cargs, aggs)):
            self.scope[n] = a
        self.b.blocks.append(cond_blk)
        try:
            cond = self.expr(node.test)
            if isinstance(cond, Value):
                cond = self._scalar_cond(cond, node.test, "a `while`")
                self.b.emit("yield", [cond], [])
        finally:
            self.b.blocks.pop()
        self.scope = dict(before)
        if not isinstance(cond, Value):
            if not cond:
                return  # never runs
            raise self.err(node.test, "this `while` never ends: its condition is true at "
                           "compile time", "kernels have no `break`: loop on a condition the "
                           "body changes")
        body = Block()
        args_ = [body.add_arg(t, n) for n, t in zip(leaf_names, types)]
        self._loop_body(node, body, carried, args_, aggs)
        self.scope = before
        self.at(node)
        op = self.b.while_op(inits, types, cond_blk, body)
        self._bind_loop_results(op, carried, leaf_names, aggs)
        for n in assigned:
            if n not in carried and n not in before:
                self.scope.pop(n, None)


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


MAX_UNROLL = 4096  # kit.static_range iterations: each one compiles its body again

_RETURN_IN_LOOP = "`return` inside a loop is not supported (Triton refuses it too)"
_RETURN_IN_LOOP_HINT = "assign to a variable and return it after the loop"


def _first_return(node: ast.AST) -> ast.Return | None:
    """The first `return` in `node`, outside nested definitions."""
    if isinstance(node, ast.Return):
        return node
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        return None
    for child in ast.iter_child_nodes(node):
        r = _first_return(child)
        if r is not None:
            return r
    return None


def _pair_leaves(a: Any, b: Any, out: list) -> Any:
    """Pairs up the leaves of two returned values of one structure (tuples nest) into
    `out`; returns a function that rebuilds the structure from an iterator of leaves, or
    None when the structures differ."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        if not (isinstance(a, tuple) and isinstance(b, tuple)) or len(a) != len(b):
            return None
        subs = [_pair_leaves(x, y, out) for x, y in zip(a, b)]
        if any(f is None for f in subs):
            return None
        return lambda it: tuple(f(it) for f in subs)
    if _is_aggregate(a) or _is_aggregate(b):  # block pointers: their run-time leaves
        if not (_is_aggregate(a) and _is_aggregate(b)) or a.kit_static() != b.kit_static():
            return None
        subs = [_pair_leaves(x, y, out) for x, y in zip(a.kit_flatten(), b.kit_flatten())]
        return lambda it: a.kit_rebuild([f(it) for f in subs])
    if (a is None) != (b is None):
        return None
    out.append((a, b))
    return lambda it: next(it)


def _rdesc(v: Any) -> str:
    if v is None:
        return "nothing"
    if isinstance(v, tuple):
        return f"a tuple of {len(v)}"
    return describe(v)


def _as_assigned(value: Any) -> Any:
    """A value as an assignment leaves it: Triton's code generator makes a Python number
    a scalar tensor there (`to_tensor`), so `n = 3; x_i8 + n` is int32 and `eps = 1e-6;
    x_fp16 + eps` fp32, while the literal forms take the tile's dtype; tuples element-wise."""
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(_as_assigned(v) for v in value)
    return typed_number(value)


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


def _tdesc(t: TileType) -> str:
    art = "an" if t.dtype.name[0] in "aeiou" else "a"
    if t.is_scalar:
        return f"{art} {t.dtype} scalar"
    return f"{art} {t.dtype} tile of shape {shape_str(t.shape)}"


def _dtype_attr(v: Any) -> str:
    return _dtype_attr_of(v.dtype) if isinstance(v, Value) else "float32"


def _is_aggregate(v: Any) -> bool:
    """A compile-time structure of run-time values (a block pointer, a tensor descriptor)."""
    return hasattr(v, "kit_flatten") and not isinstance(v, type)


def _group(names: list, leaves: list, aggs: dict) -> list:
    """Leaves (loop args or results) back into one value per carried name."""
    out, i = [], 0
    for n in names:
        if n in aggs:
            init, k = aggs[n]
            out.append(init.kit_rebuild(list(leaves[i:i + k])))
            i += k
        else:
            out.append(leaves[i])
            i += 1
    return out
