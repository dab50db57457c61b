"""The `control` family: for, while and if, lowered to LLVM basic blocks whose phis carry each
value's registers, and yield.

A region's `yield` never reaches the dispatch: `block()` stops at it and returns its
operands' registers to the for/if that lowers the region, which wires them into the phis.
It is registered here, with the ops that consume it, so that the registry sees every
control op lowered; its entry only says so when called out of place.
"""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir.core import Block, Op
from kitjit.ir.registry import lowering

from .base import LoweringBase, LoweringError


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
        phis = []
        for arg, init in zip(body.args[1:], inits):
            ps = []
            for x in init:
                p = b.phi(x.type)
                p.add_incoming(x, pre)
                ps.append(p)
            phis.append(ps)
            self.vals[arg.id] = ps
        self.vals[body.args[0].id] = [iv]
        ys_ops = body.ops[-1].operands
        for arg, init, y in zip(body.args[1:], op.operands[3:], ys_ops):
            o = y.owner
            if init.id in self.inflight or (isinstance(o, Op) and o.name == "wgmma" and
                                            o.attrs.get("pending", 0)):
                self.inflight.add(arg.id)
        step_info = self.axis[op.operands[2]].cval
        if step_info is not None and step_info > 0 or isinstance(step, ir.Constant) and \
                step.constant > 0:
            cond = b.icmp_signed("<", iv, ub)
        elif isinstance(step, ir.Constant) and step.constant < 0:
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
        b.branch(header)
        b.position_at_end(exit_)
        for r, ps, arg in zip(op.results, phis, body.args[1:]):
            self.vals[r.id] = ps
            if arg.id in self.inflight:
                self.inflight.add(r.id)

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
                if self.next_bar > 15:
                    raise LoweringError("more than 15 roles need named barriers")
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
        phis = []
        for ca, ba, init in zip(cond.args, body.args, inits):
            ps = []
            for x in init:
                p = b.phi(x.type)
                p.add_incoming(x, pre)
                ps.append(p)
            phis.append(ps)
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
