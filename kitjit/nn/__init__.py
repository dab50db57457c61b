"""Torch-facing neural-network ops built on kitjit kernels (`kitjit.nn.functional`)."""

from . import functional

__all__ = ["functional"]
