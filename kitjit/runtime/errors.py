"""Triton's module path `triton.runtime.errors`: the exceptions libraries catch around
launches (`except triton.runtime.errors.OutOfResources:` to retry with smaller tiles)."""

from kitjit.frontend.errors import CompileError, OutOfResources

CompilationError = CompileError  # Triton's name for a kernel that does not compile

__all__ = ["CompilationError", "OutOfResources"]
