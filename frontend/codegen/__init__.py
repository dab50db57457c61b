"""Python AST -> tile IR.

The body of a `@kit.jit` function is walked once per specialization. Every expression
evaluates either to an IR `Value` (something the GPU computes) or to a plain Python object
(a constexpr, a dtype, a module, a function): operations on Python objects run at compile
time, which is all the constant folding the language needs. `kit.static_range` loops unroll
and `if` on a constant compiles one branch; `range` loops and `if` on a runtime value become
`for` / `if` ops whose carried values are the variables the body assigns.

The walk is one `FunctionCodegen` (`build.py`, with `ParsedFunction` and `build_kernel_ir`)
made of three parts: `statements.py` (assign, if, for, return, ...), `expressions.py`
(names, operators, comparisons, attributes, subscripts) and `calls.py` (calls: kit builtins
through the call-rule table of `frontend/semantic`, inlined @kit.jit functions, tile methods,
Python builtins).
"""

from .build import FunctionCodegen, ParsedFunction, build_kernel_ir

__all__ = ["FunctionCodegen", "ParsedFunction", "build_kernel_ir"]
