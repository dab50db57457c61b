"""Triton's `triton.constexpr_function` and `triton.must_use_result`: decorators of plain
Python helpers that kernels call at compile time (`BLOCK_K: tl.constexpr = pick(K)`)."""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable
from typing import Any

from .kernel_interface import JITCallable


def _unwrap(x: Any) -> Any:
    return x.value if type(x).__name__ == "constexpr" and hasattr(x, "value") else x


class ConstexprFunction(JITCallable):
    """A Python function a kernel calls on compile-time values; its result is a compile-time
    value. Its source goes into the cache key of the kernels that use it, so editing it
    recompiles them (as Triton's)."""

    __kit_constexpr_function__ = True

    def __init__(self, fn: Callable):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else functools.partial(self.__call__, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*(_unwrap(a) for a in args),
                       **{k: _unwrap(v) for k, v in kwargs.items()})

    @functools.cached_property
    def source_hash(self) -> str:
        try:
            src = inspect.getsource(self.fn)
        except (OSError, TypeError):
            src = self.fn.__qualname__
        return hashlib.sha256(src.encode()).hexdigest()


def constexpr_function(fn: Callable) -> ConstexprFunction:
    """Triton's `@triton.constexpr_function`."""
    return ConstexprFunction(fn)


def must_use_result(x: Any, s: Any = True) -> Any:
    """Triton's `@triton.must_use_result` (also `@must_use_result("why")`): accepted and
    recorded (`fn._must_use_result`); kitjit does not check that the result is used."""
    if isinstance(x, str):
        return lambda fn: must_use_result(fn, x)
    x._must_use_result = s
    return x
