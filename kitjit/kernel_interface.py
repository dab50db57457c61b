"""Triton's host-side helper classes of `triton.runtime.jit`, for libraries that check,
wrap or warm up kernels: `KernelInterface` (the base of everything launched as
`kernel[grid](...)`: JITFunction, Autotuner, Heuristics), `MockTensor` (a dtype and a
shape standing in for a tensor in `kernel.warmup`), `TensorWrapper` / `reinterpret` (a
tensor seen as another dtype) and `get_jit_fn_file_line`. Imports nothing of kitjit, so
kitjit.jit can derive from KernelInterface."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: the module Triton's frontend treats as its language (libraries compare against it)
TRITON_MODULE = "kitjit.language"


class JITCallable:
    """Triton's base of things @jit makes (JITFunction): a marker here, so
    `isinstance(fn, JITCallable)` holds for kitjit's kernels."""


class KernelInterface(Generic[T]):
    """Triton's base class of launchable kernels: `fn[grid](*args, **kwargs)` calls
    `fn.run(*args, grid=grid, warmup=False, **kwargs)`; a library's subclass defines `run`.
    kitjit's JITFunction, Autotuner and Heuristics are instances (their own `__getitem__`
    keeps kitjit's fast launch path), so `isinstance(fn, KernelInterface)` checks pass."""

    run: T

    def warmup(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        """Compile without running: torch dtypes among `args` become MockTensors."""
        return self.run(*map(MockTensor.wrap_dtype, args), grid=grid, warmup=True, **kwargs)

    def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        raise NotImplementedError("run not implemented")

    def __getitem__(self, grid: Any) -> T:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


class MockTensor:
    """A tensor's dtype and shape, no memory: what `kernel.warmup(MockTensor(torch.float32),
    ...)` compiles for (a 16-byte aligned pointer of that dtype, as in Triton). Launching one
    raises: only warmup takes shape-only arguments."""

    @staticmethod
    def wrap_dtype(arg: Any) -> Any:
        """A torch dtype becomes a MockTensor of it; anything else is returned as is."""
        if arg.__class__.__name__ == "dtype" and arg.__module__ == "torch":
            return MockTensor(arg)
        return arg

    def __init__(self, dtype: Any, shape: list[int] | None = None):
        self.dtype = dtype
        self.shape = [1] if shape is None else shape

    def stride(self) -> tuple[int, ...]:
        strides = [1]
        for size in reversed(self.shape[1:]):
            strides.append(strides[-1] * size)
        return tuple(reversed(strides))

    @staticmethod
    def data_ptr() -> int:
        return 0  # taken as 16-byte aligned

    @staticmethod
    def ptr_range() -> int:
        return 0

    def __repr__(self) -> str:
        return f"MockTensor({self.dtype}, shape={list(self.shape)})"


class TensorWrapper:
    """A tensor viewed as another element type (`reinterpret(t, dtype)`), e.g. the bytes of
    a uint8 tensor as fp8 where torch lacks the dtype. kitjit launches do not take one yet
    (a clear TypeError names the argument); the host methods Triton's has work."""

    def __init__(self, base: Any, dtype: Any):
        self.dtype = dtype
        self.base = base
        self.data = base.data
        self.device = base.device
        self.shape = base.shape

    def data_ptr(self) -> int:
        return self.base.data_ptr()

    def stride(self, *args: Any) -> Any:
        return self.base.stride(*args)

    def __str__(self) -> str:
        return f"TensorWrapper[{self.dtype}]({self.base})"

    def element_size(self) -> int:
        return self.base.element_size()

    def cpu(self) -> TensorWrapper:
        return TensorWrapper(self.base.cpu(), self.dtype)

    def copy_(self, other: TensorWrapper) -> None:
        self.base.copy_(other.base)

    def clone(self) -> TensorWrapper:
        return TensorWrapper(self.base.clone(), self.dtype)

    def to(self, device: Any) -> TensorWrapper:
        return TensorWrapper(self.base.to(device), self.dtype)

    def new_empty(self, sizes: Any) -> TensorWrapper:
        return TensorWrapper(self.base.new_empty(sizes), self.dtype)


def reinterpret(tensor: Any, dtype: Any) -> Any:
    """`tensor` seen as `dtype` (a TensorWrapper); reinterpreting a wrapper as its base's
    own dtype gives the base back, as in Triton."""
    if isinstance(tensor, TensorWrapper):
        if dtype == tensor.base.dtype:
            return tensor.base
        return TensorWrapper(tensor.base, dtype)
    if hasattr(tensor, "data_ptr"):
        return TensorWrapper(tensor, dtype)
    raise TypeError(f"Cannot reinterpret a {type(tensor)}.")


def get_jit_fn_file_line(fn: Any) -> tuple[str, int]:
    """(file, line of `def`) of a kernel, through any autotune/heuristics wrappers."""
    import inspect

    base = fn
    while hasattr(base.fn, "fn"):  # an Autotuner's or Heuristics' .fn is a kernel
        base = base.fn
    py = base.fn
    lines, first = inspect.getsourcelines(py)
    for i, line in enumerate(lines):
        if line.strip().startswith("def "):
            return py.__code__.co_filename, first + i
    return py.__code__.co_filename, first


def pop_warmup(kwargs: dict[str, Any], arg_names: list[str], what: str) -> None:
    """Drop Triton's `warmup=False` from a wrapper's `run(...)` keywords (unless the kernel
    has a parameter of that name); `warmup=True` of a tuned kernel raises: kitjit warms up
    one @kit.jit function with one config."""
    if "warmup" in kwargs and "warmup" not in arg_names and kwargs.pop("warmup"):
        raise NotImplementedError(f"{what}.warmup (run(..., warmup=True)) is not supported yet "
                                  "for autotuned or heuristics kernels: warm up the @kit.jit "
                                  "function with one config's meta-parameters")


def check_wrapper_arg(kernel: str, name: str, a: Any, shape_only: bool) -> None:
    """Raise for a kernel argument kitjit cannot launch with: a TensorWrapper (its wrapped
    dtype would have to reach the kernel's typing and the interpreter's view of memory), a
    MockTensor outside warmup (it has no memory)."""
    if isinstance(a, TensorWrapper):
        raise TypeError(f"argument '{name}' of {kernel}: a reinterpret()ed tensor "
                        f"(TensorWrapper of {a.dtype}) is not supported yet as a kernel "
                        "argument: pass a torch view of the dtype instead (t.view(torch."
                        "float8_e4m3fn)), or the base tensor and convert in the kernel with "
                        ".to(dtype, bitcast=True)")
    if isinstance(a, MockTensor) and not shape_only:
        raise TypeError(f"argument '{name}' of {kernel} is a MockTensor (a dtype and a "
                        "shape, no memory): only kernel.warmup(...) takes one; launches need "
                        "real tensors")
