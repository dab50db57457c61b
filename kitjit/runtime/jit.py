"""Triton's module path `triton.runtime.jit` (`from triton.runtime.jit import JITFunction`):
kitjit's JIT function under the same names."""

from kitjit.jit import JITFunction, jit

__all__ = ["JITFunction", "jit"]
