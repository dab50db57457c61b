"""Semantics of the core family: constants, the program id and the grid, arange, and the
hints (identity; kit.assume is checked)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kitjit.ir.core import Op
from kitjit.ir.registry import semantics

from .compiler import Env, Handler, _Compiler, pure
from .errors import DeviceAssertError
from .numeric import _scalar_arg
from .sync import _Ctx


@semantics("constant")
@pure
def constant(op: Op, ctx: _Ctx) -> Callable:
    v = _scalar_arg(op.result.dtype, op.attrs["value"])
    return lambda: v


@semantics("arange")
@pure
def arange(op: Op, ctx: _Ctx) -> Callable:
    v = np.arange(op.attrs["start"], op.attrs["end"], dtype=np.int32)
    return lambda: v


@semantics("num_programs")
@pure
def num_programs(op: Op, ctx: _Ctx) -> Callable:
    n = np.int32(ctx.grid[op.attrs["axis"]])
    return lambda: n


@semantics("program_id")
def program_id(comp: _Compiler, op: Op) -> Handler:
    """Read at run time: the program's id changes, so it is never hoisted."""
    ctx, axis, r = comp.ctx, op.attrs["axis"], op.result.id

    def pid(env: Env) -> None:
        env[r] = np.int32(ctx.pid[axis])
    return pid


@semantics("hint")
@pure
def hint(op: Op, ctx: _Ctx) -> Callable:
    """A promise for the compiler's analysis: the value passes through."""
    return lambda x: x


@semantics("assume")
def assume(comp: _Compiler, op: Op) -> Handler:
    """Checked here (undefined behaviour on the GPU when false)."""
    ctx, c = comp.ctx, op.operands[0].id
    where = f"{op.loc}: " if op.loc else ""

    def check(env: Env) -> None:
        if not env[c]:
            raise DeviceAssertError(f"{where}kit.assume does not hold in program {ctx.pid}")
    return check
