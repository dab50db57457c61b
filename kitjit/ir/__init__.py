"""The tile IR: types, values and ops, layouts, and its text form."""

from . import ops as ops  # noqa: F401  (declares the ops in the registry)
from .core import Block, Function, Loc, Op, Value, walk_block
from .types import DType, PointerDType, TileType, dtype_from_name, from_torch, scalar

__all__ = ["Block", "Function", "Loc", "Op", "Value", "walk_block", "DType", "PointerDType",
           "TileType", "dtype_from_name", "from_torch", "scalar"]
