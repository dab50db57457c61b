"""Host runtime: the CUDA driver and launching (`kitjit.runtime.driver.active` answers
Triton's `triton.runtime.driver.active` questions), and the scratch allocator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_allocator: Callable[[int, int, Any], Any] | None = None


def set_allocator(allocator: Callable[[int, int, Any], Any] | None) -> None:
    """Triton 3.x's `triton.set_allocator(fn)`: `fn(size, alignment, stream)` returns the
    global scratch memory (a tensor) that kernels needing it get at launch: those that build
    tensor descriptors on the device (`kit.make_tensor_descriptor` on sm_90a, 128 bytes per
    descriptor per program; `alignment` is 128, `stream` the CUstream handle). Without one,
    kitjit allocates a torch uint8 tensor per launch (Triton raises instead). None removes
    it."""
    global _allocator
    if allocator is not None and not callable(allocator):
        raise TypeError(f"set_allocator takes a function (size, alignment, stream) -> tensor, "
                        f"or None; got {type(allocator).__name__}")
    _allocator = allocator


def get_allocator() -> Callable[[int, int, Any], Any] | None:
    """The allocator given to `set_allocator`, or None."""
    return _allocator


# kitjit.runtime.driver.active and kitjit.runtime.errors.OutOfResources, as Triton's
from . import driver, errors  # noqa: E402,F401

_LAZY = {"Autotuner": "autotune", "Config": "autotune", "autotune": "autotune",
         "Heuristics": "autotune", "heuristics": "autotune", "JITFunction": "jit",
         "OutOfResources": "runtime.errors", "InterpreterError": "runtime.errors",
         "KernelInterface": "kernel_interface", "MockTensor": "kernel_interface",
         "TensorWrapper": "kernel_interface", "reinterpret": "kernel_interface"}


def __getattr__(name: str):
    """Triton's `triton.runtime` names that live elsewhere in kitjit (imported on use:
    kitjit.jit imports this package)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"kitjit.{_LAZY[name]}"), name)
    from kitjit.language.triton_names import missing_module_name_message

    raise AttributeError(missing_module_name_message("kitjit.runtime", "triton.runtime", name))
