"""Semantics of the tma family (level 2, Hopper): shared memory, TMA copies, mbarriers, and
the warpgroup ops.

Each program allocates its own shared memory (`smem_alloc`: zeroed numpy arrays; a stage and
a transpose are views that alias them; an mbarrier allocation is an object array of `_MBar`).
`smem_store` / `smem_load` (kit.store / kit.load of a shared tile) write and read those
arrays; a role is one thread of control here, so the barrier a role needs between its
warpgroups' stores and its MMAs is not checked (the mbarriers between roles are).
`tma_load` copies its box at issue, but its bytes count on the barrier only when it lands (at
the next wait); `mbar_wait` blocks (yields a `_Wait`) inside roles and raises `DeadlockError`
outside them. `barrier` and `setmaxnreg` have nothing to do here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kitjit.ir.core import Op
from kitjit.ir.registry import semantics
from kitjit.ir.types import mbarrier

from .compiler import Env, Handler, _Compiler, _nothing, _wrap
from .errors import OutOfBoundsError, _where
from .memory import _TmaTensor
from .numeric import _np
from .sync import _Ctx, _deadlock, _MBar, _mbar_names, _race, _Wait


@semantics("smem_alloc")
def smem_alloc(comp: _Compiler, op: Op) -> Handler:
    t, r = op.result.type, op.result.id
    shape = t.shape
    if t.dtype is mbarrier:  # an object array of barrier states: bars[i] is a view
        names, init = _mbar_names(op), int(op.attrs.get("init", 1))

        ctx = comp.ctx

        def mbarriers(env: Env) -> None:
            a = np.empty(shape, object)
            for i, n in enumerate(names):
                a.flat[i] = _MBar(n, init)
            env[r] = a
            if ctx.sched is not None:  # a cluster's CTA: peers may arrive on them
                ctx.allocs[r] = a
        return mbarriers
    nd = _np(t.dtype)
    ctx = comp.ctx

    def smem_alloc(env: Env) -> None:
        env[r] = a = np.zeros(shape, nd)
        if ctx.sched is not None:  # a cluster's CTA: its peers may reach it (cluster.py)
            ctx.allocs[r] = a
    return smem_alloc


@semantics("smem_index")
def smem_index(comp: _Compiler, op: Op) -> Handler:
    x_id, i_id = (v.id for v in op.operands)
    n, r = op.operands[0].shape[0], op.result.id
    ctx = comp.ctx

    def smem_index(env: Env) -> None:
        i = int(env[i_id])
        if not 0 <= i < n:
            ctx.shape, ctx.lanes_total = (), 1
            raise OutOfBoundsError(_where(op, ctx, "out-of-range shared-memory index") +
                                   f"\n  index {i} of a shared tile with {n} stages")
        env[r] = env[x_id][i, ...]  # a view: writes through it land in the allocation
    return smem_index


@semantics("smem_trans")
def smem_trans(comp: _Compiler, op: Op) -> Handler:
    x_id, r = op.operands[0].id, op.result.id

    def smem_trans(env: Env) -> None:
        env[r] = env[x_id].T  # a view, like the stage views
    return smem_trans


@semantics("smem_store")
def smem_store(comp: _Compiler, op: Op) -> Handler:
    d_id, v_id = (v.id for v in op.operands)
    ctx, key = comp.ctx, comp.role.key

    def smem_store(env: Env) -> None:
        dst = env[d_id]
        ctx.smem_store(op, dst, key)
        if ctx.sched is not None:
            ctx.sched.touch(ctx, ctx.rank, dst, True, op)
        dst[...] = env[v_id]  # the view writes through (a .T view stores transposed)
    return smem_store


@semantics("smem_load")
def smem_load(comp: _Compiler, op: Op) -> Handler:
    s_id, r = op.operands[0].id, op.result.id
    ctx, key = comp.ctx, comp.role.key

    def smem_load(env: Env) -> None:
        src = env[s_id]
        ctx.smem_read(op, src, key, "the shared tile of this kit.load", True)
        if ctx.sched is not None:
            ctx.sched.touch(ctx, ctx.rank, src, False, op)
        env[r] = np.array(src)  # a copy: later writes to the tile do not change it
    return smem_load


@semantics("tma_load")
def tma_load(comp: _Compiler, op: Op) -> Handler:
    d_id, t_id, *n_ids, r_id, c_id, b_id = (v.id for v in op.operands)  # n: a 3-d batch
    dt = op.operands[0].dtype
    nbytes = int(op.attrs["bytes"])
    expect = int(op.attrs.get("expect", nbytes))  # as the backend reads it
    ctx, key = comp.ctx, comp.role.key
    mask = op.attrs.get("multicast")
    split = op.attrs.get("split")   # the dim a split=True load cuts the tile along

    def tma_load(env: Env) -> None:
        dst, t = env[d_id], env[t_id]
        if t.dt is not dt:
            raise TypeError(_where(op, ctx, "TMA load of another dtype") +
                            f"\n  '{t.name}' holds {t.dt} but the shared tile holds {dt}")
        r0, c0 = int(env[r_id]), int(env[c_id])
        _check_box(op, ctx, t, r0, c0, "load")
        t = _entry(t, n_ids, env, op, ctx)
        for mma, a, b, who in ctx.inflight:
            if a is not None and np.may_share_memory(dst, a) or \
                    b is not None and np.may_share_memory(dst, b):
                _race(op, mma, ctx, who)
        bar = env[b_id][()]
        if split is not None:  # this CTA's part p of the whole tile (kit.tma_load split=)
            p = bin(mask & ((1 << ctx.rank) - 1)).count("1")
            n = bin(mask).count("1")
            part = (p, n)
            if split == 1:
                q = dst.shape[1] // n
                ctx.sched.multicast(ctx, op, dst, env[b_id], mask, nbytes, lambda view: t.copy_box(
                    view[:, p * q:(p + 1) * q], r0, c0 + p * q), key, part)
            else:
                q = dst.shape[0] // n
                ctx.sched.multicast(ctx, op, dst, env[b_id], mask, nbytes, lambda view: t.copy_box(
                    view[p * q:(p + 1) * q], r0 + p * q, c0), key, part)
            if expect:
                bar.arrive(ctx, op, key, 1, expect)
            return
        if mask is not None:  # into each CTA of the mask (interpreter/cluster.py)
            ctx.sched.multicast(ctx, op, dst, env[b_id], mask, nbytes,
                                lambda view: t.copy_box(view, r0, c0), key)
            if expect:  # the group's one arrive.expect_tx (its copies land at a wait)
                bar.arrive(ctx, op, key, 1, expect)
            return
        w = ctx.smem_write(op, dst, key, bar)
        if expect:  # the group's one arrive.expect_tx
            bar.arrive(ctx, op, key, 1, expect)
        t.copy_box(dst, r0, c0)
        ctx.copies.append((bar, nbytes, w))  # its bytes count when it lands (at a wait)
    return tma_load


@semantics("tma_store")
def tma_store(comp: _Compiler, op: Op) -> Handler:
    t_id, *n_ids, r_id, c_id, v_id, _ = (v.id for v in op.operands)  # n: a 3-d batch
    dt = op.operands[-2].dtype
    ctx = comp.ctx
    reduce = op.attrs.get("reduce")

    def tma_store(env: Env) -> None:
        t = env[t_id]
        if t.dt is not dt:
            raise TypeError(_where(op, ctx, "TMA store of another dtype") +
                            f"\n  '{t.name}' holds {t.dt} but the tile holds {dt}")
        r0, c0 = int(env[r_id]), int(env[c_id])
        _check_box(op, ctx, t, r0, c0, "store")
        t = _entry(t, n_ids, env, op, ctx)
        # (the staging tile is the GPU's business: nothing reads it back)
        if t is not None:  # (a batch entry past the tensor: the whole box is dropped)
            t.store_box(np.asarray(env[v_id]), r0, c0, reduce)
    return tma_store


class _Zeros:
    """A TMA tensor's batch entry past its ends: a load reads zeros (the GPU's
    out-of-bounds fill, per dimension)."""

    @staticmethod
    def copy_box(dst: np.ndarray, r0: int, c0: int) -> None:
        dst[...] = 0


def _entry(t: _TmaTensor, n_ids: list, env: Env, op: Op, ctx: _Ctx) -> Any:
    """The 2-d tensor a copy addresses: `t`, or (3-d tensors) its batch entry; None for
    a store past the ends, `_Zeros` for a load there."""
    if not n_ids:
        if t.view.ndim != 2:
            raise TypeError(_where(op, ctx, "TMA copy of a 3-d tensor") +
                            f"\n  '{t.name}' is 3-d but copied with (row, col) coordinates")
        return t
    n = int(env[n_ids[0]])
    if op.name == "tma_store" and n < 0:   # as a negative row or column (_check_box)
        _store_before_start(op, ctx, f"batch entry {n} of '{t.name}'")
    try:
        e = t.batch(n)
    except TypeError as err:
        raise TypeError(_where(op, ctx, "TMA copy of a 2-d tensor") + f"\n  {err}") from None
    if e is None and op.name == "tma_load":
        return _Zeros
    return e


@semantics("mbar_wait")
def mbar_wait(comp: _Compiler, op: Op, gen: bool = False) -> Any:
    b_id, p_id = (v.id for v in op.operands)
    ctx, role, key = comp.ctx, comp.role, comp.role.key
    auto = bool(op.attrs.get("auto_phase"))

    def bar_parity(env: Env) -> tuple:
        bar = env[b_id][()]
        if auto:  # the phase this wait flips (a host descriptor's TMA load, as the backend)
            parity = getattr(bar, "auto_phase", 0)
            bar.auto_phase = parity ^ 1
            return bar, parity
        return bar, int(env[p_id]) & 1

    if gen:
        def mbar_wait_g(env: Env) -> Iterator:
            bar, parity = bar_parity(env)
            while True:
                ctx.land()
                if bar.done(parity):
                    ctx.acquire(key, bar)
                    if ctx.sched is not None:
                        ctx.sched.acquire(ctx.rank, bar)
                    return
                yield _Wait(op, bar, parity, role)
        return mbar_wait_g

    def mbar_wait(env: Env) -> None:  # one thread of control: nothing else can arrive
        wait_now(ctx, op, *bar_parity(env), role, key)
    return mbar_wait


def wait_now(ctx: _Ctx, op: Op, bar: Any, parity: int, role: Any, key: int) -> None:
    """A wait that cannot yield (one thread of control): the phase must be complete, or
    complete by a cluster peer's arrival; also `kit.mma(..., next=...)`'s wait."""
    ctx.land()
    if not bar.done(parity):
        if ctx.sched is None:
            raise _deadlock(ctx, [_Wait(op, bar, parity, role)])
        # a cluster's CTA: a peer may arrive on it (kit.mbarrier_arrive(bar, cta=...))
        ctx.sched.block(ctx.rank, lambda: (ctx.land(), bar.done(parity))[1],
                        lambda: _deadlock(ctx, [_Wait(op, bar, parity, role)]))
    ctx.acquire(key, bar)
    if ctx.sched is not None:
        ctx.sched.acquire(ctx.rank, bar)


@semantics("mbar_arrive")
def mbar_arrive(comp: _Compiler, op: Op) -> Handler:
    b_id, n, ctx, key = op.operands[0].id, comp.role.count, comp.ctx, comp.role.key

    def mbar_arrive(env: Env) -> None:
        env[b_id][()].arrive(ctx, op, key, n)  # one arrival per warpgroup of the role
    return mbar_arrive


@semantics("barrier")
def barrier(comp: _Compiler, op: Op) -> Handler:
    return _nothing  # one thread per program


@semantics("named_bar")
def named_bar(comp: _Compiler, op: Op) -> Handler:
    return _nothing  # a role's warpgroups run as one program: nothing to order


@semantics("warpgroup_id")
def warpgroup_id(comp: _Compiler, op: Op) -> Handler:
    """Fixed per role: hoistable like a constant."""
    wg = np.int32(comp.role.first)
    return _wrap(lambda: wg, [], op.result.id)


@semantics("setmaxnreg")
def setmaxnreg(comp: _Compiler, op: Op) -> Handler:
    return _nothing  # registers are not counted here


def _check_box(op: Op, ctx: _Ctx, t: _TmaTensor, r0: int, c0: int, what: str) -> None:
    """What makes the GPU stop a TMA copy with an illegal instruction (seen on an H200): a
    box whose first column is not a multiple of 16 bytes into a row, and, for stores, a box
    that starts at a negative row or column (loads read zeros there, stores trap)."""
    e = t.dt.itemsize
    if (c0 * e) % 16:
        ctx.shape, ctx.lanes_total = (), 1
        raise OutOfBoundsError(
            _where(op, ctx, f"misaligned TMA {what}") +
            f"\n  the box starts at column {c0} of '{t.name}', {c0 * e} bytes into a row; a "
            f"TMA box must start a multiple of 16 bytes into a row (a multiple of {16 // e} "
            f"{t.dt} elements), or the GPU stops the kernel with an illegal instruction")
    if what == "store" and (r0 < 0 or c0 < 0):
        _store_before_start(op, ctx, f"({r0}, {c0}) of '{t.name}'")


def _store_before_start(op: Op, ctx: _Ctx, start: str) -> None:
    ctx.shape, ctx.lanes_total = (), 1
    raise OutOfBoundsError(
        _where(op, ctx, "out-of-bounds TMA store") +
        f"\n  the box starts at {start}: a TMA store may run past the end of a tensor (that "
        "part is dropped) but not start before it, or the GPU stops the kernel with an "
        "illegal instruction")


@semantics("tma_desc_create")
def tma_desc_create(comp: _Compiler, op: Op) -> Handler:
    """A CUtensorMap the kernel builds (sm_90a's `kit.make_tensor_descriptor`): the 2-d
    region it describes, as a view of the buffer that holds it, for tma_load / tma_store.
    The GPU traps on a base or row stride that is not a multiple of 16 bytes: an error here."""
    _, b_id, r_id, c_id, s_id = (v.id for v in op.operands)
    elem = op.operands[1].dtype.element_ty
    mem, ctx = comp.mem, comp.ctx
    name = op.operands[1].name or "base"

    def tma_desc_create(env: Env) -> None:
        base, rows, cols = int(env[b_id]), int(env[r_id]), int(env[c_id])
        stride = int(env[s_id])
        e = elem.itemsize
        if base % 16 or (stride * e) % 16:
            raise ValueError(_where(op, ctx, "tensor descriptor not aligned for TMA") +
                             f"\n  base {base:#x} and row stride {stride * e} bytes must be "
                             "multiples of 16 (Triton's rule for make_tensor_descriptor)")
        env[op.result.id] = mem.region_2d(name, elem, base, rows, cols, stride)
    return tma_desc_create
