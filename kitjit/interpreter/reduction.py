"""Semantics of the reduction family: `reduce` along one axis (sum, max, min, argmax,
argmin; sums accumulate in the result dtype, bf16 results are rounded) and
`reduce_combine` (kit.reduce: the combine function's region run on whole arrays)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kitjit.ir.core import Block, Op
from kitjit.ir.registry import semantics

from .compiler import Env, _Compiler, pure
from .floats import reduce_maxnum
from .numeric import _fixer, _np
from .sync import _Ctx


@semantics("reduce")
@pure
def _reduce(op: Op, ctx: _Ctx) -> Callable:
    kind, axis = op.attrs["kind"], op.attrs["axis"]
    rdt = _np(op.result.dtype)
    fix = _fixer(op.result.dtype)
    if kind == "sum":
        def f(x):
            r = np.sum(x, axis=axis, dtype=rdt)
            if np.issubdtype(rdt, np.floating) and np.any(r == 0):
                # the GPU's tree of fadds has no +0.0 identity: a row of -0.0 sums to -0.0
                # (numpy's pairwise sum starts from +0.0)
                neg = np.all((x == 0) & np.signbit(x), axis=axis)
                r = np.where(neg, np.copysign(r, -1.0), r)[()].astype(rdt)
            return r
    elif kind in ("max", "min"):
        # as the GPU's tree of maxnum/minnum: NaNs are skipped unless a row is all NaN,
        # -0.0 < +0.0 (floats.py)
        largest = kind == "max"

        def f(x):
            return np.asarray(reduce_maxnum(x, axis, largest)).astype(rdt)
    elif kind in ("argmax", "argmin"):
        # the first extreme element (the GPU's arg_better: -0.0 == +0.0 is a tie, the
        # smaller index wins; the first NaN beats every number)
        g = np.argmax if kind == "argmax" else np.argmin

        def f(x):
            return g(x, axis=axis).astype(rdt)
    else:
        raise NotImplementedError(f"interpreter: reduce kind '{kind}'")
    if fix is not None:
        return lambda x: fix(f(x))
    return f


def region_fn(comp: _Compiler, region: Block) -> Callable:
    """A combine function's region as `f(env, lhs, rhs) -> list`, vectorised: its scalar ops
    run on whole arrays of left and right operands."""
    handlers = comp.block(region)
    arg_ids = [a.id for a in region.args]
    ys = [v.id for v in region.terminator.operands]
    dts = [_np(v.dtype) for v in region.terminator.operands]

    def call(env: Env, lhs: list, rhs: list) -> list:
        for i, v in zip(arg_ids, (*lhs, *rhs)):
            env[i] = v
        for h in handlers:
            h(env)
        return [np.asarray(env[y]).astype(dt, copy=False) for y, dt in zip(ys, dts)]
    return call


@semantics("reduce_combine")
def _reduce_combine(comp: _Compiler, op: Op) -> Callable:
    """Adjacent pairs along the axis, level by level (a tree that keeps the operands in
    order)."""
    axis = op.attrs["axis"]
    comb = region_fn(comp, op.regions[0])
    ins = [v.id for v in op.operands]
    outs = [r.id for r in op.results]
    dts = [_np(r.dtype) for r in op.results]

    def h(env: Env) -> None:
        vs = [np.moveaxis(np.asarray(env[i]), axis, 0) for i in ins]
        while vs[0].shape[0] > 1:
            vs = comb(env, [v[0::2] for v in vs], [v[1::2] for v in vs])
        for o, v, dt in zip(outs, vs, dts):
            r = v[0]
            env[o] = dt.type(r) if r.ndim == 0 else r.astype(dt, copy=False)
    return h
