"""Triton's module path `triton.runtime.errors`: the exceptions libraries catch around
launches (`except triton.runtime.errors.OutOfResources:` to retry with smaller tiles)."""

from kitjit.frontend.errors import AssemblerError, CompileError, KitjitError, OutOfResources

CompilationError = CompileError  # Triton's name for a kernel that does not compile
TritonError = KitjitError        # the base of them all
PTXASError = AssemblerError      # the assembler refused a kernel's PTX

# and, imported on use, AutotunerError and InterpreterError
__all__ = ["CompilationError", "OutOfResources", "PTXASError", "TritonError"]


def __getattr__(name: str):
    if name == "AutotunerError":  # kitjit.autotune imports this module's package: on use
        from kitjit.autotune import AutotuneError

        return AutotuneError
    if name == "InterpreterError":  # what the interpreter finds wrong in a run
        from kitjit.interpreter.errors import InterpreterError

        return InterpreterError
    return _missing(name)


from kitjit.language.triton_names import module_getattr  # noqa: E402

_missing = module_getattr("kitjit.runtime.errors", "triton.runtime.errors")
