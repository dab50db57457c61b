"""The `shape` family: splat, broadcast, expand_dims, convert_layout, and permute, reshape,
join, split, cat, flip, gather.

These change which registers hold which elements without computing anything. An op whose
result each thread already holds renames registers (`in_registers`); one that moves
elements between threads goes through shared memory (`through_smem`, `move`), flip across
lanes by shuffles, gather always through shared memory.
"""

from __future__ import annotations

from kitjit.ir.core import Op
from kitjit.ir.layouts import LinearLayout, axis_vec, reshape_coord, row_major_strides
from kitjit.ir.registry import lowering
from kitjit.ir.types import DType, TileType

from ..nvvm import I32, mem_type
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
        strides = list(row_major_strides(t.shape))
        self.need_smem(t.numel * t.dtype.itemsize)
        self.sync()
        self.smem_write(src, t.dtype, ls, strides)
        self.sync()
        return self.smem_read(ld, strides, t.dtype)

    def smem_write(self, src, dt: DType, lin: LinearLayout, strides, const: int = 0) -> None:
        """Store each register of a `lin`-laid-out tile at element `coord . strides + const`
        of the scratch space."""
        e = dt.itemsize
        b = self.b
        base = self.thread_index(lin, strides)
        for c, v in zip(lin.reg_coords(), src):
            off = sum(x * s for x, s in zip(c, strides)) + const
            p = self.smem_ptr(b.add(base, self.c32(off)), e)
            b.store(self.to_mem(v, dt), p)

    def smem_read(self, lin: LinearLayout, strides, dt: DType, const: int = 0, dyn=None):
        """Load the registers of a `lin`-laid-out tile from element `coord . strides + const`
        (+ `dyn[i]`, an i32 per register, where given) of the scratch space."""
        e = dt.itemsize
        b = self.b
        base = self.thread_index(lin, strides)
        out = []
        for i, c in enumerate(lin.reg_coords()):
            off = sum(x * s for x, s in zip(c, strides)) + const
            idx = b.add(base, self.c32(off))
            if dyn is not None:
                idx = b.add(idx, dyn[i])
            p = self.smem_ptr(idx, e)
            out.append(self.from_mem(b.load(p, typ=mem_type(dt)), dt))
        return out

    # ---------------------------------------------------------- ops that move elements
    # Each first tries registers: when every thread already holds the elements of its result
    # registers (the layout pass gives results their operand's layout relabeled, see
    # kitjit/ir/layouts.py), the op only renames registers. Otherwise the operands go through
    # shared memory at their row-major places and the result is read back at the places its
    # coordinates map to.
    def in_registers(self, srcs, ls: LinearLayout, ld: LinearLayout, pick, lin=None):
        """The result registers when each thread holds its result's elements, else None.
        `pick(c)` is (operand, operand coordinate) of result coordinate c; `lin` its linear
        part (default `pick`), which must send each lane/warp basis of the result to the
        operand's."""
        lin = lin or pick
        if len(ls.lane) != len(ld.lane) or len(ls.warp) != len(ld.warp):
            return None
        for a, b in zip(ls.lane + ls.warp, ld.lane + ld.warp):
            if lin(b) != (0, a):
                return None
        idx = ls.reg_index()
        out = []
        for c in ld.reg_coords():
            j, sc = pick(c)
            if sc not in idx:
                return None
            out.append(srcs[j][idx[sc]])
        return out

    @lowering("permute")
    def op_permute(self, op: Op) -> None:
        x, dims = op.operands[0], op.attrs["dims"]
        ls, ld = _lin(x.type), _lin(op.result.type)
        inv = [dims.index(d) for d in range(len(dims))]
        regs = self.in_registers([self.get(x)], ls, ld,
                                 lambda c: (0, tuple(c[inv[d]] for d in range(len(c)))))
        if regs is None:  # result dim i walks x's dim dims[i]
            s = row_major_strides(x.shape)
            regs = self.move(x, ld, [s[d] for d in dims])
        self.set(op.result, regs)

    @lowering("reshape")
    def op_reshape(self, op: Op) -> None:
        x, r = op.operands[0], op.result
        ls, ld = _lin(x.type), _lin(r.type)
        regs = self.in_registers([self.get(x)], ls, ld,
                                 lambda c: (0, reshape_coord(c, r.shape, x.shape)))
        if regs is None:  # row-major: the same flat place
            regs = self.move(x, ld, row_major_strides(r.shape))
        self.set(r, regs)

    @lowering("split")
    def op_split(self, op: Op) -> None:
        x = op.operands[0]
        ls = _lin(x.type)
        for k, r in enumerate(op.results):
            ld = _lin(r.type)
            regs = self.in_registers([self.get(x)], ls, ld, lambda c, k=k: (0, c + (k,)),
                                     lambda c: (0, c + (0,)))
            if regs is None:
                regs = self.move(x, ld, row_major_strides(x.shape)[:-1], k)
            self.set(r, regs)

    @lowering("join")
    def op_join(self, op: Op) -> None:
        self.two_into_one(op, lambda c: (c[-1], c[:-1]), 1)

    @lowering("cat")
    def op_cat(self, op: Op) -> None:
        n = op.operands[0].shape[0]
        self.two_into_one(op, lambda c: (c[0] // n, (c[0] % n,) + c[1:]),
                          row_major_strides(op.result.shape)[0] * n)

    def two_into_one(self, op: Op, pick, second: int) -> None:
        """join / cat: a and b (one layout) into a result where b's elements start at flat
        offset `second` with a's strides of the result."""
        a, b = op.operands
        ls, ld = _lin(a.type), _lin(op.result.type)
        regs = None
        if ls == _lin(b.type):
            regs = self.in_registers([self.get(a), self.get(b)], ls, ld, pick)
        if regs is None:
            t = op.result.type
            rs = row_major_strides(t.shape)
            xs = rs[:-1] if op.name == "join" else rs
            self.need_smem(t.numel * t.dtype.itemsize)
            self.sync()
            self.smem_write(self.get(a), t.dtype, ls, xs)
            self.smem_write(self.get(b), t.dtype, _lin(b.type), xs, second)
            self.sync()
            regs = self.smem_read(ld, rs, t.dtype)
        self.set(op.result, regs)

    @lowering("flip")
    def op_flip(self, op: Op) -> None:
        """In registers when the dim is held within each thread; by one butterfly shuffle per
        register when it also spans lanes (lane l reads lane l ^ m); else shared memory."""
        x, d = op.operands[0], op.attrs["dim"]
        n = x.shape[d]
        ls, ld = _lin(x.type), _lin(op.result.type)
        src = self.get(x)
        regs = None
        if ls == ld and not any(w[d] for w in ls.warp):
            m = sum(1 << k for k, v in enumerate(ls.lane) if v[d])
            rm = 0
            for v in ls.reg + ls.lane:
                rm ^= v[d]
            if rm == n - 1 and (m == 0 or not x.dtype.is_ptr()):
                idx = ls.reg_index()
                flip = axis_vec(len(x.shape), d, sum(v[d] for v in ls.reg))
                regs = [src[idx[tuple(a ^ f for a, f in zip(c, flip))]]
                        for c in ld.reg_coords()]
                if m:
                    regs = [self.shfl_xor(v, m) for v in regs]
        if regs is None:  # read coordinate c_d at n-1-c_d
            s = list(row_major_strides(x.shape))
            const = (n - 1) * s[d]
            s[d] = -s[d]
            regs = self.move(x, ld, s, const)
        self.set(op.result, regs)

    @lowering("gather")
    def op_gather(self, op: Op) -> None:
        """Through shared memory: src at its row-major places, then each thread reads its
        elements at the places its index registers name (modulo the dim's size)."""
        src, index = op.operands
        axis = op.attrs["axis"]
        n = src.shape[axis]
        t = src.type
        ld = _lin(op.result.type)
        b = self.b
        dyn = []
        for v in self.get(index):
            w = v.type.width
            v = b.trunc(v, I32) if w > 32 else b.zext(v, I32) if w < 32 else v
            dyn.append(b.mul(b.and_(v, self.c32(n - 1)), self.c32(row_major_strides(
                src.shape)[axis])))
        s = list(row_major_strides(src.shape))
        s[axis] = 0
        self.need_smem(t.numel * t.dtype.itemsize)
        self.sync()
        self.smem_write(self.get(src), t.dtype, _lin(t), row_major_strides(src.shape))
        self.sync()
        self.set(op.result, self.smem_read(ld, s, t.dtype, dyn=dyn))

    def move(self, x, ld: LinearLayout, strides, const: int = 0):
        """x through shared memory, read back under `ld` at `coord . strides + const`."""
        t = x.type
        self.need_smem(t.numel * t.dtype.itemsize)
        self.sync()
        self.smem_write(self.get(x), t.dtype, _lin(t), row_major_strides(t.shape))
        self.sync()
        return self.smem_read(ld, strides, t.dtype, const)
