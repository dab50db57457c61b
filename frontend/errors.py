"""User-facing compile errors: file:line:col, the source line, a caret, and what to do."""

from __future__ import annotations

import linecache

from kitjit.ir.core import Loc


class KitjitError(Exception):
    """The base of the errors kitjit raises about a kernel (Triton's `triton.TritonError`):
    `except triton.TritonError` around a launch catches the same family."""


class CompileError(KitjitError):
    """A mistake in a kernel, reported at the user's own line before anything runs."""

    def __init__(self, message: str, loc: Loc | None = None, hint: str | None = None,
                 notes: list[tuple[str, Loc]] | None = None):
        self.message = message
        self.loc = loc
        self.hint = hint
        self.notes = list(notes or [])
        super().__init__(self.render())

    def add_note(self, text: str, loc: Loc | None = None) -> None:  # noqa: D401
        """Attach another source place (for errors inside called @kit.jit functions). With
        no `loc` this is BaseException.add_note (PEP 678: pytest, hypothesis and others
        call `exc.add_note(text)` on any exception; a required `loc` made that a TypeError
        that hid the CompileError)."""
        if loc is not None:
            self.notes.append((text, loc))
            self.args = (self.render(),)
        else:
            super().add_note(text)

    def render(self) -> str:
        parts = [_located(self.loc, f"error: {self.message}")]
        for text, loc in self.notes:
            parts.append(_located(loc, f"note: {text}"))
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.render()


def _located(loc: Loc | None, text: str) -> str:
    if loc is None:
        return text
    head = f"{loc.file}:{loc.line}:{loc.col + 1}: {text}"
    src = linecache.getline(loc.file, loc.line).rstrip("\n")
    if not src:
        return head
    stripped = src.lstrip()
    cut = len(src) - len(stripped)
    col = max(0, loc.col - cut)
    end = loc.end_col if loc.end_col and loc.end_col > loc.col else loc.col + 1
    width = max(1, min(end - loc.col, len(stripped) - col))
    return f"{head}\n    {stripped}\n    {' ' * col}{'^' * width}"



class OutOfResources(CompileError):
    """A kernel that needs more of a per-block resource (shared memory) than the device has:
    Triton's `triton.runtime.errors.OutOfResources` (fields `required`, `limit`, `name`),
    which libraries catch to fall back to smaller tiles."""

    def __init__(self, required: int, limit: int, name: str, message: str,
                 hint: str | None = None):
        self.required, self.limit, self.name = required, limit, name
        super().__init__(message, None, hint)

class StaticAssertionError(CompileError):
    """A `kit.static_assert` that failed (Triton's `CompileTimeAssertionFailure`)."""


class AssemblerError(KitjitError, RuntimeError):
    """ptxas or nvJitLink refused the PTX of a kernel (Triton's `PTXASError`): a kitjit bug
    or a user's inline assembly. Names the kernel; the assembler's log is in the message."""


class InternalCompilerError(RuntimeError):
    """A bug in kitjit, not in the kernel: names the kernel and the stage; the original
    traceback stays chained (``raise ... from``)."""

    def __init__(self, kernel: str, stage: str, original: BaseException):
        self.kernel = kernel
        self.stage = stage
        super().__init__(
            f"internal compiler error in kitjit while {stage} kernel '{kernel}': "
            f"{type(original).__name__}: {original}\n"
            "This is a bug in kitjit, not in your kernel. Please report it with the kernel "
            "source and the traceback above (set KITJIT_DEBUG=1 to keep intermediate files).")


class CompileWarning(UserWarning):
    """Something that compiles but will be slow (register spills, layout conversions)."""
