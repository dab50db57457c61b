"""Triton's module path `triton.compiler` (`from triton.compiler import CompiledKernel`,
`except triton.compiler.CompilationError`): kitjit's classes under Triton's names; the rest
of Triton's compiler API is a one-line "not supported yet"."""

from kitjit.frontend.errors import CompileError as CompilationError
from kitjit.jit import CompiledKernel
from kitjit.language.triton_names import module_getattr

from . import errors  # noqa: F401

__all__ = ["CompilationError", "CompiledKernel", "errors"]

__getattr__ = module_getattr("kitjit.compiler", "triton.compiler")
