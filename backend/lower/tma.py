"""The `tma` family: Hopper's shared tiles, bulk tensor copies, mbarriers, CTA barriers,
warpgroup roles' ids and register budgets (smem_alloc, smem_index, smem_trans, tma_load,
tma_store, mbar_wait, mbar_arrive, barrier, warpgroup_id, setmaxnreg).

`sync` and `thread0` are in `base.py`: other families and `lower()` use them too.
"""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir.core import Op, Value
from kitjit.ir.registry import lowering

from ..nvvm import I64, SPTR, VOID, asm, mem_type
from .base import LoweringBase, _lin


class TmaLowering(LoweringBase):
    """Shared tiles, TMA copies, mbarriers, barriers and warpgroup roles."""

    @lowering("smem_alloc")
    def op_smem_alloc(self, op: Op) -> None:
        addr = self.b.add(self.static_base, self.c32(self.alloc_offset[op.result.id]))
        self.set_smem(op.result, addr)
        if "init" in op.attrs:
            if self.ampere:  # sm_80/86/89 (ampere.py): no .shared::cta forms, no fence
                return self.sm80_mbar_init(op, addr)
            p = self.thread0()
            for i in range(op.result.shape[0]):
                asm(self.b, VOID, "@$0 mbarrier.init.shared::cta.b64 [$1], $2;", "b,r,r",
                    [p, self.b.add(addr, self.c32(8 * i)), self.c32(op.attrs["init"])])
            asm(self.b, VOID, "fence.mbarrier_init.release.cluster;", "~{memory}", [])
            self.sync()

    def set_smem(self, v: Value, addr) -> None:
        self.vals[v.id] = [addr]

    @lowering("smem_index")
    def op_smem_index(self, op: Op) -> None:
        (base,) = self.get(op.operands[0])
        (idx,) = self.get(op.operands[1])
        t = op.result.type
        stage = t.numel * (8 if t.dtype.name == "mbarrier" else t.dtype.itemsize)
        self.set_smem(op.result, self.b.add(base, self.b.mul(idx, self.c32(stage))))

    @lowering("barrier")
    def op_barrier(self, op: Op) -> None:
        self.sync()

    @lowering("warpgroup_id")
    def op_warpgroup_id(self, op: Op) -> None:
        self.set(op.result, [self.b.lshr(self.tid_abs, self.c32(7))])

    @lowering("setmaxnreg")
    def op_setmaxnreg(self, op: Op) -> None:
        n = op.attrs["count"]
        threads = 32 * self.total_warps
        cap = min(255, 65536 // (threads * self.ctas_per_sm)) // 8 * 8
        kind = "inc" if n > cap else "dec"
        asm(self.b, VOID, f"setmaxnreg.{kind}.sync.aligned.u32 {n};", "~{memory}", [])
        self.uses_setmaxnreg = True

    @lowering("mbar_arrive")
    def op_mbar_arrive(self, op: Op) -> None:
        if self.ampere:
            return self.sm80_mbar_arrive(op)
        (baddr,) = self.get(op.operands[0])
        p = self.b.icmp_unsigned("==", self.b.and_(self.tid, self.c32(127)), self.c32(0))
        asm(self.b, VOID, "@$0 mbarrier.arrive.shared::cta.b64 _, [$1];", "b,r,~{memory}",
            [p, baddr])

    @lowering("smem_trans")
    def op_smem_trans(self, op: Op) -> None:
        self.vals[op.result.id] = self.get(op.operands[0])

    @lowering("tma_store")
    def op_tma_store(self, op: Op) -> None:
        """Registers -> swizzled staging tile -> one bulk tensor copy per column chunk."""
        if self.ampere:  # sm_80/86/89: predicated stores from the registers (ampere.py)
            return self.sm80_tma_store(op)
        desc, row, col, value, staging = op.operands
        b = self.b
        (saddr,) = self.get(staging)
        (r,) = self.get(row)
        (c,) = self.get(col)
        dptr = b.ptrtoint(self.get(desc)[0], I64)
        p = self.thread0()
        R, C = value.shape
        e = value.dtype.itemsize
        lay = staging.type.layout
        sw, cc = (lay.swizzle, lay.chunk) if lay is not None else (0, C)
        row_bytes = sw if sw else C * e
        # the previous store from this staging tile must have finished reading it
        asm(b, VOID, "@$0 cp.async.bulk.wait_group.read 0;", "b,~{memory}", [p])
        self.sync()
        lin = _lin(value.type)
        vals = self.get(value)
        rbase = self.thread_coord(lin, 0)
        cbase = self.thread_coord(lin, 1)
        coords = lin.reg_coords()
        idx = lin.reg_index()
        done = set()
        mt = mem_type(value.dtype)
        for i, (cr, ccol) in enumerate(coords):
            if i in done:
                continue
            # pack (c, c+1) pairs into one 32-bit store when the layout holds both
            pair = idx.get((cr, ccol + 1)) if e == 2 and ccol % 2 == 0 else None
            rr = b.add(rbase, self.c32(cr))
            cl = b.add(cbase, self.c32(ccol))
            chunk = b.udiv(cl, self.c32(cc)) if cc < C else self.c32(0)
            incol = b.urem(cl, self.c32(cc)) if cc < C else cl
            byte = b.mul(incol, self.c32(e))
            if sw:
                unit = b.lshr(byte, self.c32(4))
                unit = b.xor(unit, b.and_(rr, self.c32(sw // 16 - 1)))
                byte = b.or_(b.shl(unit, self.c32(4)), b.and_(byte, self.c32(15)))
            off = b.add(b.add(b.mul(chunk, self.c32(R * row_bytes)),
                              b.mul(rr, self.c32(row_bytes))), byte)
            ptr = b.inttoptr(b.add(saddr, off), SPTR)
            if pair is not None:
                vec = ir.Constant(ir.VectorType(mt, 2), ir.Undefined)
                vec = b.insert_element(vec, vals[i], self.c32(0))
                vec = b.insert_element(vec, vals[pair], self.c32(1))
                b.store(vec, ptr, align=4)
                done.add(pair)
            else:
                b.store(self.to_mem(vals[i], value.dtype), ptr)
        asm(b, VOID, "fence.proxy.async.shared::cta;", "~{memory}", [])
        self.sync()
        for j in range(max(1, C // cc)):
            sj = b.add(saddr, self.c32(j * R * row_bytes)) if j else saddr
            cj = b.add(c, self.c32(j * cc)) if j else c
            asm(b, VOID, "@$0 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group "
                "[$1, {$2, $3}], [$4];", "b,l,r,r,r,~{memory}", [p, dptr, cj, r, sj])
        asm(b, VOID, "@$0 cp.async.bulk.commit_group;", "b,~{memory}", [p])
        self.has_tma_store = True

    @lowering("tma_load")
    def op_tma_load(self, op: Op) -> None:
        if self.ampere:  # sm_80/86/89: cp.async by every thread of the role (ampere.py)
            return self.sm80_tma_load(op)
        dst, desc, row, col, bar = op.operands
        b = self.b
        (daddr,) = self.get(dst)
        (r,) = self.get(row)
        (c,) = self.get(col)
        (baddr,) = self.get(bar)
        dptr = b.ptrtoint(self.get(desc)[0], I64)
        expect = op.attrs.get("expect", op.attrs["bytes"])  # see frontend/tma_groups.py
        p = self.thread0()
        if expect:
            if self.role is None and not op.attrs.get("nosync"):
                self.sync()  # every warpgroup is done reading the stage it overwrites
            asm(b, VOID, "@$0 mbarrier.arrive.expect_tx.shared::cta.b64 _, [$1], $2;",
                "b,r,r,~{memory}", [p, baddr, self.c32(expect)])
        lay = dst.type.layout
        R, C = dst.shape
        chunk = lay.chunk if lay is not None else C
        e = dst.dtype.itemsize
        for j in range(max(1, C // chunk)):
            dj = b.add(daddr, self.c32(j * R * chunk * e)) if j else daddr
            cj = b.add(c, self.c32(j * chunk)) if j else c
            asm(b, VOID, "@$0 cp.async.bulk.tensor.2d.shared::cluster.global.tile."
                "mbarrier::complete_tx::bytes [$1], [$2, {$3, $4}], [$5];",
                "b,r,l,r,r,r,~{memory}", [p, dj, dptr, cj, r, baddr])

    @lowering("smem_load")
    def op_smem_load(self, op: Op) -> None:
        """A shared tile (swizzled as TMA wrote it) -> registers in the result's layout:
        each thread's runs of consecutive columns in one 16-byte unit load as one vector."""
        (x,) = op.operands
        b = self.b
        (saddr,) = self.get(x)
        R, C = x.shape
        dt = x.dtype
        e = dt.itemsize
        lay = x.type.layout
        sw, cc = (lay.swizzle, lay.chunk) if lay is not None else (0, C)
        row_bytes = sw if sw else C * e
        lin = _lin(op.result.type)
        rbase, cbase = self.thread_coord(lin, 0), self.thread_coord(lin, 1)
        coords = lin.reg_coords()
        idx = lin.reg_index()
        mt = mem_type(dt)
        out: list = [None] * len(coords)
        for i, (cr, ccol) in enumerate(coords):
            if out[i] is not None:
                continue
            k = max(1, 16 // e)
            while k > 1 and (ccol % k or any((cr, ccol + j) not in idx for j in range(k))):
                k //= 2
            rr = b.add(rbase, self.c32(cr))
            cl = b.add(cbase, self.c32(ccol))
            chunk = b.udiv(cl, self.c32(cc)) if cc < C else self.c32(0)
            incol = b.urem(cl, self.c32(cc)) if cc < C else cl
            byte = b.mul(incol, self.c32(e))
            if sw:
                unit = b.lshr(byte, self.c32(4))
                unit = b.xor(unit, b.and_(rr, self.c32(sw // 16 - 1)))
                byte = b.or_(b.shl(unit, self.c32(4)), b.and_(byte, self.c32(15)))
            off = b.add(b.add(b.mul(chunk, self.c32(R * row_bytes)),
                              b.mul(rr, self.c32(row_bytes))), byte)
            ptr = b.inttoptr(b.add(saddr, off), SPTR)
            if k == 1:
                out[i] = self.from_mem(b.load(ptr, typ=mt), dt)
                continue
            vec = b.load(ptr, typ=ir.VectorType(mt, k), align=k * e)
            for j in range(k):
                out[idx[(cr, ccol + j)]] = self.from_mem(b.extract_element(vec, self.c32(j)),
                                                         dt)
        self.set(op.result, out)

    def phase_slot(self, bar: Value):
        """A per-barrier phase bit kept in a local slot (an alloca at the entry, which LLVM
        turns into SSA values and loop phis): `mbar_wait` with `auto_phase` waits on it and
        flips it."""
        slots = self.__dict__.setdefault("_phase_slots", {})
        slot = slots.get(bar.id)
        if slot is None:
            b = self.b
            here = b.block
            b.position_at_start(self.kernel.entry_basic_block)
            slot = b.alloca(ir.IntType(32))
            b.store(self.c32(0), slot)
            b.position_at_end(here)
            slots[bar.id] = slot
        return slot

    @lowering("mbar_wait")
    def op_mbar_wait(self, op: Op) -> None:
        if self.ampere:
            return self.sm80_mbar_wait(op)
        (baddr,) = self.get(op.operands[0])
        (ph,) = self.get(op.operands[1])
        if op.attrs.get("auto_phase"):
            slot = self.phase_slot(op.operands[0])
            ph = self.b.load(slot)
            self.b.store(self.b.xor(ph, self.c32(1)), slot)
        asm(self.b, VOID,
            "{ .reg .pred P1; \nKITWAIT${:uid}: \n"
            "mbarrier.try_wait.parity.shared::cta.b64 P1, [$0], $1; \n"
            "@!P1 bra.uni KITWAIT${:uid}; }",
            "r,r,~{memory}", [baddr, ph])
