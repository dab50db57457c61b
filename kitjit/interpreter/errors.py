"""The errors the interpreter raises for kernels that would misbehave on the GPU, and the
helpers that write their first lines (where in the source, which program, which lane)."""

from __future__ import annotations

import linecache
from typing import TYPE_CHECKING, Any

import numpy as np

from kitjit.frontend.errors import KitjitError
from kitjit.ir.core import Op

if TYPE_CHECKING:
    from .sync import _Ctx


class InterpreterError(KitjitError):
    """The base of what the interpreter finds wrong in a kernel's run (Triton's
    `InterpreterError`). Unlike Triton's, it does not wrap other exceptions: an error of
    Python or numpy inside a run stays what it is."""


class OutOfBoundsError(InterpreterError, IndexError):
    """A load or store outside every tensor argument, or a misaligned one."""


class RaceError(InterpreterError, RuntimeError):
    """Shared memory accessed with nothing ordering the access on the GPU: a TMA load over a
    tile an MMA may still read, a read before the copy into it is seen to land, or a read of
    a tile nothing has written."""


class DeviceAssertError(InterpreterError, AssertionError):
    """kit.device_assert (or kit.assume) found a false element: the GPU would stop the
    kernel with an assertion failure."""


class DeadlockError(InterpreterError, RuntimeError):
    """Every thread of control of a program waits for an mbarrier phase that never completes:
    the kernel would hang on the GPU."""


class MBarrierError(InterpreterError, RuntimeError):
    """An mbarrier used in a way the GPU leaves undefined (more arrivals than a phase
    expects)."""


def _at(op: Op) -> str:
    loc = op.loc
    if loc is None:
        return ""
    src = linecache.getline(loc.file, loc.line).strip()
    return f" at line {loc.line}" + (f" ({src})" if src else "")


def _where(op: Op, ctx: _Ctx, title: str) -> str:
    """The first lines of a memory error: what, where in the source, which program."""
    loc = op.loc
    if loc is None:
        head = f"{title} (no source location), program {ctx.pid}"
    else:
        fn = f" in '{loc.func}'" if loc.func else ""
        head = f"{title} at {loc}{fn}, program {ctx.pid}"
        src = linecache.getline(loc.file, loc.line).strip()
        if src:
            head += f"\n    {src}"
    return head


def _lane(ctx: _Ctx, flat: Any) -> str:
    if not ctx.shape:
        return "(scalar)"
    return str(tuple(int(i) for i in np.unravel_index(int(flat), ctx.shape)))
