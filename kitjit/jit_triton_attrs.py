"""The attributes of Triton's JITFunction that host wrappers read (FlagGems-style code
generators and launch helpers: `kernel.src`, `kernel.module`, `kernel.signature`,
`kernel.starting_line_number`, ...), as a mixin of kitjit's JITFunction (which has `fn`,
`params`, `arg_names`, `constexprs`, `do_not_specialize` itself)."""

from __future__ import annotations

import functools
import inspect
import textwrap


class TritonJITAttrs:
    """Read-only views of `self.fn` under Triton's names."""

    fn: object

    @functools.cached_property
    def _source_lines(self) -> tuple[list[str], int]:
        return inspect.getsourcelines(self.fn)

    @property
    def raw_src(self) -> list[str]:
        """The function's source lines, decorators included (Triton's raw_src)."""
        return self._source_lines[0]

    @property
    def src(self) -> str:
        """The function's source from its `def` line on, dedented (Triton's src)."""
        text = textwrap.dedent("".join(self.raw_src))
        return text[text.find("def "):]

    @property
    def starting_line_number(self) -> int:
        return self._source_lines[1]

    @property
    def module(self) -> str:
        return self.fn.__module__

    @property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.fn)

    def repr(self, _=None) -> str:
        return self.fn.__name__ if hasattr(self.fn, "__name__") else repr(self.fn)

    noinline = False  # kitjit inlines every @kit.jit callee
    is_gluon = False
