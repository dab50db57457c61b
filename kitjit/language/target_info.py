"""Triton's `tl.target_info`: compile-time questions about the GPU a kernel is compiled for
(`if tl.target_info.cuda_capability_geq(9, 0):` guards sm_90-only code). Each answer is a
constexpr function, so a kernel branches on it at compile time.

The target is the arch the kernel is being compiled for (`arch=` or the launch's GPU; the
answer is part of that compile, whose cache key holds the arch). In the interpreter and in
host code it is the GPU the driver sees, as Triton's interpreter asks its active driver:
without a GPU there is no CUDA target (is_cuda() is False), as in Triton."""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator

from ..constexpr_fn import constexpr_function
from ..runtime.driver import GPUTarget

__all__ = ["current_target"]

#: the PTX arch ("sm_90a") of the kernel being compiled, None outside a GPU compile
_COMPILE_ARCH: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "kitjit_compile_arch", default=None)


@contextlib.contextmanager
def compiling_for(arch: str | None) -> Iterator[None]:
    """The target `current_target()` answers while a kernel is built for `arch` (None: the
    interpreter, which asks the driver)."""
    token = _COMPILE_ARCH.set(arch)
    try:
        yield
    finally:
        _COMPILE_ARCH.reset(token)


def current_target() -> GPUTarget | None:
    """Triton's `current_target()`: GPUTarget("cuda", 90, 32) for sm_90a; None where there
    is no CUDA target (no GPU, outside a GPU compile), as Triton's None without a driver."""
    arch = _COMPILE_ARCH.get()
    if arch is not None:
        m = re.match(r"sm_(\d+)", arch)
        return GPUTarget("cuda", int(m.group(1)), 32) if m else None
    from ..runtime.driver import driver

    target = driver.active.get_current_target()
    return target if target.backend == "cuda" else None


@constexpr_function
def is_cuda() -> bool:
    """Whether the target is an NVIDIA GPU."""
    target = current_target()
    return target is not None and target.backend == "cuda"


@constexpr_function
def cuda_capability_geq(major: int, minor: int = 0) -> bool:
    """Whether the target's compute capability is at least (major, minor): sm_90a answers
    True for (9, 0), (8, 9), ... and False for (10, 0)."""
    target = current_target()
    if target is None or target.backend != "cuda":
        return False
    return target.arch >= major * 10 + minor


@constexpr_function
def is_hip() -> bool:
    """Whether the target is an AMD GPU: never, kitjit compiles for NVIDIA GPUs only."""
    target = current_target()
    return target is not None and target.backend == "hip"


@constexpr_function
def is_hip_cdna3() -> bool:
    """Whether the target is AMD's gfx942: never (see is_hip)."""
    target = current_target()
    return target is not None and target.arch == "gfx942"


@constexpr_function
def is_hip_cdna4() -> bool:
    """Whether the target is AMD's gfx950: never (see is_hip)."""
    target = current_target()
    return target is not None and target.arch == "gfx950"
