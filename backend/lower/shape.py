"""The `shape` family: splat, broadcast, expand_dims, and convert_layout.

These change which registers hold which elements without computing anything; only a
convert_layout that moves elements between threads goes through shared memory
(`through_smem`).
"""

from __future__ import annotations

from kitjit.ir.core import Op
from kitjit.ir.layouts import LinearLayout
from kitjit.ir.registry import lowering
from kitjit.ir.types import TileType

from ..nvvm import mem_type
from .base import LoweringBase, LoweringError, _lin


class ShapeLowering(LoweringBase):
    """Ops that rearrange registers (or, across threads, go through shared memory)."""

    @lowering("splat")
    def op_splat(self, op: Op) -> None:
        (s,) = self.get(op.operands[0])
        n = _lin(op.result.type).nregs
        self.set(op.result, [s] * n)

    @lowering("expand_dims")
    def op_expand_dims(self, op: Op) -> None:
        src = self.get(op.operands[0])
        if op.operands[0].type.is_scalar:
            self.set(op.result, src * _lin(op.result.type).nregs)
            return
        self.set(op.result, src)

    @lowering("broadcast")
    def op_broadcast(self, op: Op) -> None:
        x = op.operands[0]
        src = self.get(x)
        ls, ld = _lin(x.type), _lin(op.result.type)
        grow = [i for i, (a, b) in enumerate(zip(x.shape, op.result.shape)) if a != b]
        idx = ls.reg_index()
        out = []
        for c in ld.reg_coords():
            p = tuple(0 if i in grow else v for i, v in enumerate(c))
            if p not in idx:
                raise LoweringError(f"internal: broadcast {x.type} -> {op.result.type}")
            out.append(src[idx[p]])
        self.set(op.result, out)

    @lowering("convert_layout")
    def op_convert_layout(self, op: Op) -> None:
        x = op.operands[0]
        src = self.get(x)
        ls, ld = _lin(x.type), _lin(op.result.type)
        if ls.lane == ld.lane and ls.warp == ld.warp:
            idx = ls.reg_index()
            self.set(op.result, [src[idx[c]] for c in ld.reg_coords()])
            return
        self.set(op.result, self.through_smem(src, x.type, ls, ld))

    def through_smem(self, src, t: TileType, ls: LinearLayout, ld: LinearLayout):
        """Every thread writes its registers at their row-major place in shared memory, then
        reads the registers its new layout gives it."""
        shape = t.shape
        strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        mt = mem_type(t.dtype)
        e = t.dtype.itemsize
        self.need_smem(t.numel * e)
        b = self.b
        self.sync()
        base_s = self.thread_index(ls, strides)
        for c, v in zip(ls.reg_coords(), src):
            off = sum(x * s for x, s in zip(c, strides))
            p = self.smem_ptr(b.add(base_s, self.c32(off)), e)
            b.store(self.to_mem(v, t.dtype), p)
        self.sync()
        base_d = self.thread_index(ld, strides)
        out = []
        for c in ld.reg_coords():
            off = sum(x * s for x, s in zip(c, strides))
            p = self.smem_ptr(b.add(base_d, self.c32(off)), e)
            out.append(self.from_mem(b.load(p, typ=mt), t.dtype))
        return out
