"""The interpreter's compiler and entry point.

`_Compiler` turns the blocks of a kernel into closures over env slots, once per `run`: each
op's handler is made by the semantics registered for its name (`registry.semantics_of`; see
the calling convention in the package docstring), ops that depend neither on the program id
nor on memory are hoisted and run once before the first program, and the regions of roles
are compiled as generator functions. `_execute` then runs the programs of the grid.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from kitjit.ir import ops as _ops  # noqa: F401  (declares the ops the families register)
from kitjit.ir.core import Block, Function, Op
from kitjit.ir.registry import semantics_of

from .memory import _Memory
from .mma_waits import mma_waits
from .sync import _Ctx, _Role

Env = dict[int, Any]
Handler = Callable[[Env], None]

# Ops that read or write memory, depend on the program, or hold regions: never hoisted.
# Shared memory is per program, so its allocation and everything touching it stay put too.
_NOT_HOISTABLE = frozenset({"load", "store", "program_id", "for", "while", "if", "yield",
                            "smem_alloc", "smem_index", "smem_trans", "tma_load", "tma_store",
                            "mbar_wait", "mbar_arrive", "setmaxnreg", "barrier", "named_bar",
                            "wgmma", "print", "assert", "assume", "gdc_wait",
                            "gdc_launch_dependents", "atomic_rmw", "atomic_cas",
                            "cluster_id", "cluster_ctaid", "cluster_ctarank",
                            "cluster_barrier", "cluster_load", "cluster_store"})


# ----------------------------------------------------------------------------- pure ops
def pure(make: Callable[[Op, _Ctx], Callable]) -> Callable[[_Compiler, Op], Handler]:
    """The semantics of a pure op from `make(op, ctx)`, which returns its numpy function
    (operand values -> result value): the handler applies it with `_wrap`. `_pure` reaches
    `make` through the `pure` attribute of the registered function."""
    @functools.wraps(make)
    def handler(comp: _Compiler, op: Op) -> Handler:
        return _wrap(make(op, comp.ctx), [v.id for v in op.operands], op.result.id)
    handler.pure = make
    return handler


def _pure(op: Op, ctx: _Ctx) -> Callable:
    """The numpy function of a pure op: operand values -> result value."""
    make = getattr(semantics_of(op.name), "pure", None)
    if make is None:
        raise NotImplementedError(_unknown(op))
    return make(op, ctx)


def _unknown(op: Op) -> str:
    where = f" (at {op.loc})" if op.loc else ""
    return f"the interpreter does not know the op '{op.name}'{where}"


# ----------------------------------------------------------------------------- compiler
class _Compiler:
    """Turns blocks into lists of closures `h(env)`; collects hoisted ops separately.

    Regions that run as roles are compiled as generator functions instead (`gblock`): they
    yield a `_Wait` each time they find the phase they wait for not yet completed."""

    def __init__(self, mem: _Memory, ctx: _Ctx, mma_waits: dict[int, int] | None = None,
                 num_warps: int = 4):
        self.mem = mem
        self.ctx = ctx
        self.hoisted: list[Handler] = []
        self.varying: set[int] = set()
        self.mma_waits = mma_waits or {}  # id(op) -> n: see mma_waits.py
        self.role = _Role(0, max(1, -(-num_warps // 4)), 0)  # who runs what is compiled
        self.n_roles = 0
        self._blocks: dict[int, bool] = {}

    def block(self, block: Block) -> list[Handler]:
        self.varying.update(a.id for a in block.args)
        out: list[Handler] = []
        for op in block.ops:
            h = self.one(op)
            if h is not None:
                out.append(h)
        return out

    def one(self, op: Op) -> Handler | None:
        """The handler of `op`; None for a yield or an op hoisted out of the programs."""
        if op.name == "yield":
            return None
        h = self.op(op)
        n = self.mma_waits.get(id(op))
        if n is not None:
            h = _retiring(h, self.ctx, self.role.key, n)
        hoist = op.name not in _NOT_HOISTABLE and \
            not any(v.id in self.varying for v in op.operands)
        if hoist:
            self.hoisted.append(h)
            return None
        self.varying.update(r.id for r in op.results)
        return h

    # -- coroutines: the regions of roles
    def blocks(self, op: Op) -> bool:
        """Whether `op` may wait for another role: an mbarrier wait, roles, or a loop or
        branch that holds one."""
        r = self._blocks.get(id(op))
        if r is None:
            r = op.name in ("mbar_wait", "signal_wait") or bool(op.attrs.get("roles")) or \
                any(self.blocks(o) for g in op.regions for o in g.ops)
            self._blocks[id(op)] = r
        return r

    def gblock(self, block: Block) -> Callable[[Env], Iterator]:
        """`block` as a generator function: it yields whenever it waits for a phase that
        has not completed (a `_Wait`, or a `_Stuck` of roles within) and ends with the
        block."""
        self.varying.update(a.id for a in block.args)
        steps: list[tuple[Callable, bool]] = []
        for op in block.ops:
            if op.name != "yield" and self.blocks(op):
                self.varying.update(r.id for r in op.results)
                steps.append((self.gop(op), True))
            else:
                h = self.one(op)
                if h is not None:
                    steps.append((h, False))

        def run(env: Env) -> Iterator:
            for h, gen in steps:
                if gen:
                    yield from h(env)
                else:
                    h(env)
        return run

    def gop(self, op: Op) -> Callable[[Env], Iterator]:
        """The generator function of `op`, which `blocks`: for, if (roles) or mbar_wait."""
        sem = semantics_of(op.name)
        if sem is None:
            raise NotImplementedError(_unknown(op))
        return sem(self, op, gen=True)

    def op(self, op: Op) -> Handler:
        """The handler of `op`, made by the semantics registered for its name."""
        sem = semantics_of(op.name)
        if sem is None:
            raise NotImplementedError(_unknown(op))
        return sem(self, op)


def _nothing(env: Env) -> None:
    pass


def _retiring(h: Handler, ctx: _Ctx, key: int, n: int) -> Handler:
    """`h` reads the result of an MMA: the compiler waits first (wgmma.wait_group n) for
    every MMA the role (`key`) has in flight but the newest `n` (mma_waits.py)."""
    def retire(env: Env) -> None:
        fl = ctx.inflight
        if fl:
            mine = [i for i, e in enumerate(fl) if e[3] == key]
            for i in reversed(mine[:max(len(mine) - n, 0)]):
                ctx.retire(fl.pop(i))
        h(env)
    return retire


def _mma_waits(fn: Function) -> dict[int, int]:
    """The wait before each op that reads an MMA result (see mma_waits.py)."""
    return mma_waits(fn, _mma_values(fn))


def _mma_values(fn: Function) -> frozenset[int]:
    """Values that may hold an MMA result: wgmma results and what loops and branches carry
    them to (an over-approximation)."""
    vals: set[int] = set()
    ops = [op for op in fn.walk() if op.name in ("wgmma", "for", "if")]
    if not any(op.name == "wgmma" for op in ops):
        return frozenset()
    changed = True
    while changed:
        changed = False
        for op in ops:
            new: list[int] = []
            if op.name == "wgmma":
                new.append(op.result.id)
            elif op.name == "for":
                body = op.regions[0]
                ys = body.terminator.operands if body.terminator else []
                for k, (arg, r) in enumerate(zip(body.args[1:], op.results)):
                    if op.operands[3 + k].id in vals or (k < len(ys) and ys[k].id in vals):
                        new += [arg.id, r.id]
            else:
                for k, r in enumerate(op.results):
                    if any(g.terminator is not None and k < len(g.terminator.operands) and
                           g.terminator.operands[k].id in vals for g in op.regions):
                        new.append(r.id)
            for i in new:
                if i not in vals:
                    vals.add(i)
                    changed = True
    return frozenset(vals)


def _wrap(f: Callable, ids: list[int], r: int) -> Handler:
    """A closure that applies `f` to env slots `ids` and stores the result at `r`."""
    if len(ids) == 0:
        def h0(env: Env) -> None:
            env[r] = f()
        return h0
    if len(ids) == 1:
        a = ids[0]

        def h1(env: Env) -> None:
            env[r] = f(env[a])
        return h1
    if len(ids) == 2:
        a, b = ids

        def h2(env: Env) -> None:
            env[r] = f(env[a], env[b])
        return h2
    if len(ids) == 3:
        a, b, c = ids

        def h3(env: Env) -> None:
            env[r] = f(env[a], env[b], env[c])
        return h3

    def hn(env: Env) -> None:
        env[r] = f(*[env[i] for i in ids])
    return hn


# ----------------------------------------------------------------------------- entry point
def run(fn: Function, grid: tuple[int, int, int], args: list,
        cluster: tuple | None = None) -> None:
    """Run kernel `fn` on the CPU for every program of `grid` (x fastest).

    `args` line up with `fn.args`: torch tensors for pointer arguments (device tensors are
    copied to the CPU and back), Python numbers for the rest. `cluster`: (x, y, z) CTAs per
    thread-block cluster, whose CTAs then run together (interpreter/cluster.py).
    """
    if len(args) != len(fn.args):
        names = ", ".join(v.name or "?" for v in fn.args)
        raise TypeError(f"kernel '{fn.name}' takes {len(fn.args)} run-time arguments "
                        f"({names}), got {len(args)}")
    g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
    if len(g) != 3 or min(g) < 0:
        raise ValueError(f"grid must have 1 to 3 non-negative sizes, got {grid!r}")
    if any(op.name == "tma_load" and "expect" not in op.attrs for op in fn.walk()):
        # IR built without the pipeline (by hand): group its TMA loads as kit.jit does
        from kitjit.frontend.tma_groups import group_tma_loads

        group_tma_loads(fn)
    from .world import _Launch, collect_or_run, needs_schedule, run_together

    if needs_schedule(fn):  # programs that wait for each other run as coroutines
        la = _Launch(fn, (g[0], g[1], g[2]), list(args))
        if not collect_or_run(la):
            run_together([la])
        return
    mem = _Memory(fn, args)
    try:
        with np.errstate(all="ignore"):
            _execute(fn, (g[0], g[1], g[2]), mem, cluster)
    finally:
        mem.write_back()


def _execute(fn: Function, grid: tuple[int, int, int], mem: _Memory,
             cluster: tuple | None = None) -> None:
    if cluster is not None:
        from .cluster import execute_clusters

        c = (tuple(cluster) + (1, 1, 1))[:3]
        if grid[0] * grid[1] * grid[2]:
            execute_clusters(fn, grid, mem, c, lambda ctx: _compile_cta(fn, mem, ctx))
        return
    ctx = _Ctx(grid)
    comp = _Compiler(mem, ctx, _mma_waits(fn), int(fn.attrs.get("num_warps", 4)))
    ctx.roles[0] = comp.role
    body = comp.block(fn.body)
    base: Env = {v.id: x for v, x in zip(fn.args, mem.values)}
    if grid[0] * grid[1] * grid[2] == 0:
        return
    for h in comp.hoisted:
        h(base)
    gx, gy, gz = grid
    for z in range(gz):
        for y in range(gy):
            for x in range(gx):
                ctx.start((x, y, z))
                env = dict(base)
                for h in body:
                    h(env)


def _compile_cta(fn: Function, mem: _Memory, ctx: _Ctx) -> tuple[list[Handler], Env]:
    """The body's handlers for one CTA's context, and its environment with the arguments
    and the hoisted values (a cluster's CTAs each run their own)."""
    comp = _Compiler(mem, ctx, _mma_waits(fn), int(fn.attrs.get("num_warps", 4)))
    ctx.roles[0] = comp.role
    body = comp.block(fn.body)
    base: Env = {v.id: x for v, x in zip(fn.args, mem.values)}
    for h in comp.hoisted:
        h(base)
    return body, base
