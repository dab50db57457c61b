"""Semantics of the dot family: `dot` on register tiles (fp32 accumulation) and `wgmma`,
which reads its A and B tiles from shared memory (checked for races) and counts as in flight
until `pending` later groups of its role are issued or its result is read."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kitjit.ir.core import Op
from kitjit.ir.registry import semantics

from .compiler import Env, Handler, _Compiler, pure
from .sync import _Ctx


@semantics("dot")
@pure
def dot(op: Op, ctx: _Ctx) -> Callable:
    return _dot


def _dot(a, b, acc):
    return np.matmul(np.asarray(a, np.float32), np.asarray(b, np.float32)) + acc


@semantics("wgmma")
def wgmma(comp: _Compiler, op: Op) -> Handler:
    a_id, b_id, c_id = (v.id for v in op.operands)
    r = op.result.id
    pending = int(op.attrs.get("pending", 0))
    ctx, key = comp.ctx, comp.role.key

    a_smem, b_smem = (v.type.space == "smem" for v in op.operands[:2])

    def wgmma(env: Env) -> None:
        a, b = env[a_id], env[b_id]
        if a_smem:
            ctx.smem_read(op, a, key, "the A tile of this kit.mma", True)
        if b_smem:
            ctx.smem_read(op, b, key, "the B tile of this kit.mma", True)
        env[r] = env[c_id] + np.matmul(np.asarray(a, np.float32), np.asarray(b, np.float32))
        # wgmma.wait_group(pending): the newest `pending` groups of this role may still
        # read their shared tiles
        fl = ctx.inflight
        fl.append((op, a if a_smem else None, b if b_smem else None, key))
        mine = [i for i, e in enumerate(fl) if e[3] == key]
        for i in reversed(mine[:max(len(mine) - pending, 0)]):
            ctx.retire(fl.pop(i))
    return wgmma
