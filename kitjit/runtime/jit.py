"""Triton's module path `triton.runtime.jit` (`from triton.runtime.jit import JITFunction`,
`KernelInterface`, `MockTensor`, `reinterpret`...): kitjit's JIT function and the host
helpers of kitjit.kernel_interface under the same names, and Triton's small helpers."""

from __future__ import annotations

from typing import Any

from kitjit.constexpr_fn import ConstexprFunction, constexpr_function
from kitjit.jit import JITFunction, jit
from kitjit.jit_triton_attrs import KernelParam
from kitjit.kernel_interface import (
    TRITON_MODULE,
    JITCallable,
    KernelInterface,
    MockTensor,
    TensorWrapper,
    get_jit_fn_file_line,
    reinterpret,
)
from kitjit.runtime.driver import driver

__all__ = ["ConstexprFunction", "JITCallable", "JITFunction", "KernelInterface",
           "KernelParam", "MockTensor", "TRITON_MODULE", "TensorWrapper", "constexpr_function",
           "convert_to_tuple_if_list", "driver", "get_full_name", "get_jit_fn_file_line",
           "is_namedtuple", "jit", "reinterpret"]


def get_full_name(fn: Any) -> str:
    """'module.qualname' of a function, as Triton names kernels in its hooks."""
    return f"{fn.__module__}.{fn.__qualname__}"


def is_namedtuple(val: Any) -> bool:
    """Whether `val` is a namedtuple class."""
    return isinstance(val, type) and issubclass(val, tuple) and hasattr(val, "_fields")


def convert_to_tuple_if_list(item: Any) -> Any:
    """Lists, nested ones included, as tuples (hashable specialization values)."""
    if not isinstance(item, list):
        return item
    return tuple(convert_to_tuple_if_list(v) for v in item)


from kitjit.language.triton_names import module_getattr, top_attr  # noqa: E402

__getattr__ = module_getattr("kitjit.runtime.jit", "triton.runtime.jit", top_attr)
