"""The `tma` family: Hopper's shared tiles, bulk tensor copies, mbarriers, CTA barriers,
warpgroup roles' ids and register budgets (smem_alloc, smem_index, smem_trans, smem_store,
smem_load, tma_load, tma_store, mbar_wait, mbar_arrive, barrier, warpgroup_id, setmaxnreg).

`sync` and `thread0` are in `base.py`: other families and `lower()` use them too.
"""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir.core import Op, Value
from kitjit.ir.registry import lowering

from ..nvvm import I32, I64, SPTR, VOID, asm, mem_type
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

    @lowering("named_bar")
    def op_named_bar(self, op: Op) -> None:
        """bar.sync / bar.arrive on hardware barrier 8 + id (roles take 1-7)."""
        (i,) = self.get(op.operands[0])
        bid = self.b.add(i, self.c32(8))
        kind = "arrive" if op.attrs["arrive"] else "sync"
        asm(self.b, VOID, f"bar.{kind} $0, {op.attrs['threads']};", "r,~{memory}", [bid])

    @lowering("warpgroup_id")
    def op_warpgroup_id(self, op: Op) -> None:
        self.set(op.result, [self.b.lshr(self.tid_abs, self.c32(7))])

    @lowering("setmaxnreg")
    def op_setmaxnreg(self, op: Op) -> None:
        if self.ampere:  # no register reallocation below sm_90: every warp keeps the
            return       # kernel's one allocation (documented at kit.setmaxnreg)
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
        if op.attrs.get("sync_first"):   # frontend/arrive_sync.py: order every thread's access
            self.sync()
        p = self.b.icmp_unsigned("==", self.b.and_(self.tid, self.c32(127)), self.c32(0))
        asm(self.b, VOID, "@$0 mbarrier.arrive.shared::cta.b64 _, [$1];", "b,r,~{memory}",
            [p, baddr])

    @lowering("smem_trans")
    def op_smem_trans(self, op: Op) -> None:
        self.vals[op.result.id] = self.get(op.operands[0])

    @staticmethod
    def smem_const_offset(lay, R: int, C: int, e: int, r: int, c: int) -> int:
        """Byte offset of element (r, c) of an [R, C] shared tile laid out as `lay`: column
        chunks one after another, rows of `swizzle` bytes whose 16-byte units are XORed with
        address bits 7.. (the pattern TMA writes and WGMMA reads; tiles are 1024-aligned).
        Linear over GF(2) in the bits of (r, c) (each term fills its own bit field), so a
        thread's offset XORs with a register's."""
        sw, cc = (lay.swizzle, lay.chunk) if lay is not None else (0, C)
        row_bytes = sw if sw else C * e
        byte = c % cc * e
        if sw:
            byte ^= ((r if sw == 128 else r >> {64: 1, 32: 2}[sw]) & (sw // 16 - 1)) << 4
        return c // cc * R * row_bytes + r * row_bytes + byte

    def smem_elements(self, tile: Value, lin, saddr):
        """(register indices, address) of each run of registers that sit side by side in
        shared tile `tile` at `saddr` (up to 16 bytes, as wide as the layout and the chunk
        allow) for a register tile laid out as `lin`: what kit.store / kit.load move with one
        access. The offset of a register is the thread's XOR the register's (both linear), and
        the register's bits that no thread bit touches become the access's immediate offset,
        so a tile needs a handful of address registers, not one per access."""
        b = self.b
        lay = tile.type.layout
        trans = lay is not None and lay.transposed
        R, C = tile.shape[::-1] if trans else tile.shape
        e = tile.dtype.itemsize
        inner = 0 if trans else 1  # the register tile's dim that runs along a stored row
        cc = lay.chunk if lay is not None else C
        vec = 1
        if e <= 8:
            steps = [v for _, _, v in lin.thread_terms(inner)]
            while vec * 2 * e <= 16 and vec * 2 <= cc and all(v % (vec * 2) == 0 for v in steps):
                vec *= 2

        def off(coord) -> int:
            r, c = coord[::-1] if trans else coord
            return self.smem_const_offset(lay, R, C, e, r, c)

        thread = None  # this thread's offset: XOR of the offsets of its lane and warp bits
        tmask = 0      # every bit it can have
        for src, bases in (("lane", lin.lane), ("warp", lin.warp)):
            ident = self.lane if src == "lane" else self.warp
            for k, basis in enumerate(bases):
                o = off(basis)
                if not o:
                    continue
                tmask |= o
                bit = b.and_(b.lshr(ident, self.c32(k)) if k else ident, self.c32(1))
                term = b.mul(bit, self.c32(o))
                thread = term if thread is None else b.xor(thread, term)
        if thread is not None:
            # opaque here, so that LLVM does not hoist the per-access sums below out of a
            # loop and keep them in registers across it (they cost an add each; registers
            # spent across a loop spill in kernels that hold large accumulators)
            thread = asm(b, I32, "mov.b32 $0, $1;", "=r,r", [thread], side_effect=True)
        coords = lin.reg_coords()
        idx = lin.reg_index()
        bases: dict[int, object] = {}
        runs, done = [], set()
        for i, c in enumerate(coords):
            if i in done:
                continue
            n = vec
            while n > 1:
                if c[inner] % n == 0:
                    more = [idx.get(tuple(x + (k if d == inner else 0) for d, x in enumerate(c)))
                            for k in range(n)]
                    if None not in more:
                        break
                n //= 2
            run = [i] if n == 1 else more
            done.update(run)
            o = off(c)
            hi, lo = o & ~tmask, o & tmask
            if lo not in bases:
                t = thread if thread is not None else self.c32(0)
                bases[lo] = b.add(saddr, b.xor(t, self.c32(lo)) if lo else t)
            runs.append((run, b.add(bases[lo], self.c32(hi)) if hi else bases[lo]))
        return runs

    @lowering("smem_store")
    def op_smem_store(self, op: Op) -> None:
        """Registers -> a shared tile (vector st.shared where runs allow), then a proxy fence
        so that WGMMA and TMA (the async proxy) see the writes after a barrier."""
        dst, value = op.operands
        (saddr,) = self.get(dst)
        self.store_regs(dst, value, saddr)
        if not self.ampere:  # (sm_80: the MMAs read shared memory through ldmatrix)
            asm(self.b, VOID, "fence.proxy.async.shared::cta;", "~{memory}", [])

    def store_regs(self, dst: Value, value: Value, saddr) -> None:
        b = self.b
        vals = self.get(value)
        mt = mem_type(value.dtype)
        for run, addr in self.smem_elements(dst, _lin(value.type), saddr):
            ptr = b.inttoptr(addr, SPTR)
            if len(run) == 1:
                b.store(self.to_mem(vals[run[0]], value.dtype), ptr)
                continue
            vec = ir.Constant(ir.VectorType(mt, len(run)), ir.Undefined)
            for k, i in enumerate(run):
                vec = b.insert_element(vec, self.to_mem(vals[i], value.dtype), self.c32(k))
            b.store(vec, ptr, align=len(run) * value.dtype.itemsize)

    @lowering("smem_load")
    def op_smem_load(self, op: Op) -> None:
        src = op.operands[0]
        b = self.b
        (saddr,) = self.get(src)
        lin = _lin(op.result.type)
        mt = mem_type(src.dtype)
        out = [None] * lin.nregs
        for run, addr in self.smem_elements(src, lin, saddr):
            ptr = b.inttoptr(addr, SPTR)
            if len(run) == 1:
                out[run[0]] = self.from_mem(b.load(ptr, typ=mt), src.dtype)
                continue
            vec = b.load(ptr, typ=ir.VectorType(mt, len(run)), align=len(run) * src.dtype.itemsize)
            for k, i in enumerate(run):
                out[i] = self.from_mem(b.extract_element(vec, self.c32(k)), src.dtype)
        self.set(op.result, out)

    @lowering("tma_store")
    def op_tma_store(self, op: Op) -> None:
        """Registers -> swizzled staging tile -> one bulk tensor copy per column chunk (a
        reduce-add into the tensor with reduce="add")."""
        if self.ampere:  # sm_80/86/89: predicated stores from the registers (ampere.py)
            return self.sm80_tma_store(op)
        desc, *coords, value, staging = op.operands
        b = self.b
        (saddr,) = self.get(staging)
        *batch, r, c = (self.get(x)[0] for x in coords)
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
        self.store_regs(staging, value, saddr)
        asm(b, VOID, "fence.proxy.async.shared::cta;", "~{memory}", [])
        self.sync()
        dim = f"{2 + len(batch)}d"  # a 3-d tensor: (col, row, batch) innermost first
        if op.attrs.get("reduce"):
            copy = (f"cp.reduce.async.bulk.tensor.{dim}.global.shared::cta."
                    f"{op.attrs['reduce']}.tile.bulk_group")
        else:
            copy = f"cp.async.bulk.tensor.{dim}.global.shared::cta.bulk_group"
        box, cons = _box_operands(len(batch), 2)
        for j in range(max(1, C // cc)):
            sj = b.add(saddr, self.c32(j * R * row_bytes)) if j else saddr
            cj = b.add(c, self.c32(j * cc)) if j else c
            asm(b, VOID, f"@$0 {copy} [$1, {box}], [${3 + len(batch) + 1}];",
                f"b,l,{cons},r,~{{memory}}", [p, dptr, cj, r, *batch, sj])
        asm(b, VOID, "@$0 cp.async.bulk.commit_group;", "b,~{memory}", [p])
        self.has_tma_store = True

    @lowering("tma_load")
    def op_tma_load(self, op: Op) -> None:
        if self.ampere:  # sm_80/86/89: cp.async by every thread of the role (ampere.py)
            return self.sm80_tma_load(op)
        dst, desc, *coords, bar = op.operands
        b = self.b
        (daddr,) = self.get(dst)
        *batch, r, c = (self.get(x)[0] for x in coords)
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
        mask = op.attrs.get("multicast")
        # a 3-d tensor (kit.tma_load's (batch, row, col)): coordinates innermost first, and
        # the box is one batch entry deep, so rows past the entry's end read as zeros
        dim = f"{2 + len(batch)}d"
        box, cons = _box_operands(len(batch), 3)
        nb = 5 + len(batch)  # the barrier's operand
        chunks = range(max(1, C // chunk))
        split = op.attrs.get("split")
        if split is not None:  # this CTA's part of the tile: contiguous in shared memory
            daddr, r, c, R, chunks = self.split_part(op, daddr, r, c, split, R, C, chunk, e)
        for j in chunks:
            dj = b.add(daddr, self.c32(j * R * chunk * e)) if j else daddr
            cj = b.add(c, self.c32(j * chunk)) if j else c
            if mask is not None:  # the same offsets in each CTA of the mask (clusters)
                asm(b, VOID, f"@$0 cp.async.bulk.tensor.{dim}.shared::cluster.global.tile."
                    f"mbarrier::complete_tx::bytes.multicast::cluster [$1], [$2, {box}], "
                    f"[${nb}], ${nb + 1};", f"b,r,l,{cons},r,h,~{{memory}}",
                    [p, dj, dptr, cj, r, *batch, baddr, ir.Constant(ir.IntType(16), mask)])
                continue
            asm(b, VOID, f"@$0 cp.async.bulk.tensor.{dim}.shared::cluster.global.tile."
                f"mbarrier::complete_tx::bytes [$1], [$2, {box}], [${nb}];",
                f"b,r,l,{cons},r,~{{memory}}", [p, dj, dptr, cj, r, *batch, baddr])

    def split_part(self, op: Op, daddr, r, c, dim: int, R: int, C: int, chunk: int, e: int):
        """`kit.tma_load(..., split=True)`: (address, row, col, rows, chunks) of the part
        this CTA copies, part p = its position among the multicast mask's ranks: column
        chunks [p*q, p*q + q) (dim 1) or rows [p*R/n, p*R/n + R/n) (dim 0; one chunk)."""
        b = self.b
        mask = op.attrs["multicast"]
        n = bin(mask).count("1")
        rank = self._sreg("cluster_ctarank")
        below = b.sub(b.shl(self.c32(1), rank), self.c32(1))
        p = b.call(self.intr.get("llvm.ctpop.i32", I32, [I32]),
                   [b.and_(below, self.c32(mask))])
        if dim == 1:
            q = C // chunk // n
            first = b.mul(p, self.c32(q))
            return (b.add(daddr, b.mul(first, self.c32(R * chunk * e))), r,
                    b.add(c, b.mul(first, self.c32(chunk))), R, range(q))
        rows = R // n
        return (b.add(daddr, b.mul(p, self.c32(rows * C * e))), b.add(r, b.mul(
            p, self.c32(rows))), c, rows, range(1))

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
        # in a cluster launch where a peer's plain writes may be read after the wait, it
        # acquires at cluster scope (an L1 invalidate per wait): frontend/cluster_scope.py
        sem = ".acquire.cluster" if self.fn.attrs.get("mbar_scope") == "cluster" else ""
        asm(self.b, VOID,
            "{ .reg .pred P1; \nKITWAIT${:uid}: \n"
            f"mbarrier.try_wait.parity{sem}.shared::cta.b64 P1, [$0], $1; \n"
            "@!P1 bra.uni KITWAIT${:uid}; }",
            "r,r,~{memory}", [baddr, ph])

    @lowering("tma_desc_create")
    def op_tma_desc_create(self, op: Op) -> None:
        """`kit.make_tensor_descriptor` on sm_90a: thread 0 writes a CUtensorMap into this
        program's 128-byte slot of the global scratch (zeros, then every field with
        `tensormap.replace`), releases it to the tensormap proxy; after a barrier every
        thread acquires it, so whichever thread issues the copies sees it. A base address
        or row stride that is not a multiple of 16 bytes (TMA's rule, and Triton's for
        make_tensor_descriptor) traps instead of copying wrong data."""
        scratch, base, rows, cols, stride = op.operands
        b = self.b
        (sp,) = self.get(scratch)
        (bp,) = self.get(base)
        (r,) = self.get(rows)
        (c,) = self.get(cols)
        (st,) = self.get(stride)
        elem = base.dtype.element_ty.itemsize
        box_rows, box_cols = op.attrs["box"]
        # this program's slot: scratch + (linear program id * slots + slot) * 128
        sreg = self.intr.sreg
        x, y, z = (b.zext(sreg(b, f"ctaid.{a}"), I64) for a in "xyz")
        nx, ny = (b.zext(sreg(b, f"nctaid.{a}"), I64) for a in "xy")
        pid = b.add(x, b.mul(nx, b.add(y, b.mul(ny, z))))
        slots = self.fn.attrs["_scratch_slots"]
        idx = b.add(b.mul(pid, ir.Constant(I64, slots)), ir.Constant(I64, op.attrs["slot"]))
        addr = b.add(b.ptrtoint(sp, I64), b.mul(idx, ir.Constant(I64, 128)))
        gaddr = b.ptrtoint(bp, I64)
        sbytes = b.mul(st, ir.Constant(I64, elem))
        p = self.thread0()
        bad = b.icmp_unsigned("!=", b.and_(b.or_(gaddr, sbytes), ir.Constant(I64, 15)),
                              ir.Constant(I64, 0))
        asm(b, VOID, "@$0 trap;", "b", [b.and_(p, bad)])
        # a TMA store of an earlier map in this slot must have finished with it
        asm(b, VOID, "@$0 cp.async.bulk.wait_group 0;", "b,~{memory}", [p])
        for k in range(8):
            asm(b, VOID, f"@$0 st.global.v4.b32 [$1+{16 * k}], {{0, 0, 0, 0}};",
                "b,l,~{memory}", [p, addr])
        rep = "tensormap.replace.tile"
        sizes = {1: 0, 2: 1, 4: 2, 8: 4}  # UINT8/16/32/64: a copy is a copy (zeros fill)
        fields = [
            (f"@$0 {rep}.global_address.global.b1024.b64 [$1], $2;", "b,l,l,~{memory}",
             [gaddr]),
            (f"@$0 {rep}.rank.global.b1024.b32 [$1], 1;", "b,l,~{memory}", []),
            (f"@$0 {rep}.box_dim.global.b1024.b32 [$1], 0, {box_cols};", "b,l,~{memory}", []),
            (f"@$0 {rep}.box_dim.global.b1024.b32 [$1], 1, {box_rows};", "b,l,~{memory}", []),
            (f"@$0 {rep}.global_dim.global.b1024.b32 [$1], 0, $2;", "b,l,r,~{memory}",
             [b.trunc(c, I32)]),
            (f"@$0 {rep}.global_dim.global.b1024.b32 [$1], 1, $2;", "b,l,r,~{memory}",
             [b.trunc(r, I32)]),
            (f"@$0 {rep}.global_stride.global.b1024.b64 [$1], 0, $2;", "b,l,l,~{memory}",
             [sbytes]),
            (f"@$0 {rep}.element_stride.global.b1024.b32 [$1], 0, 1;", "b,l,~{memory}", []),
            (f"@$0 {rep}.element_stride.global.b1024.b32 [$1], 1, 1;", "b,l,~{memory}", []),
            (f"@$0 {rep}.elemtype.global.b1024.b32 [$1], {sizes[elem]};", "b,l,~{memory}",
             []),
            (f"@$0 {rep}.interleave_layout.global.b1024.b32 [$1], 0;", "b,l,~{memory}", []),
            (f"@$0 {rep}.swizzle_mode.global.b1024.b32 [$1], "
             f"{_SWIZZLE_MODE[op.attrs['swizzle']]};", "b,l,~{memory}", []),
            (f"@$0 {rep}.fill_mode.global.b1024.b32 [$1], 0;", "b,l,~{memory}", []),
        ]
        for text, cons, extra in fields:
            asm(b, VOID, text, cons, [p, addr, *extra])
        asm(b, VOID, "@$0 fence.proxy.tensormap::generic.release.gpu;", "b,~{memory}", [p])
        self.sync()
        asm(b, VOID, "fence.proxy.tensormap::generic.acquire.gpu [$0], 128;", "l,~{memory}",
            [addr])
        self.set(op.result, [b.inttoptr(addr, ir.PointerType())])


def _box_operands(batched: int, first: int) -> tuple[str, str]:
    """The coordinate vector of a bulk tensor copy, `{$first, ...}` (col, row[, batch]),
    and its inline-asm constraints."""
    n = 2 + batched
    return ("{" + ", ".join(f"${first + k}" for k in range(n)) + "}",
            ",".join("r" * n))


_SWIZZLE_MODE = {0: 0, 32: 1, 64: 2, 128: 3}  # bytes of the swizzle span -> the map's field
