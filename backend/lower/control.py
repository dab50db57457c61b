"""The `control` family: for, while and if, lowered to LLVM basic blocks whose phis carry
each value's registers, and yield; the debugging ops (print through vprintf, assert through
__assertfail) and griddepcontrol.

A region's `yield` never reaches the dispatch: `block()` stops at it and returns its
operands' registers to the for/if that lowers the region, which wires them into the phis.
It is registered here, with the ops that consume it, so that the registry sees every
control op lowered; its entry only says so when called out of place.
"""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir.core import Block, Op
from kitjit.ir.registry import lowering

from ..nvvm import asm
from .base import LoweringBase, LoweringError, _lin


class ControlLowering(LoweringBase):
    """for and if (and the yield that ends their regions)."""

    @lowering("for")
    def op_for(self, op: Op) -> None:
        b = self.b
        lb, ub, step = (self.get(v)[0] for v in op.operands[:3])
        inits = [self.get(v) for v in op.operands[3:]]
        body = op.regions[0]
        pre = b.block
        header = self.kernel.append_basic_block("for.header")
        loop = self.kernel.append_basic_block("for.body")
        exit_ = self.kernel.append_basic_block("for.exit")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(lb.type, name=body.args[0].name or "iv")
        iv.add_incoming(lb, pre)
        phis = self._carried_phis(inits, pre)
        for arg, ps in zip(body.args[1:], phis):
            self.vals[arg.id] = ps
            self.carried.add(arg.id)
        self.vals[body.args[0].id] = [iv]
        ys_ops = body.ops[-1].operands
        for arg, init, y in zip(body.args[1:], op.operands[3:], ys_ops):
            o = y.owner
            if init.id in self.inflight or (isinstance(o, Op) and o.name == "wgmma" and
                                            o.attrs.get("pending", 0)):
                self.inflight.add(arg.id)
        # the step's sign, when known at compile time: from the axis analysis, or from an
        # LLVM constant read as signed (constants hold the two's-complement bits, so -1 is
        # 4294967295 in an i32: reading it unsigned ran negative-step loops zero times)
        sign = self.axis[op.operands[2]].cval
        if sign is None and isinstance(step, ir.Constant):
            bits = step.type.width
            sign = int(step.constant)
            sign = sign - (1 << bits) if sign >= 1 << (bits - 1) else sign
        if sign is not None and sign > 0:
            cond = b.icmp_signed("<", iv, ub)
        elif sign is not None and sign < 0:
            cond = b.icmp_signed(">", iv, ub)
        else:
            pos = b.icmp_signed(">", step, ir.Constant(step.type, 0))
            cond = b.select(pos, b.icmp_signed("<", iv, ub), b.icmp_signed(">", iv, ub))
        b.cbranch(cond, loop, exit_)
        b.position_at_end(loop)
        ys = self.block(body)
        nxt = b.add(iv, step)
        end = b.block
        iv.add_incoming(nxt, end)
        for ps, y in zip(phis, ys):
            for p, v in zip(ps, y):
                p.add_incoming(v, end)
        back = b.branch(header)
        unroll = op.attrs.get("loop_unroll_factor")
        if unroll is not None:
            back.set_metadata("llvm.loop", self._unroll_md(unroll))
        b.position_at_end(exit_)
        for r, ps, arg, y in zip(op.results, phis, body.args[1:], ys_ops):
            self.vals[r.id] = ps
            # in flight after the loop when the last iteration's value is: the arg still
            # unread, or the yielded value (a kit.mma with pending=1 retires the arg)
            if arg.id in self.inflight or y.id in self.inflight:
                self.inflight.add(r.id)

    def _unroll_md(self, factor: int):
        """The loop ID of a back edge for `kit.range(..., loop_unroll_factor=n)`: LLVM's
        unroller leaves the loop alone for n <= 1 and unrolls it n times otherwise. (A
        constant trip count of a few steps is unrolled whole by default: a level-2 k-loop of
        6 steps then had ptxas serialize its WGMMAs, C7514.) The node refers to itself, as
        loop IDs must; llvmlite's uniqued nodes cannot, so it is made by hand."""
        m = self.module
        opt = m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.disable")]) \
            if factor <= 1 else \
            m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.count"),
                            ir.Constant(ir.IntType(32), factor)])
        loop_id = ir.values.MDValue(m, [], name=str(len(m.metadata)))
        loop_id.operands = (loop_id, opt)
        return loop_id

    def _yields_inflight(self, region: Block, i: int) -> bool:
        y = region.ops[-1] if region.ops and region.ops[-1].name == "yield" else None
        return y is not None and i < len(y.operands) and y.operands[i].id in self.inflight

    @lowering("if")
    def op_if(self, op: Op) -> None:
        b = self.b
        (cond,) = self.get(op.operands[0])
        then_bb = self.kernel.append_basic_block("if.then")
        else_bb = self.kernel.append_basic_block("if.else")
        merge = self.kernel.append_basic_block("if.end")
        b.cbranch(cond, then_bb, else_bb)
        ends = []
        roles = op.attrs.get("roles")
        for i, (region, bb) in enumerate(zip(op.regions, (then_bb, else_bb))):
            b.position_at_end(bb)
            if roles:
                saved = (self.tid, self.warp, self.num_warps, self.role, self.role_bar)
                first, count = roles[i]
                self.role = (first, count)
                self.next_bar += 1  # a named barrier of its own (ids 1..15)
                if self.next_bar > 7:  # 8-15: kit.named_barrier_wait / _arrive
                    raise LoweringError("more than 7 roles need named barriers")
                self.role_bar = self.next_bar
                self.tid = b.sub(self.tid_abs, self.c32(128 * first)) if first else self.tid_abs
                self.warp = b.lshr(self.tid, self.c32(5))
                self.num_warps = 4 * count
            ys = self.block(region) or []
            if roles:
                self.tid, self.warp, self.num_warps, self.role, self.role_bar = saved
            ends.append((b.block, ys))
            b.branch(merge)
        b.position_at_end(merge)
        for i, r in enumerate(op.results):
            if any(self._yields_inflight(region, i) for region in op.regions):
                self.inflight.add(r.id)
            regs = []
            for j in range(len(ends[0][1][i])):
                p = b.phi(ends[0][1][i][j].type)
                for blk, ys in ends:
                    p.add_incoming(ys[i][j], blk)
                regs.append(p)
            self.vals[r.id] = regs

    def _carried_phis(self, inits: list[list[ir.Value]], pre) -> list[list[ir.Value]]:
        """One phi per register of each loop-carried value, entering with its initial value
        from block `pre` (the loop's back edge is added once the body is lowered)."""
        phis = []
        for init in inits:
            ps = []
            for x in init:
                p = self.b.phi(x.type)
                p.add_incoming(x, pre)
                ps.append(p)
            phis.append(ps)
        return phis

    @lowering("yield")
    def op_yield(self, op: Op) -> None:
        # block() returns at a region's yield before dispatching it (see the module's text)
        raise LoweringError("internal: 'yield' lowered outside the end of a for/if region")

    @lowering("while")
    def op_while(self, op: Op) -> None:
        """A header block whose phis carry each value's registers and compute the condition
        region, then the body, which branches back."""
        b = self.b
        cond, body = op.regions
        inits = [self.get(v) for v in op.operands]
        pre = b.block
        header = self.kernel.append_basic_block("while.header")
        loop = self.kernel.append_basic_block("while.body")
        exit_ = self.kernel.append_basic_block("while.exit")
        b.branch(header)
        b.position_at_end(header)
        phis = self._carried_phis(inits, pre)
        for ca, ba, ps in zip(cond.args, body.args, phis):
            self.vals[ca.id] = ps
            self.vals[ba.id] = ps
        (c,) = self.block(cond)[0]
        b.cbranch(c, loop, exit_)
        b.position_at_end(loop)
        ys = self.block(body)
        end = b.block
        for ps, y in zip(phis, ys):
            for p, v in zip(ps, y):
                p.add_incoming(v, end)
        b.branch(header)
        b.position_at_end(exit_)
        for r, ps in zip(op.results, phis):
            self.vals[r.id] = ps

    # ------------------------------------------------------------ debugging
    def cstring(self, text: str) -> ir.Value:
        """An i8* to a NUL-terminated constant string in global memory."""
        data = bytearray(text.encode() + b"\0")
        ty = ir.ArrayType(ir.IntType(8), len(data))
        g = ir.GlobalVariable(self.module, ty, name=self.module.get_unique_name("str"))
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(ty, data)
        return self.b.bitcast(g, ir.IntType(8).as_pointer())

    @lowering("print")
    def op_print(self, op: Op) -> None:
        """One vprintf per register: `pid (x, y, z) idx (i, ...) prefix value`."""
        b = self.b
        i8p = ir.IntType(8).as_pointer()
        vprintf = self.intr.get("vprintf", ir.IntType(32), [i8p, i8p])
        pid = [self.intr.sreg(b, f"ctaid.{a}") for a in "xyz"]
        for v in op.operands:
            regs = self.get(v)
            spec, conv = _print_format(v.dtype, op.attrs["hex"])
            rank = len(v.shape)
            idx_fmt = ", ".join(["%d"] * rank)
            fmt = self.cstring(f"pid (%d, %d, %d) idx ({idx_fmt}) {op.attrs['prefix']}{spec}\n")
            if rank == 0:
                coords, base = [()], []
                guard = self.thread0()
            else:
                lin = _lin(v.type)
                coords = lin.reg_coords()
                base = [self.thread_coord(lin, d) for d in range(rank)]
                guard = None
            for reg, c in zip(regs, coords):
                idx = [b.add(base[d], self.c32(c[d])) if c[d] else base[d] for d in range(rank)]
                args = pid + idx + [conv(self, reg)]
                st = ir.LiteralStructType([a.type for a in args])
                buf = self.entry_alloca(st)
                for k, a in enumerate(args):
                    b.store(a, b.gep(buf, [self.c32(0), self.c32(k)], inbounds=True))
                if guard is not None:
                    with b.if_then(guard):
                        b.call(vprintf, [fmt, b.bitcast(buf, i8p)])
                else:
                    b.call(vprintf, [fmt, b.bitcast(buf, i8p)])

    def entry_alloca(self, ty: ir.Type) -> ir.Value:
        """A stack slot allocated in the entry block (so loops do not grow the stack)."""
        b = self.b
        here = b.block
        entry = self.kernel.entry_basic_block
        b.position_at_start(entry)
        slot = b.alloca(ty)
        b.position_at_end(here)
        return slot

    @lowering("assert")
    def op_assert(self, op: Op) -> None:
        """`__assertfail` (CUDA's assert: the launch fails with the message) where any
        element this thread holds is false."""
        b = self.b
        regs = self.get(op.operands[0])
        bad = None
        for r in regs:
            nr = b.not_(r)
            bad = nr if bad is None else b.or_(bad, nr)
        i8p = ir.IntType(8).as_pointer()
        fail = self.intr.get("__assertfail", ir.VoidType(),
                             [i8p, i8p, ir.IntType(32), i8p, ir.IntType(64)])
        loc = op.loc
        with b.if_then(bad, likely=False):
            b.call(fail, [self.cstring(op.attrs["msg"] or "kit.device_assert failed"),
                          self.cstring(loc.file if loc else "?"),
                          ir.Constant(ir.IntType(32), loc.line if loc else 0),
                          self.cstring(loc.func if loc and loc.func else "?"),
                          ir.Constant(ir.IntType(64), 1)])

    # below sm_90 there is no griddepcontrol and no programmatic launch: grids on a stream
    # run one after the other, so there is nothing to wait for or to release (a kernel text
    # written for Hopper, kit.graph's, compiles there unchanged)
    @lowering("read_sreg")
    def op_read_sreg(self, op: Op) -> None:
        if op.attrs["name"] == "smid":   # which SM: fixed for the program, may be CSE'd
            r = asm(self.b, ir.IntType(32), "mov.u32 $0, %smid;", "=r", [], side_effect=False)
        else:                            # a clock: each read where it stands
            r = asm(self.b, ir.IntType(64), "mov.u64 $0, %globaltimer;", "=l", [])
        self.set(op.result, [r])

    @lowering("gdc_wait")
    def op_gdc_wait(self, op: Op) -> None:
        if not self.ampere:
            asm(self.b, ir.VoidType(), "griddepcontrol.wait;", "~{memory}", [])

    @lowering("gdc_launch_dependents")
    def op_gdc_launch_dependents(self, op: Op) -> None:
        if not self.ampere:
            asm(self.b, ir.VoidType(), "griddepcontrol.launch_dependents;", "~{memory}", [])


def _print_format(dt, hex: bool):
    """The printf conversion of a value of `dt` and how to widen it for vprintf (varargs
    promote floats to double and small ints to int)."""
    I32, I64, F64 = ir.IntType(32), ir.IntType(64), ir.DoubleType()
    if dt.is_ptr():
        return "0x%llx", lambda s, r: s.b.ptrtoint(r, I64)
    if dt.is_floating():
        if hex:
            return "0x%llx", lambda s, r: s.b.bitcast(s.b.fpext(r, F64) if dt.bits < 64 else r,
                                                      I64)
        return "%f", lambda s, r: s.b.fpext(r, F64) if dt.bits < 64 else r
    if dt.bits == 64:
        return ("0x%llx" if hex else "%llu" if dt.is_int_unsigned() else "%lld"), \
            lambda s, r: r
    spec = "0x%x" if hex else "%u" if dt.is_int_unsigned() or dt.is_bool() else "%d"
    if dt.bits == 32:
        return spec, lambda s, r: r
    ext = "zext" if dt.is_int_unsigned() or dt.is_bool() else "sext"
    return spec, lambda s, r: getattr(s.b, ext)(r, I32)
