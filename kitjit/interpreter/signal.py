"""The signal family in the interpreter: signal_wait, signal_set, signal_add.

Memory here is sequentially consistent, so `sem` and `scope` change nothing. A kernel with a
`signal_wait` runs its programs (and, under `kitjit.distributed.simulate`, the programs of
every rank) as coroutines (kitjit/interpreter/world.py): a wait whose compare does not hold
yields a `_SignalWait`, and the scheduler runs the others until memory changes; when a
whole round changes nothing, it reports the deadlock."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kitjit.ir.core import Op
from kitjit.ir.registry import semantics

from .compiler import Env, Handler, _Compiler
from .errors import DeadlockError, _where
from .numeric import _mem_np
from .sync import _Role

_TESTS = {"eq": np.equal, "ne": np.not_equal, "ge": np.greater_equal, "gt": np.greater,
          "le": np.less_equal, "lt": np.less}


class _SignalWait:
    """What a program blocked in kit.signal_wait hands the scheduler."""

    __slots__ = ("op", "addr", "want", "cmp", "read", "role", "loops")

    def __init__(self, op: Op, addr: int, want: Any, cmp: str, read, role: _Role):
        self.op, self.addr, self.want, self.cmp, self.read = op, addr, want, cmp, read
        self.role = role
        self.loops: list[str] = []

    def leaves(self) -> list:
        return [self]

    def in_loop(self, where: str) -> None:
        self.loops.append(where)

    def describe(self) -> str:
        return (f"waits for its signal at {self.addr:#x} to be {self.cmp} {self.want}; it "
                f"holds {self.read()}")


def _cell(comp: _Compiler, op: Op, what: str):
    """(operand ids, memory dtype, env -> (numpy view, index, address)) of a signal op."""
    mem, ctx = comp.mem, comp.ctx
    p_id, v_id = (v.id for v in op.operands)
    mdt = _mem_np(op.operands[0].dtype.element_ty)

    def cell(env: Env) -> tuple[np.ndarray, int, int]:
        addr = np.asarray(env[p_id], np.int64).reshape(1)
        ctx.shape, ctx.lanes_total = (), 1
        b, idx, _ = mem.locate(addr, mdt, what, ctx, op, None)[0]
        b.written = True
        return b.view(mdt), int(idx[0]), int(addr[0])
    return v_id, mdt, cell


@semantics("signal_wait")
def signal_wait(comp: _Compiler, op: Op, gen: bool = False) -> Any:
    v_id, mdt, cell = _cell(comp, op, "signal_wait")
    cmp = op.attrs["cmp"]
    test, role, ctx = _TESTS[cmp], comp.role, comp.ctx

    if gen:
        def signal_wait_g(env: Env) -> Iterator:
            want = mdt.type(env[v_id])
            view, i, addr = cell(env)
            while not test(view[i], want):
                yield _SignalWait(op, addr, want, cmp, lambda: view[i], role)
        return signal_wait_g

    def signal_wait_h(env: Env) -> None:  # (a body that blocks always runs as coroutines)
        want = mdt.type(env[v_id])
        view, i, addr = cell(env)
        if not test(view[i], want):
            raise DeadlockError(_where(op, ctx, "deadlock") + "\n  this " +
                                _SignalWait(op, addr, want, cmp, lambda: view[i],
                                            role).describe())
    return signal_wait_h


def _writer(comp: _Compiler, op: Op, what: str, add: bool) -> Handler:
    v_id, mdt, cell = _cell(comp, op, what)
    mem = comp.mem

    def signal_write(env: Env) -> None:
        view, i, _ = cell(env)
        v = mdt.type(env[v_id])
        view[i] = (view[i] + v) if add else v  # (unsigned adds wrap, as on the GPU)
        mem.version += 1
    return signal_write


@semantics("signal_set")
def signal_set(comp: _Compiler, op: Op) -> Handler:
    return _writer(comp, op, "signal_set", add=False)


@semantics("signal_add")
def signal_add(comp: _Compiler, op: Op) -> Handler:
    return _writer(comp, op, "signal_add", add=True)
