"""The `scan` family: scan (a combine function's region), sort (a bitonic network) and
histogram (shared-memory atomics).

Scans and sorts work on the bits of the coordinate along their axis. Each bit moves along
one basis of the layout: a register bit (the partner element is another register of the
thread), a lane bit (`shfl.sync.bfly`) or a warp bit (an exchange through shared memory).
A scan is a butterfly over those bits, lowest first: every element keeps its prefix within
its aligned block of 2^k elements and the block's total, and at bit k takes the total of
the partner block (the lower one) on its left. A sort is Triton's `sort_impl` over the
same bits: its bitonic network with its compare-and-swap rule (a pair with a NaN or a tie
ends as two copies of one element) and, for top-k, its rounds of max; the interpreter runs
the same steps, so both give Triton's bits on every input.
"""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir.core import Op
from kitjit.ir.layouts import LinearLayout
from kitjit.ir.registry import lowering
from kitjit.ir.types import DType

from ..nvvm import I1, I32, llvm_type
from .base import LoweringBase, LoweringError, _bits, _lin


class ScanLowering(LoweringBase):
    """scan, sort, histogram."""

    # ------------------------------------------------------------ the bits of an axis
    def axis_bits(self, lin: LinearLayout, axis: int, what: str) -> list[tuple[str, int]]:
        """For each bit of the coordinate along `axis`, lowest first: ('reg'|'lane'|'warp',
        the index of the basis that moves it)."""
        n = lin.shape[axis]
        found: dict[int, tuple[str, int]] = {}
        for kind, bases in (("reg", lin.reg), ("lane", lin.lane), ("warp", lin.warp)):
            for i, base in enumerate(bases):
                v = base[axis]
                if not v:
                    continue
                if v & (v - 1) or any(x for d, x in enumerate(base) if d != axis) or \
                        v.bit_length() - 1 in found:
                    raise LoweringError(f"{what} along a dim that the layout {lin} swizzles "
                                        "is not supported yet")
                found[v.bit_length() - 1] = (kind, i)
        bits = n.bit_length() - 1
        if sorted(found) != list(range(bits)):
            raise LoweringError(f"internal: {what}: the layout does not cover the axis")
        return [found[k] for k in range(bits)]

    def exchange(self, regs: list, lin: LinearLayout, kind: str, i: int) -> list:
        """Each register's value at the partner element across basis `i` of `kind`."""
        if kind == "reg":
            return [regs[r ^ (1 << i)] for r in range(len(regs))]
        if kind == "lane":
            return [self.shfl_xor(v, 1 << i) for v in regs]
        b = self.b
        e = max(4, *(_bits(v.type) // 8 for v in regs))  # one slot size for mixed tuples
        wt = ir.IntType(8 * e)
        n = len(regs)
        slot = b.or_(self.lane, b.shl(self.warp, self.c32(5)))
        other = b.xor(slot, self.c32(32 << i))
        self.need_smem(32 * self.num_warps * n * e)
        self.sync()
        for r, v in enumerate(regs):
            ptr = self.smem_ptr(b.add(b.mul(slot, self.c32(n)), self.c32(r)), e)
            b.store(self.widen(v, e), ptr)
        self.sync()
        out = []
        for r, v in enumerate(regs):
            ptr = self.smem_ptr(b.add(b.mul(other, self.c32(n)), self.c32(r)), e)
            out.append(self.narrow(b.load(ptr, typ=wt if _bits(v.type) < 8 * e else v.type),
                                   v.type))
        return out

    def bit_of(self, lin: LinearLayout, kind: str, i: int, r: int, axis: int, k: int):
        """Whether bit k of register r's coordinate along `axis` is set: a Python bool for a
        register bit, an i1 for a lane or warp bit."""
        if kind == "reg":
            return bool(lin.reg_coords()[r][axis] >> k & 1)
        src = self.lane if kind == "lane" else self.warp
        bit = self.b.and_(self.b.lshr(src, self.c32(i)), self.c32(1))
        return self.b.icmp_unsigned("!=", bit, self.c32(0))

    def pick(self, c, x: tuple, y: tuple) -> tuple:
        if isinstance(c, bool):
            return x if c else y
        return tuple(self.b.select(c, a, b) for a, b in zip(x, y))

    # ------------------------------------------------------------ scan
    @lowering("scan")
    def op_scan(self, op: Op) -> None:
        xs = op.operands
        axis, reverse = op.attrs["axis"], op.attrs["reverse"]
        lin = _lin(xs[0].type)
        comb = self.region_fn(op.regions[0])  # backend/lower/reduction.py
        n = lin.nregs
        srcs = [self.get(x) for x in xs]
        p = [tuple(s[r] for s in srcs) for r in range(n)]  # prefix within the block
        t = list(p)  # the block's total
        bits = self.axis_bits(lin, axis, "a scan")
        for k, (kind, i) in enumerate(bits):
            last = k == len(bits) - 1
            m = len(xs)
            flat = [v for tup in t for v in tup]
            ex = self.exchange(flat, lin, kind, i) if kind != "reg" else None
            newp, newt = [], []
            for r in range(n):
                q = t[r ^ (1 << i)] if kind == "reg" else tuple(ex[r * m:(r + 1) * m])
                up = self.bit_of(lin, kind, i, r, axis, k)  # this element's block is upper
                if reverse:
                    up = (not up) if isinstance(up, bool) else self.b.not_(up)
                if isinstance(up, bool):
                    newp.append(comb(q, p[r]) if up else p[r])
                    if not last:
                        newt.append(comb(q, t[r]) if up else comb(t[r], q))
                else:
                    newp.append(self.pick(up, comb(q, p[r]), p[r]))
                    if not last:
                        newt.append(self.pick(up, comb(q, t[r]), comb(t[r], q)))
            p, t = newp, newt
        for j, res in enumerate(op.results):
            self.set(res, [p[r][j] for r in range(n)])

    # ------------------------------------------------------------ sort
    def greater(self, dt: DType):
        b = self.b
        if dt.is_floating():
            return lambda x, y: b.fcmp_ordered(">", x, y)
        if dt.is_int_signed():
            return lambda x, y: b.icmp_signed(">", x, y)
        return lambda x, y: b.icmp_unsigned(">", x, y)

    def compare_exchange(self, regs: list, lin: LinearLayout, axis: int, bits: list, j: int,
                         gt, flip) -> list:
        """Triton's `_compare_and_swap` across bit j of the coordinate: each element takes its
        partner where `(mine > partner) != (upper ^ flip)` (`flip` an i1 or a constant: the
        pair's order is descending). A pair with a NaN (every `>` false), or two equal
        values, ends as two copies of one of them, as in Triton."""
        b = self.b
        kind, i = bits[j]
        other = self.exchange(regs, lin, kind, i)
        out = []
        for r, (v, w) in enumerate(zip(regs, other)):
            upper = self.as_i1(self.bit_of(lin, kind, i, r, axis, j))
            take = b.xor(gt(v, w), b.xor(upper, self.as_i1(flip(r))))
            out.append(b.select(take, w, v))
        return out

    def as_i1(self, c):
        return ir.Constant(I1, int(c)) if isinstance(c, bool) else c

    def merge_flip(self, lin: LinearLayout, axis: int, bits: list, t: int, desc: bool):
        """The order of a merge stage: alternating by bit t of the coordinate (Triton's
        `_indicator`), or `desc` everywhere when bit t is past the axis (the last stage)."""
        if t >= len(bits):
            return lambda r: desc
        kind, i = bits[t]
        return lambda r: self.bit_of(lin, kind, i, r, axis, t)

    @lowering("sort")
    def op_sort(self, op: Op) -> None:
        """Triton's `sort_impl`: bitonic stages 1..log2(k), each a merge of `stage` compare-
        exchange steps; for k < n, then log2(n/k) rounds of a max (min) of the elements k
        apart and a merge of log2(k) steps. The rounds keep every element: both of a pair
        take the max, so the upper bits of the coordinate name copies and the result is the
        first k elements."""
        x = op.operands[0]
        lin = _lin(x.type)
        axis = len(x.shape) - 1
        gt = self.greater(x.dtype)
        regs = list(self.get(x))
        desc = op.attrs["descending"]
        k = op.attrs["k"]
        bits = self.axis_bits(lin, axis, "a sort")
        m, log_k = len(bits), k.bit_length() - 1
        b = self.b
        for s in range(1, log_k + 1):
            flip = self.merge_flip(lin, axis, bits, s, desc)
            for j in range(s - 1, -1, -1):
                regs = self.compare_exchange(regs, lin, axis, bits, j, gt, flip)
        pick = self.binary_fn("maximum" if desc else "minimum", x.dtype)
        for q in range(log_k, m):  # the round that folds bit q of the coordinate
            kind, i = bits[q]
            other = self.exchange(regs, lin, kind, i)
            out = []
            for r, (v, w) in enumerate(zip(regs, other)):
                upper = self.bit_of(lin, kind, i, r, axis, q)
                lo, hi = self.pick(upper, (w, v), (v, w))  # Triton's combine(x[0], x[1])
                out.append(pick(lo, hi))
            regs = out
            flip = self.merge_flip(lin, axis, bits, q + 1, desc)
            for j in range(log_k - 1, -1, -1):
                regs = self.compare_exchange(regs, lin, axis, bits, j, gt, flip)
        if k == x.shape[-1]:
            self.set(op.result, regs)
            return
        # top k: through shared memory into the result's layout
        coords = lin.reg_coords()
        e = max(4, _bits(regs[0].type) // 8)
        strides = [1] * len(x.shape)
        for d in range(len(x.shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * x.shape[d + 1]
        self.need_smem(x.type.numel * e)
        self.sync()
        tix = self.thread_index(lin, strides)
        for r, v in enumerate(regs):
            off = sum(c * s for c, s in zip(coords[r], strides))
            b.store(self.widen(v, e), self.smem_ptr(b.add(tix, self.c32(off)), e))
        self.sync()
        olin = _lin(op.result.type)
        otix = self.thread_index(olin, strides)
        rt = llvm_type(x.dtype)
        wt = rt if _bits(rt) >= 8 * e else ir.IntType(8 * e)
        res = []
        for c in olin.reg_coords():
            off = sum(ci * s for ci, s in zip(c, strides))
            res.append(self.narrow(b.load(self.smem_ptr(b.add(otix, self.c32(off)), e),
                                          typ=wt), rt))
        self.set(op.result, res)

    # ------------------------------------------------------------ histogram
    @lowering("histogram")
    def op_histogram(self, op: Op) -> None:
        x = op.operands[0]
        nb = op.attrs["num_bins"]
        lin = _lin(x.type)
        b = self.b
        vals = self.get(x)
        masks = self.get(op.operands[1]) if op.attrs["has_mask"] else None
        nthreads = 32 * self.num_warps
        self.need_smem(nb * 4)
        self.sync()
        tid = b.or_(self.lane, b.shl(self.warp, self.c32(5)))
        for c in range(max(1, nb // nthreads)):
            idx = b.add(tid, self.c32(c * nthreads)) if nb >= nthreads else \
                b.and_(tid, self.c32(nb - 1))
            b.store(self.c32(0), self.smem_ptr(idx, 4))
        self.sync()
        # a thread that holds copies of another's elements (a layout wider than the tile)
        # does not count them
        keep = None
        for src, bases in ((self.lane, lin.lane), (self.warp, lin.warp)):
            zero = sum(1 << i for i, base in enumerate(bases) if not any(base))
            if zero:
                z = b.icmp_unsigned("==", b.and_(src, self.c32(zero)), self.c32(0))
                keep = z if keep is None else b.and_(keep, z)
        dt = x.dtype
        t = llvm_type(dt)
        for r, v in enumerate(vals):
            if dt.is_bool():
                v, t = b.zext(v, I32), I32
            ok = (b.icmp_signed if dt.is_int_signed() else b.icmp_unsigned)(
                "<", v, ir.Constant(t, nb))
            if dt.is_int_signed():
                ok = b.and_(ok, b.icmp_signed(">=", v, ir.Constant(t, 0)))
            if masks is not None:
                ok = b.and_(ok, masks[r])
            if keep is not None:
                ok = b.and_(ok, keep)
            idx = b.select(ok, v, ir.Constant(t, 0))
            idx = b.trunc(idx, I32) if _bits(t) > 32 else b.zext(idx, I32) \
                if _bits(t) < 32 else idx
            b.atomic_rmw("add", self.smem_ptr(idx, 4), b.zext(ok, I32), "monotonic")
        self.sync()
        olin = _lin(op.result.type)
        base = self.thread_coord(olin, 0)
        self.set(op.result, [b.load(self.smem_ptr(b.add(base, self.c32(c[0])), 4), typ=I32)
                             for c in olin.reg_coords()])
