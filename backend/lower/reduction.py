"""The `reduction` family: reduce (sum, max, min, argmax, argmin) along one axis, and
reduce_combine (kit.reduce with a combine function's region).

A reduction runs inside the thread (a tree over its registers), then across lanes
(`shfl_xor`, in `base.py` since the memory family's `widen_store` shuffles too), then across
warps through shared memory (`reduce_warps`).
"""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir.core import Block, Op
from kitjit.ir.registry import lowering
from kitjit.ir.types import DType

from ..nvvm import I32, llvm_type
from .base import LoweringBase, LoweringError, _bits, _lin


class ReductionLowering(LoweringBase):
    """reduce, in three steps: registers, lanes, warps."""

    def combine_fn(self, kind: str, dt: DType):
        b = self.b
        if kind == "sum":
            return (lambda x, y: b.fadd(x, y)) if dt.is_floating() else \
                (lambda x, y: b.add(x, y))
        if kind in ("max", "min"):
            return self.binary_fn("maximum" if kind == "max" else "minimum", dt)
        raise LoweringError(kind)

    @lowering("reduce")
    def op_reduce(self, op: Op) -> None:
        x = op.operands[0]
        kind, axis = op.attrs["kind"], op.attrs["axis"]
        lin = _lin(x.type)
        src = self.get(x)
        dt = x.dtype
        arg = kind in ("argmax", "argmin")
        b = self.b
        if arg:
            idx_base = self.thread_coord(lin, axis)
            coords = lin.reg_coords()
            items = [(v, b.add(idx_base, self.c32(c[axis])) if c[axis] else idx_base)
                     for v, c in zip(src, coords)]
            better = self.arg_better(kind, dt)

            def comb(p, q):
                take = better(p, q)
                return (b.select(take, q[0], p[0]), b.select(take, q[1], p[1]))
        else:
            f = self.combine_fn(kind, dt)
            items = [(v,) for v in src]

            def comb(p, q):
                return (f(p[0], q[0]),)
        # 1. inside the thread
        groups: dict[tuple, list] = {}
        for c, it in zip(lin.reg_coords(), items):
            key = c[:axis] + c[axis + 1:]
            groups.setdefault(key, []).append(it)
        partial = {}
        for key, its in groups.items():
            while len(its) > 1:  # tree order
                its = [comb(its[i], its[i + 1]) if i + 1 < len(its) else its[i]
                       for i in range(0, len(its), 2)]
            partial[key] = its[0]
        # 2. across lanes
        for k, base in enumerate(lin.lane):
            if base[axis]:
                for key, p in partial.items():
                    q = tuple(self.shfl_xor(v, 1 << k) for v in p)
                    partial[key] = comb(p, q)
        # 3. across warps, through shared memory
        wbits = [k for k, base in enumerate(lin.warp) if base[axis]]
        if op.result.type.is_scalar:
            out_keys = [()]
        else:
            out_lin = _lin(op.result.type)
            out_keys = out_lin.reg_coords()
        if wbits:
            partial = self.reduce_warps(partial, out_keys, wbits, lin, axis, comb, dt, arg)
        res = [partial[k][1] if arg else partial[k][0] for k in out_keys]
        self.set(op.result, res)

    def region_fn(self, region: Block):
        """A combine function's region as a Python function of 2N registers -> N: each call
        emits the region's (scalar) ops again."""
        def comb(p, q):
            for a, v in zip(region.args, (*p, *q)):
                self.vals[a.id] = [v]
            return tuple(y[0] for y in self.block(region))
        return comb

    @lowering("reduce_combine")
    def op_reduce_combine(self, op: Op) -> None:
        """kit.reduce with a combine function: the steps of `reduce`, the region as the
        combine (its tuples are the inputs' registers)."""
        xs = op.operands
        axis = op.attrs["axis"]
        lin = _lin(xs[0].type)
        comb = self.region_fn(op.regions[0])
        srcs = [self.get(x) for x in xs]
        groups: dict[tuple, list] = {}
        for r, c in enumerate(lin.reg_coords()):
            groups.setdefault(c[:axis] + c[axis + 1:], []).append(tuple(s[r] for s in srcs))
        partial = {}
        for key, its in groups.items():
            while len(its) > 1:
                its = [comb(its[i], its[i + 1]) if i + 1 < len(its) else its[i]
                       for i in range(0, len(its), 2)]
            partial[key] = its[0]
        for k, base in enumerate(lin.lane):
            if base[axis]:
                for key, p in partial.items():
                    partial[key] = comb(p, tuple(self.shfl_xor(v, 1 << k) for v in p))
        wbits = [k for k, base in enumerate(lin.warp) if base[axis]]
        r0 = op.results[0]
        out_keys = [()] if r0.type.is_scalar else _lin(r0.type).reg_coords()
        if wbits:
            partial = self.reduce_warps(partial, out_keys, wbits, lin, axis, comb, None, False,
                                        [llvm_type(x.dtype) for x in xs])
        for i, r in enumerate(op.results):
            self.set(r, [partial[k][i] for k in out_keys])

    def arg_better(self, kind: str, dt: DType):
        b = self.b
        signed = dt.is_int_signed()
        sym = ">" if kind == "argmax" else "<"

        def better(p, q):  # q beats p: strictly better value, or equal and smaller index
            if dt.is_floating():
                # NaN beats every number (the first NaN wins), as numpy's and torch's
                # argmax/argmin: the result does not depend on the order of the tree
                q_nan = b.fcmp_unordered("uno", q[0], q[0])
                p_nan = b.fcmp_unordered("uno", p[0], p[0])
                strict = b.or_(b.fcmp_ordered(sym, q[0], p[0]),
                               b.and_(q_nan, b.not_(p_nan)))
                eq = b.or_(b.fcmp_ordered("==", q[0], p[0]), b.and_(q_nan, p_nan))
            else:
                cmp = b.icmp_signed if signed else b.icmp_unsigned
                strict = cmp(sym, q[0], p[0])
                eq = b.icmp_unsigned("==", q[0], p[0])
            return b.or_(strict, b.and_(eq, b.icmp_signed("<", q[1], p[1])))
        return better

    def reduce_warps(self, partial, out_keys, wbits, lin, axis, comb, dt, arg, types=None):
        """Warps along the reduced axis exchange partials through shared memory (`types`:
        the LLVM types of a partial's items, for reduce_combine)."""
        b = self.b
        nw = 1 << len(wbits)
        nk = len(out_keys)
        if types is None:
            types = [llvm_type(dt), I32] if arg else [llvm_type(dt)]
        e = max(4, *(_bits(t) // 8 for t in types))
        # slot = (warp group along axis) * nk * T + key index * T + (thread's other coords)
        # keep it simple: each thread writes its partials for its own keys into
        # [wgroup][thread-slot][key]; thread-slot identifies the thread's non-axis position.
        widx = None
        for j, k in enumerate(wbits):
            bit = b.and_(b.lshr(self.warp, self.c32(k)), self.c32(1))
            bit = b.shl(bit, self.c32(j)) if j else bit
            widx = bit if widx is None else b.or_(widx, bit)
        # the thread's position among threads that differ in non-axis coordinates: use the
        # lane id and the warp bits that do not move along the axis
        other_w = [k for k in range(len(lin.warp)) if k not in wbits]
        slot = self.lane
        for j, k in enumerate(other_w):
            bit = b.and_(b.lshr(self.warp, self.c32(k)), self.c32(1))
            slot = b.or_(slot, b.shl(bit, self.c32(5 + j)))
        nslots = 32 << len(other_w)
        per_w = nslots * nk
        stride_item = len(types)
        total = nw * per_w * stride_item
        self.need_smem(total * e)
        self.sync()
        base = b.mul(b.add(b.mul(widx, self.c32(nslots)), slot), self.c32(nk))
        for i, key in enumerate(out_keys):
            p = partial[key]
            off = b.add(base, self.c32(i))
            for j, v in enumerate(p):
                ptr = self.smem_ptr(b.add(b.mul(off, self.c32(stride_item)), self.c32(j)), e)
                b.store(self.widen(v, e), ptr)
        self.sync()
        out = {}
        for i, key in enumerate(out_keys):
            acc = None
            for w in range(nw):
                # warp w along the axis: same slot, other warp index
                off = b.add(b.mul(b.add(self.c32(w * nslots), slot), self.c32(nk)),
                            self.c32(i))
                vals = []
                for j in range(stride_item):
                    ptr = self.smem_ptr(b.add(b.mul(off, self.c32(stride_item)), self.c32(j)),
                                        e)
                    ty = types[j]
                    vals.append(self.narrow(b.load(ptr, typ=self.wide_type(ty, e)), ty))
                item = tuple(vals)
                acc = item if acc is None else comb(acc, item)
            out[key] = acc
        return out

    def wide_type(self, t, e):
        return t if _bits(t) >= 8 * e else ir.IntType(8 * e)

    def widen(self, v, e):
        if _bits(v.type) >= 8 * e:
            return v
        it = ir.IntType(_bits(v.type))
        x = self.b.bitcast(v, it) if v.type != it else v
        return self.b.zext(x, ir.IntType(8 * e))

    def narrow(self, v, t):
        if v.type == t:
            return v
        it = ir.IntType(_bits(t))
        x = self.b.trunc(v, it)
        return self.b.bitcast(x, t) if t != it else x
