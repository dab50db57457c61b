"""Host-side tensor descriptors: Triton's `triton.tools.tensor_descriptor.TensorDescriptor`.

A descriptor names a strided tensor (a base tensor, its shape and strides, the last stride 1)
and the block shape a kernel loads and stores through it. Passed as a kernel argument, the
kernel reads `desc.load([i, j])` and writes `desc.store([i, j], tile)`: blocks at element
offsets, out-of-bounds parts read as zero (or NaN with `padding="nan"`) and are not written.

The block shape is part of the kernel's specialization (like a constexpr: autotune pre-hooks
set it per config, as Triton's tutorials do); shape and strides are run-time values. On
sm_90a a 2-d descriptor whose block fits a TMA box is copied by the Tensor Memory
Accelerator (the CUtensorMap is encoded on the host at launch); other ranks, other GPUs and
the interpreter use masked loads and stores with the same results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TensorDescriptor"]


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


@dataclass
class TensorDescriptor:
    """`TensorDescriptor(base, shape, strides, block_shape, padding="zero")`, as Triton's."""

    base: Any
    shape: list[int]
    strides: list[int]
    block_shape: list[int]
    padding: str = "zero"

    def __post_init__(self) -> None:
        self.shape = [int(s) for s in self.shape]
        self.strides = [int(s) for s in self.strides]
        self.block_shape = list(self.block_shape)
        rank = len(self.shape)
        if not 1 <= rank <= 5:
            raise ValueError(f"TensorDescriptor: rank must be 1 to 5, got {rank}")
        if len(self.strides) != rank or len(self.block_shape) != rank:
            raise ValueError(f"TensorDescriptor: shape {self.shape}, strides {self.strides} "
                             f"and block_shape {self.block_shape} must have the same rank")
        if not hasattr(self.base, "data_ptr"):
            raise TypeError(f"TensorDescriptor: base must be a tensor, got "
                            f"{type(self.base).__name__}")
        if type(self.base).__name__ not in ("FakeTensor", "FunctionalTensor") and \
                self.base.data_ptr() % 16:
            raise ValueError("TensorDescriptor: the base must be 16-byte aligned")
        if self.strides[-1] != 1:
            raise ValueError(f"TensorDescriptor: the last dimension must be contiguous "
                             f"(stride 1), strides are {self.strides}")
        self._check_block()
        elem = self.base.element_size()
        if any(s * elem % 16 for s in self.strides[:-1]):
            raise ValueError(f"TensorDescriptor: strides {self.strides} must be multiples of "
                             f"16 bytes (but the last)")
        if any(s <= 0 for s in self.shape):
            raise ValueError(f"TensorDescriptor: shape {self.shape} must be positive")
        if self.padding not in ("zero", "nan"):
            raise ValueError(f"TensorDescriptor: padding must be 'zero' or 'nan', got "
                             f"{self.padding!r}")
        if self.padding == "nan" and not self.base.dtype.is_floating_point:
            raise ValueError("TensorDescriptor: padding='nan' needs a floating-point tensor")

    def _check_block(self) -> None:
        if not all(isinstance(b, int) and _pow2(b) for b in self.block_shape):
            raise ValueError(f"TensorDescriptor: block_shape {self.block_shape} must hold "
                             f"powers of two")

    @staticmethod
    def from_tensor(tensor: Any, block_shape: list[int], padding: str = "zero"
                    ) -> TensorDescriptor:
        """The descriptor of a whole tensor: its shape and strides."""
        return TensorDescriptor(tensor, list(tensor.shape), list(tensor.stride()),
                                block_shape, padding)

    def kit_key(self) -> tuple:
        """What a launch specializes on: device, dtype, rank, block shape, padding (shape
        and strides are run-time values)."""
        b = self.base
        return (TensorDescriptor, b.get_device(), b.dtype, len(self.shape),
                tuple(self.block_shape), self.padding)

    def kit_values(self) -> list:
        """The run-time values the kernel gets: the base pointer, the shape (i32), the
        strides but the last (i64)."""
        return [self.base.data_ptr(), *self.shape, *self.strides[:-1]]


from kitjit.language.triton_names import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("kitjit.tools.tensor_descriptor", "triton.tools.tensor_descriptor")
