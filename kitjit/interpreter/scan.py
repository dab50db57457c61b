"""Semantics of the scan family: `scan` (the combine function's region on whole arrays, in
log2(n) steps: at step d every element takes the one d before it on its left, which keeps
the operands in order), `sort` (Triton's sort_impl, the steps the GPU runs, so NaNs and
signed zeros end where they end in Triton) and `histogram` (counts of the in-range,
unmasked values)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kitjit.ir.core import Op
from kitjit.ir.registry import semantics

from .compiler import Env, _Compiler, pure
from .floats import pick
from .numeric import _np
from .reduction import region_fn
from .sync import _Ctx


@semantics("scan")
def _scan(comp: _Compiler, op: Op) -> Callable:
    axis, reverse = op.attrs["axis"], op.attrs["reverse"]
    comb = region_fn(comp, op.regions[0])
    ins = [v.id for v in op.operands]
    outs = [r.id for r in op.results]
    dts = [_np(r.dtype) for r in op.results]

    def h(env: Env) -> None:
        vs = [np.moveaxis(np.asarray(env[i]), axis, 0) for i in ins]
        if reverse:
            vs = [v[::-1] for v in vs]
        vs = [np.array(v, dtype=dt) for v, dt in zip(vs, dts)]
        n, d = vs[0].shape[0], 1
        while d < n:
            new = comb(env, [v[:-d] for v in vs], [v[d:] for v in vs])
            for v, w in zip(vs, new):
                v[d:] = w
            d *= 2
        for o, v in zip(outs, vs):
            if reverse:
                v = v[::-1]
            env[o] = np.ascontiguousarray(np.moveaxis(v, 0, axis))
    return h


def _compare_exchange(x: np.ndarray, j: int, flip: np.ndarray | bool) -> np.ndarray:
    """Triton's `_compare_and_swap` across bit j of the last axis: each element takes its
    partner where `(mine > partner) != (upper ^ flip)`; `flip` per block of 2^(j+1)."""
    lead, n = x.shape[:-1], x.shape[-1]
    g = x.reshape(*lead, n >> (j + 1), 2, 1 << j)
    partner = g[..., ::-1, :]
    upper = np.array([False, True])[:, None]
    flip = np.asarray(flip).reshape(-1, 1, 1) if np.ndim(flip) else flip
    with np.errstate(invalid="ignore"):
        take = (g > partner) != (upper ^ flip)
    return np.where(take, partner, g).reshape(x.shape)


def _merge(x: np.ndarray, stage: int, steps: int, desc: bool) -> np.ndarray:
    """`steps` compare-exchange steps (bits steps-1 ... 0), ordered descending where bit
    `stage` of the coordinate is set (alternating), or by `desc` when that bit is past the
    axis (Triton's `_bitonic_merge_hypercube`)."""
    n = x.shape[-1]
    for j in range(steps - 1, -1, -1):
        if 1 << stage < n:
            blocks = np.arange(n >> (j + 1)) << (j + 1)
            flip = (blocks >> stage & 1) != 0
        else:
            flip = desc
        x = _compare_exchange(x, j, flip)
    return x


def bitonic(x: np.ndarray, descending: bool, k: int | None = None) -> np.ndarray:
    """Triton's `sort_impl` along the last axis (a power of two), step for step as
    backend/lower/scan.py: bitonic stages 1..log2(k), then (k < n) rounds that keep the max
    (min) of the elements k apart (the GPU's maxnum: NaN skipped, -0.0 < +0.0)
    and merge again. Returns the first k (all n) elements."""
    x = np.array(x)
    n = x.shape[-1]
    log_k = (n if k is None else k).bit_length() - 1
    for s in range(1, log_k + 1):
        x = _merge(x, s, s, descending)
    while x.shape[-1] > 1 << log_k:
        g = x.reshape(*x.shape[:-1], -1, 2, 1 << log_k)
        x = pick(g[..., 0, :], g[..., 1, :], descending).reshape(*x.shape[:-1], -1)
        x = _merge(x, log_k, log_k, descending)
    return x


@semantics("sort")
@pure
def _sort(op: Op, ctx: _Ctx) -> Callable:
    desc, k = op.attrs["descending"], op.attrs["k"]
    return lambda x: np.ascontiguousarray(bitonic(x, desc, k))


@semantics("histogram")
@pure
def _histogram(op: Op, ctx: _Ctx) -> Callable:
    nb = op.attrs["num_bins"]

    def f(x, mask=None):
        x = np.asarray(x).astype(np.int64)
        ok = (x >= 0) & (x < nb)
        if mask is not None:
            ok &= np.asarray(mask, bool)
        return np.bincount(x[ok], minlength=nb).astype(np.int32)
    return f
