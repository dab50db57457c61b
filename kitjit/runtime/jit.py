"""Triton's module path `triton.runtime.jit` (`from triton.runtime.jit import JITFunction`,
`KernelInterface`, `MockTensor`, `reinterpret`...): kitjit's JIT function and the host
helpers of kitjit.kernel_interface under the same names."""

from kitjit.jit import JITFunction, jit
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

__all__ = ["JITCallable", "JITFunction", "KernelInterface", "MockTensor", "TRITON_MODULE",
           "TensorWrapper", "driver", "get_jit_fn_file_line", "jit", "reinterpret"]


from kitjit.language.triton_names import module_getattr, top_attr  # noqa: E402

__getattr__ = module_getattr("kitjit.runtime.jit", "triton.runtime.jit", top_attr)
