"""Semantics of the dot family: `dot` on register tiles (fp32 accumulation) and `wgmma`,
which reads its A and B tiles from shared memory (checked for races) and counts as in flight
until `pending` later groups of its role are issued or its result is read."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kitjit.ir.core import Op
from kitjit.ir.registry import semantics

from .compiler import Env, Handler, _Compiler, pure
from .errors import RaceError, _where
from .sync import _Ctx, _region
from .tma import wait_now


@semantics("dot")
@pure
def dot(op: Op, ctx: _Ctx) -> Callable:
    return _dot


def _dot(a, b, acc):
    return np.matmul(np.asarray(a, np.float32), np.asarray(b, np.float32)) + acc


@semantics("wgmma")
def wgmma(comp: _Compiler, op: Op) -> Handler:
    a_id, b_id, c_id = (v.id for v in op.operands[:3])
    r = op.result.id
    pending = int(op.attrs.get("pending", 0))
    ctx, key = comp.ctx, comp.role.key

    a_smem, b_smem = (v.type.space == "smem" for v in op.operands[:2])
    nxt = _Next(comp, op) if op.attrs.get("next") else None

    def wgmma(env: Env) -> None:
        a, b = env[a_id], env[b_id]
        if a_smem:
            ctx.smem_read(op, a, key, "the A tile of this kit.mma", True)
        if b_smem:
            ctx.smem_read(op, b, key, "the B tile of this kit.mma", True)
        if nxt is not None:
            nxt.check(env, a, b)
        env[r] = env[c_id] + np.matmul(np.asarray(a, np.float32), np.asarray(b, np.float32))
        if nxt is not None:
            nxt.prefetch(env)
        # wgmma.wait_group(pending): the newest `pending` groups of this role may still
        # read their shared tiles
        fl = ctx.inflight
        fl.append((op, a if a_smem else None, b if b_smem else None, key))
        mine = [i for i, e in enumerate(fl) if e[3] == key]
        for i in reversed(mine[:max(len(mine) - pending, 0)]):
            ctx.retire(fl.pop(i))
    return wgmma


class _Next:
    """`kit.mma(..., next=(a1, b1, bar, phase, cond))` (below sm_90): when cond holds, the
    op waits for `bar`'s phase and reads a1 / b1's first k-slice after its MMAs (the GPU
    loads those fragments there, into registers the next run of this op starts from). So
    the interpreter waits there too (checked as a kit.mbarrier_wait), keeps the slice, and
    when the op next runs on those tiles checks that they still hold it: a tile rewritten
    in between would leave the GPU with stale fragments, a silent wrong result."""

    def __init__(self, comp: _Compiler, op: Op):
        self.op, self.ctx, self.role, self.key = op, comp.ctx, comp.role, comp.role.key
        self.ids = [v.id for v in op.operands[3:]]
        self.held: tuple | None = None   # (a1 region, b1 region, a1 slice, b1 slice)

    @staticmethod
    def _slice(x: np.ndarray, k_axis: int) -> np.ndarray:
        return np.array(x[:, :16] if k_axis else x[:16, :])

    def prefetch(self, env: Env) -> None:
        a1, b1, bar, ph, cond = (env[i] for i in self.ids)
        self.held = None
        if not bool(cond):
            return
        wait_now(self.ctx, self.op, bar[()], int(ph) & 1, self.role, self.key)
        self.ctx.smem_read(self.op, a1, self.key, "next's A tile of this kit.mma", True)
        self.ctx.smem_read(self.op, b1, self.key, "next's B tile of this kit.mma", True)
        self.held = (_region(a1), _region(b1), self._slice(a1, 1), self._slice(b1, 0))

    def check(self, env: Env, a: np.ndarray, b: np.ndarray) -> None:
        if self.held is None or (_region(a), _region(b)) != self.held[:2]:
            return   # the GPU loads this op's own first slice (it checks the tiles' addresses)
        if not (np.array_equal(self._slice(a, 1), self.held[2], equal_nan=True)
                and np.array_equal(self._slice(b, 0), self.held[3], equal_nan=True)):
            raise RaceError(
                _where(self.op, self.ctx, "tile rewritten after kit.mma's next= prefetch") +
                "\n  the previous kit.mma(..., next=...) loaded the first k-slice of these "
                "tiles into registers after its wait, and they were written since: on the "
                "GPU this MMA would use the old values\n  hint: refill a stage only after "
                "the kit.mma that names it in next= has run on it")
