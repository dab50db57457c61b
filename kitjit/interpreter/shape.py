"""Semantics of the shape family: splat, broadcast, expand_dims, and convert_layout (layouts
do not exist here: it returns its operand)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kitjit.ir.core import Op
from kitjit.ir.registry import semantics

from .compiler import pure
from .numeric import _np
from .sync import _Ctx


@semantics("splat")
@pure
def splat(op: Op, ctx: _Ctx) -> Callable:
    shape, nd = op.result.shape, _np(op.result.dtype)
    return lambda x: np.full(shape, x, nd)


@semantics("broadcast")
@pure
def broadcast(op: Op, ctx: _Ctx) -> Callable:
    shape = op.result.shape
    return lambda x: np.broadcast_to(x, shape)


@semantics("expand_dims")
@pure
def expand_dims(op: Op, ctx: _Ctx) -> Callable:
    axis = op.attrs["axis"]
    return lambda x: np.expand_dims(x, axis)


@semantics("convert_layout")
@pure
def convert_layout(op: Op, ctx: _Ctx) -> Callable:
    return lambda x: x
