"""Triton's module path `triton.runtime.jit` (`from triton.runtime.jit import JITFunction`):
kitjit's JIT function under the same names."""

from kitjit.jit import JITFunction, jit

__all__ = ["JITFunction", "jit"]


from kitjit.language.triton_names import module_getattr, top_attr  # noqa: E402

__getattr__ = module_getattr("kitjit.runtime.jit", "triton.runtime.jit", top_attr)
