"""`kit.math`: Triton's `tl.math` namespace, and the libdevice functions that Triton 2.x's
`tl.math` held (`from triton.language.math import tanh` in kernels written for it). Its
functions are the kit.<name> markers (kit.math.exp is kit.exp); a Triton math name kitjit
lacks is a marker whose call is a "not supported yet" CompileError at the user's line."""

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
    from .extra import libdevice

    if name in libdevice.SUPPORTED:  # Triton 2.x's tl.math was libdevice: `tl.math.tanh`
        return getattr(libdevice, name)
    if name in TRITON_MATH:
        return unsupported("kit.math", name, "tl.math")
    from .triton_names import missing_module_name_message

    raise AttributeError(missing_module_name_message("kit.math", "triton.language.math", name))


def __dir__():
    from .extra import libdevice

    return sorted(set(TRITON_MATH) | set(libdevice.SUPPORTED))
