"""Semantics of the control family: `for`, `while`, `if`, and the roles an `if` on
`kit.warpgroup_id()` runs (its `roles` attribute): both regions at once, as coroutines that
`_par` schedules. Each takes `gen`: with gen=True it returns a generator function (the op
holds a wait, see `_Compiler.blocks`), which yields where its region waits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from kitjit.ir.core import Block, Op
from kitjit.ir.registry import semantics

from .compiler import Env, Handler, _Compiler
from .errors import DeadlockError, DeviceAssertError, MBarrierError, OutOfBoundsError, RaceError
from .numeric import _np
from .sync import _deadlock, _par, _Role


@semantics("for")
def for_(comp: _Compiler, op: Op, gen: bool = False) -> Any:
    body = op.regions[0]
    lb_id, ub_id, st_id = (v.id for v in op.operands[:3])
    init_ids = [v.id for v in op.operands[3:]]
    iv = body.args[0]
    iv_id, ivt = iv.id, _np(iv.dtype).type
    carried = [a.id for a in body.args[1:]]
    yields = [v.id for v in body.terminator.operands] if body.terminator else []
    results = [r.id for r in op.results]
    loc = op.loc
    where = f"line {loc.line}" if loc else "?"
    name = iv.name or "the induction variable"
    errors = (OutOfBoundsError, RaceError, DeadlockError, MBarrierError)

    def bounds(env: Env) -> tuple[int, int, int]:
        lb, ub, st = int(env[lb_id]), int(env[ub_id]), int(env[st_id])
        if st == 0:
            raise ValueError(f"range() step is zero at {loc}")
        return lb, ub, st

    if gen:
        run = comp.gblock(body)

        def for_g(env: Env) -> Iterator:
            lb, ub, st = bounds(env)
            vals = [env[i] for i in init_ids]
            i = lb
            try:
                for i in range(lb, ub, st):
                    env[iv_id] = ivt(i)
                    for k, v in zip(carried, vals):
                        env[k] = v
                    for w in run(env):
                        w.in_loop(f"in the loop at {where}: {name} = {i} "
                                  f"(range({lb}, {ub}, {st}))")
                        yield w
                    vals = [env[y] for y in yields]
            except errors as e:
                raise type(e)(f"{e.args[0]}\n  in the loop at {where}: {name} = {i} "
                              f"(range({lb}, {ub}, {st}))") from None
            for k, v in zip(results, vals):
                env[k] = v
        return for_g

    handlers = comp.block(body)

    def for_(env: Env) -> None:
        lb, ub, st = bounds(env)
        vals = [env[i] for i in init_ids]
        i = lb
        try:
            for i in range(lb, ub, st):
                env[iv_id] = ivt(i)
                for k, v in zip(carried, vals):
                    env[k] = v
                for h in handlers:
                    h(env)
                vals = [env[y] for y in yields]
        except errors as e:
            # say which iteration: bugs are often at the edges
            raise type(e)(f"{e.args[0]}\n  in the loop at {where}: {name} = {i} "
                          f"(range({lb}, {ub}, {st}))") from None
        for k, v in zip(results, vals):
            env[k] = v
    return for_


@semantics("while")
def while_(comp: _Compiler, op: Op, gen: bool = False) -> Any:
    cond, body = op.regions
    init_ids = [v.id for v in op.operands]
    cargs, bargs = [a.id for a in cond.args], [a.id for a in body.args]
    (c_id,) = [v.id for v in cond.terminator.operands]
    yields = [v.id for v in body.terminator.operands]
    results = [r.id for r in op.results]
    where = f"line {op.loc.line}" if op.loc else "?"
    errors = (OutOfBoundsError, RaceError, DeadlockError, MBarrierError)

    if gen:
        cg, bg = comp.gblock(cond), comp.gblock(body)

        def while_g(env: Env) -> Iterator:
            vals = [env[i] for i in init_ids]
            n = 0
            try:
                while True:
                    for k, v in zip(cargs, vals):
                        env[k] = v
                    yield from cg(env)
                    if not env[c_id]:
                        break
                    for k, v in zip(bargs, vals):
                        env[k] = v
                    yield from bg(env)
                    vals = [env[y] for y in yields]
                    n += 1
            except errors as e:
                raise type(e)(f"{e.args[0]}\n  in the while loop at {where}, iteration {n}") \
                    from None
            for k, v in zip(results, vals):
                env[k] = v
        return while_g

    ch, bh = comp.block(cond), comp.block(body)

    def while_(env: Env) -> None:
        vals = [env[i] for i in init_ids]
        n = 0
        try:
            while True:
                for k, v in zip(cargs, vals):
                    env[k] = v
                for h in ch:
                    h(env)
                if not env[c_id]:
                    break
                for k, v in zip(bargs, vals):
                    env[k] = v
                for h in bh:
                    h(env)
                vals = [env[y] for y in yields]
                n += 1
        except errors as e:
            raise type(e)(f"{e.args[0]}\n  in the while loop at {where}, iteration {n}") \
                from None
        for k, v in zip(results, vals):
            env[k] = v
    return while_


@semantics("if")
def if_(comp: _Compiler, op: Op, gen: bool = False) -> Any:
    if op.attrs.get("roles"):
        return _roles(comp, op, gen)
    c_id = op.operands[0].id
    compile_ = comp.gblock if gen else comp.block
    branches = []
    for region in op.regions:
        hs = compile_(region)
        ys = [v.id for v in region.terminator.operands] if region.terminator else []
        branches.append((hs, ys))
    results = [r.id for r in op.results]

    if gen:
        while len(branches) < 2:
            branches.append((comp.gblock(Block()), []))
        (then_g, then_y), (else_g, else_y) = branches

        def if_g(env: Env) -> Iterator:
            g, ys = (then_g, then_y) if env[c_id] else (else_g, else_y)
            yield from g(env)
            for k, y in zip(results, ys):
                env[k] = env[y]
        return if_g

    while len(branches) < 2:
        branches.append(([], []))
    (then_h, then_y), (else_h, else_y) = branches

    def if_(env: Env) -> None:
        hs, ys = (then_h, then_y) if env[c_id] else (else_h, else_y)
        for h in hs:
            h(env)
        for k, y in zip(results, ys):
            env[k] = env[y]
    return if_


def _roles(comp: _Compiler, op: Op, gen: bool = False) -> Any:
    """`if kit.warpgroup_id() ...`: both regions at once, as coroutines."""
    kids, keys = [], []
    ctx, parent = comp.ctx, comp.role.key
    for region, (first, count) in zip(op.regions, op.attrs["roles"]):
        if count <= 0:
            continue  # no warpgroup runs it
        saved = comp.role
        comp.n_roles += 1
        comp.role = ctx.roles[comp.n_roles] = _Role(first, count, comp.n_roles)
        keys.append(comp.n_roles)
        kids.append(comp.gblock(region))
        comp.role = saved

    if gen:  # roles within a role: stuck when all of them are
        def roles_g(env: Env) -> Iterator:
            ctx.fork(parent, keys)
            yield from _par(ctx, [k(env) for k in kids])
            ctx.join(parent, keys)
        return roles_g

    def roles(env: Env) -> None:
        ctx.fork(parent, keys)
        for stuck in _par(ctx, [k(env) for k in kids]):
            waits = stuck.leaves()
            if ctx.sched is None:
                raise _deadlock(ctx, waits)
            # a cluster's CTA: a peer may complete one of the phases its roles wait for (a
            # remote arrival, a multicast copy); the other CTAs run until one has completed
            ctx.sched.block(ctx.rank, lambda ws=waits: (ctx.land(), any(
                w.bar.done(w.parity) for w in ws))[1], lambda ws=waits: _deadlock(ctx, ws))
        ctx.join(parent, keys)
    return roles


@semantics("yield")
def yield_(comp: _Compiler, op: Op) -> Handler:
    """A region's terminator: the `for` and `if` that hold it read its operands (the values
    the region yields), and `_Compiler.one` gives it no handler, so this is never called."""
    where = f" (at {op.loc})" if op.loc else ""
    raise NotImplementedError(f"interpreter: 'yield' ends a for/if region, which reads it{where}")


@semantics("print")
def print_(comp: _Compiler, op: Op) -> Handler:
    """One line per element, as the GPU prints it: `pid (x, y, z) idx (i, ...) prefix
    value` (C's printf conversions: %f for floats, %d / %u / %lld for ints)."""
    ctx, prefix, hexa = comp.ctx, op.attrs["prefix"], op.attrs["hex"]
    items = [(v.id, v.dtype) for v in op.operands]

    def fmt(x, dt) -> str:
        if dt.is_floating():
            if hexa:
                return f"0x{int(np.asarray(x, np.float64).view(np.int64)) & (2**64 - 1):x}"
            return f"{float(x):f}"
        if dt.is_ptr():
            return f"0x{int(x):x}"
        x = int(x)
        if hexa:
            return f"0x{x & ((1 << max(32, dt.bits)) - 1):x}"
        return f"{x:d}"

    def h(env: Env) -> None:
        pid = ", ".join(str(p) for p in ctx.pid)
        for vid, dt in items:
            a = np.asarray(env[vid])
            for idx in np.ndindex(a.shape):
                print(f"pid ({pid}) idx ({', '.join(str(i) for i in idx)}) {prefix}"
                      f"{fmt(a[idx], dt)}")
    return h


@semantics("assert")
def assert_(comp: _Compiler, op: Op) -> Handler:
    """Raises DeviceAssertError with the source line, the program and the failing
    indices."""
    ctx, c, msg, loc = comp.ctx, op.operands[0].id, op.attrs["msg"], op.loc
    where = f"{loc}: " if loc else ""

    def h(env: Env) -> None:
        a = np.asarray(env[c])
        if a.all():
            return
        bad = [tuple(int(i) for i in ix) for ix in np.argwhere(~a.astype(bool))]
        shown = ", ".join(str(b) for b in bad[:8]) + (" ..." if len(bad) > 8 else "")
        raise DeviceAssertError(f"{where}kit.device_assert failed: {msg or 'assertion'}\n"
                                f"  in program {ctx.pid}, at {len(bad)} element(s): {shown}")
    return h


@semantics("read_sreg")
def read_sreg(comp: _Compiler, op: Op) -> Handler:
    """%smid is 0 (one SM runs the programs one after another); %globaltimer the host's
    nanosecond clock."""
    r, name = op.result.id, op.attrs["name"]

    def h(env: Env) -> None:
        env[r] = np.int32(0) if name == "smid" else np.int64(time.time_ns())
    return h


@semantics("gdc_wait", "gdc_launch_dependents")
def gdc(comp: _Compiler, op: Op) -> Handler:
    """Grids run one after the other here: nothing to wait for or to release."""
    return _no_op


def _no_op(env: Env) -> None:
    pass
