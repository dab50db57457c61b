"""The entry points: `ParsedFunction` (a function's AST and source locations),
`FunctionCodegen` (the walk of one body) and `build_kernel_ir` (a kernel's tile IR)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from kitjit.ir.core import Function, Loc, Value
from kitjit.ir.types import TileType, dtype_from_name, int32, int64

from ..errors import CompileError
from ..semantic import Builder
from ..semantic.block_ptr import TensorDescriptor
from ..semantic.const_ptr import is_const_annotation
from .calls import CallsMixin
from .expressions import ExpressionsMixin
from .helpers import _Return
from .statements import StatementsMixin, _first_return


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


class FunctionCodegen(StatementsMixin, ExpressionsMixin, CallsMixin):
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
        self.loop_depth = 0  # run-time and unrolled loops around the current statement
        self._unchanged: dict[int, dict[str, Any]] = {}  # loop node -> names it must keep

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
        for i, s in enumerate(stmts):
            if isinstance(s, ast.If) and _first_return(s) is not None:
                self.at(s)
                self.if_returning(s, stmts[i + 1:])  # runs the rest of the list too
                return
            self.stmt(s)


def build_kernel_ir(jf, arg_specs: dict[str, Any], num_warps: int,
                    tma: bool = False, target: str | None = None) -> Function:
    """The tile IR of kernel `jf` for one specialization.

    `arg_specs` maps each parameter to either a `TileType` (a run-time argument: a pointer,
    an int, a float), ('const', value) for values folded in (constexprs, ints equal to 1,
    None), or ('desc', dtype, rank, block_shape, padding) for a host TensorDescriptor (run-time
    arguments `<p>.base`, `<p>.shape<d>`, `<p>.stride<d>` but the last, which is 1).
    `tma`: the target copies host descriptors' blocks with TMA (sm_90a). `target`: set (as
    `fn.attrs["target"]`) only for the targets whose level-2 typing and layouts differ from
    Hopper's (sm_80/86/89: frontend/ampere.py).
    """
    parsed = jf.parsed
    args = []
    scope: dict[str, Any] = {}
    descs = {}
    for p in parsed.params:
        spec = arg_specs[p]
        if isinstance(spec, TileType):
            v = Value(spec, p)
            args.append(v)
            scope[p] = v
        elif spec[0] == "desc":
            r = spec[2]
            leaves = [Value(TileType(dtype_from_name("*" + spec[1])), f"{p}.base")]
            leaves += [Value(TileType(int64), f"{p}.shape{d}") for d in range(r)]
            leaves += [Value(TileType(int64), f"{p}.stride{d}") for d in range(r - 1)]
            args += leaves
            descs[p] = (spec, leaves)
        else:
            scope[p] = spec[1]
    fn = Function(parsed.fn.__name__, args, {"num_warps": num_warps})
    const = _const_params(parsed.fn)
    if const:   # `X: kit.const`: stores through these are compile errors (const_ptr.py)
        fn.attrs["_const_ptrs"] = {v.id: v.name for v in args
                                   if v.name in const and v.dtype.is_ptr()}
    if target is not None:
        fn.attrs["target"] = target
    if tma:  # kit.make_tensor_descriptor builds its CUtensorMap in the kernel
        fn.attrs["_tma_target"] = True
    builder = Builder(fn)
    for p, (spec, leaves) in descs.items():
        r, block = spec[2], tuple(spec[3])
        one = builder.constant(1, int64)
        zeros = [builder.constant(0, int32) for _ in range(r)]
        scope[p] = TensorDescriptor(leaves[0], leaves[1:1 + r], [*leaves[1 + r:], one], zeros,
                                    block, tuple(range(r - 1, -1, -1)), spec[4],
                                    p if tma else None)
    cg = FunctionCodegen(parsed, builder, scope)
    cg.run()
    scratch = fn.attrs.get("_scratch_arg")
    if scratch is not None:  # the global scratch pointer is the kernel's last parameter
        fn.body.args.remove(scratch)
        fn.body.args.append(scratch)
    return fn


def _const_params(fn) -> set[str]:
    """The parameters annotated `kit.const` (Triton's pointer-to-const `tl.const`)."""
    ann = getattr(fn, "__annotations__", {})
    return {n for n, a in ann.items() if is_const_annotation(a)}


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
