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


class KernelParam(str):
    """One entry of `kernel.params`: the parameter's name (kitjit uses params as names), with
    the attributes of Triton's KernelParam that wrappers read (`p.name`, `p.num`,
    `p.is_constexpr`, `p.do_not_specialize`, `p.default`, `p.has_default`, ...)."""

    def __new__(cls, num: int, param: inspect.Parameter, is_constexpr: bool,
                do_not_specialize: bool, do_not_specialize_on_alignment: bool):
        self = super().__new__(cls, param.name)
        self.num, self._param = num, param
        self.is_constexpr = is_constexpr
        self.do_not_specialize = do_not_specialize
        self.do_not_specialize_on_alignment = do_not_specialize_on_alignment
        return self

    @property
    def name(self) -> str:
        return str(self)

    @property
    def annotation(self) -> str:
        a = self._param.annotation
        if a is inspect.Parameter.empty:
            return ""
        return a if isinstance(a, str) else getattr(a, "__name__", repr(a))

    @property
    def is_const(self) -> bool:
        """Annotated `kit.const` (Triton's `tl.const`): a pointer the kernel only reads."""
        from kitjit.frontend.semantic.const_ptr import is_const_annotation

        return is_const_annotation(self._param.annotation)

    @property
    def default(self):
        return self._param.default

    @property
    def has_default(self) -> bool:
        return self._param.default is not inspect.Parameter.empty
