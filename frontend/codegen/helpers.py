"""Small pieces the statement, expression and call parts of the codegen share."""

from __future__ import annotations

from kitjit.ir.types import DType


class _Return(Exception):
    pass


_MISSING = object()


def _dtype_attr_of(dt: DType) -> str:
    return {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64",
            "i1": "int1", "fp8e4nv": "float8e4nv", "fp8e5": "float8e5",
            "fp8e4b15": "float8e4b15"}.get(
        dt.name, dt.name.replace("i", "int").replace("u", "uint"))


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
