"""The `core` family: scalars and index tiles that come from nothing but constants and the
launch (constant, program_id, num_programs, arange).

The state and helpers every family shares are in `base.py`, not here: this module holds
only the lowering of the core ops, like the other family modules.
"""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir.core import Op
from kitjit.ir.registry import lowering

from .base import LoweringBase, _lin


class CoreLowering(LoweringBase):
    """constant, program_id, num_programs, arange, and the hints (hint, assume)."""

    @lowering("constant")
    def op_constant(self, op: Op) -> None:
        self.set(op.result, [self.const(op.result.dtype, op.attrs["value"])])

    @lowering("program_id")
    def op_program_id(self, op: Op) -> None:
        self.set(op.result, [self.intr.sreg(self.b, "ctaid." + "xyz"[op.attrs["axis"]])])

    @lowering("num_programs")
    def op_num_programs(self, op: Op) -> None:
        self.set(op.result, [self.intr.sreg(self.b, "nctaid." + "xyz"[op.attrs["axis"]])])

    @lowering("arange")
    def op_arange(self, op: Op) -> None:
        lin = _lin(op.result.type)
        base = self.b.add(self.thread_coord(lin, 0), self.c32(op.attrs["start"]))
        self.set(op.result, [self.b.add(base, self.c32(c[0])) if c[0] else base
                             for c in lin.reg_coords()])

    @lowering("hint")
    def op_hint(self, op: Op) -> None:
        # the fact itself is read by backend/axis_info.py; the registers pass through
        self.set(op.result, self.get(op.operands[0]))

    @lowering("assume")
    def op_assume(self, op: Op) -> None:
        (c,) = self.get(op.operands[0])
        self.b.call(self.intr.get("llvm.assume", ir.VoidType(), [ir.IntType(1)]), [c])
