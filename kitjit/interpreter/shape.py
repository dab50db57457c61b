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


# ------------------------------------------------------------------ ops that move elements
# numpy one-liners; every order is row-major (kitjit never reorders, can_reorder or not).
@semantics("permute")
@pure
def permute(op: Op, ctx: _Ctx) -> Callable:
    dims = op.attrs["dims"]
    return lambda x: np.ascontiguousarray(np.transpose(x, dims))


@semantics("reshape")
@pure
def reshape(op: Op, ctx: _Ctx) -> Callable:
    shape = op.result.shape
    return lambda x: np.reshape(x, shape)


@semantics("join")
@pure
def join(op: Op, ctx: _Ctx) -> Callable:
    return lambda a, b: np.stack([a, b], axis=-1)


@semantics("split")
def split(comp, op: Op) -> Callable:
    (a,), (r0, r1) = [v.id for v in op.operands], [v.id for v in op.results]

    def h(env) -> None:
        x = env[a]
        env[r0], env[r1] = np.ascontiguousarray(x[..., 0]), np.ascontiguousarray(x[..., 1])
    return h


@semantics("cat")
@pure
def cat(op: Op, ctx: _Ctx) -> Callable:
    return lambda a, b: np.concatenate([a, b], axis=0)


@semantics("flip")
@pure
def flip(op: Op, ctx: _Ctx) -> Callable:
    dim = op.attrs["dim"]
    return lambda x: np.ascontiguousarray(np.flip(x, dim))


@semantics("gather")
@pure
def gather(op: Op, ctx: _Ctx) -> Callable:
    """An index outside [0, n) is taken modulo n (n a power of two), as on the GPU."""
    axis = op.attrs["axis"]
    n = op.operands[0].shape[axis]
    return lambda src, idx: np.take_along_axis(src, (idx & (n - 1)).astype(np.int64), axis)
