"""`@kit.jit`: a Python function becomes a kernel that compiles per specialization."""

from __future__ import annotations

import functools


class JITFunction:
    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)
        self._parsed = None

    @property
    def parsed(self):
        if self._parsed is None:
            from kitjit.frontend.codegen import ParsedFunction

            self._parsed = ParsedFunction(self.fn)
        return self._parsed


def jit(fn=None, **options):
    if fn is None:
        return lambda f: JITFunction(f)
    return JITFunction(fn)
