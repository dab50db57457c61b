"""Semantics of the scan family: `scan` (the combine function's region on whole arrays, in
log2(n) steps: at step d every element takes the one d before it on its left, which keeps
the operands in order), `sort` (the bitonic network the GPU runs, so NaNs and signed zeros
end where they end there) and `histogram` (counts of the in-range, unmasked values)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kitjit.ir.core import Op
from kitjit.ir.registry import semantics

from .compiler import Env, _Compiler, pure
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


def bitonic(x: np.ndarray, descending: bool) -> np.ndarray:
    """Batcher's bitonic sort of the last axis (a power of two), step for step as
    backend/lower/scan.py: compare-and-swap with `>`, so a NaN moves only where the network
    compares nothing with it."""
    x = np.array(x)
    n = x.shape[-1]
    m = n.bit_length() - 1
    idx = np.arange(n)
    lead = x.shape[:-1]
    for s in range(1, m + 1):
        asc = (idx & (1 << s)) == 0 if s < m else np.ones(n, bool)
        if descending:
            asc = ~asc
        for j in range(s - 1, -1, -1):
            g = x.reshape(*lead, n >> (j + 1), 2, 1 << j)
            lo, hi = g[..., 0, :], g[..., 1, :]
            a = asc.reshape(n >> (j + 1), 2, 1 << j)[:, 0, :]
            swap = np.where(a, lo > hi, hi > lo)
            lo2, hi2 = np.where(swap, hi, lo), np.where(swap, lo, hi)
            g[..., 0, :], g[..., 1, :] = lo2, hi2
            x = g.reshape(x.shape)
    return x


@semantics("sort")
@pure
def _sort(op: Op, ctx: _Ctx) -> Callable:
    desc, k = op.attrs["descending"], op.attrs["k"]
    return lambda x: np.ascontiguousarray(bitonic(x, desc)[..., :k])


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
