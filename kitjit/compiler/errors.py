"""Triton's module path `triton.compiler.errors`: the exception a kernel that does not
compile raises (kitjit's CompileError, reported at the user's line)."""

from kitjit.frontend.errors import CompileError as CompilationError
from kitjit.frontend.errors import KitjitError as TritonError
from kitjit.frontend.errors import StaticAssertionError as CompileTimeAssertionFailure
from kitjit.language.triton_names import module_getattr

__all__ = ["CompilationError", "CompileTimeAssertionFailure", "TritonError"]

__getattr__ = module_getattr("kitjit.compiler.errors", "triton.compiler.errors")
