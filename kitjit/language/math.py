"""`kit.math`: Triton's `tl.math` namespace. Its functions are the kit.<name> markers
(kit.math.exp is kit.exp); a Triton math name kitjit lacks is a marker whose call is a
"not supported yet" CompileError at the user's line."""

from __future__ import annotations

from .base import BUILTINS, NAMESPACED, namespaced

# triton.language.math's names (plus cdiv, which Triton's math module also reaches)
TRITON_MATH = ("umulhi", "exp", "exp2", "fma", "log", "log2", "cos", "rsqrt", "sin", "sqrt",
               "sqrt_rn", "abs", "fdiv", "div_rn", "erf", "floor", "ceil", "cdiv")


def unsupported(namespace: str, name: str, triton: str):
    """The marker of a Triton name kitjit does not implement yet."""
    q = f"unsupported.{namespace}.{name}"
    return NAMESPACED.get(q) or namespaced(q, f"{namespace}.{name} is not supported yet "
                                              f"(Triton's {triton}.{name})")


def __getattr__(name: str):
    if name in BUILTINS:
        return BUILTINS[name]
    if name in TRITON_MATH:
        return unsupported("kit.math", name, "tl.math")
    raise AttributeError(f"module 'kit.math' has no attribute '{name}'")


def __dir__():
    return sorted(TRITON_MATH)
