"""The `signal` family: signal_wait, signal_set, signal_add (flags that programs on this GPU
or on peers wait on and set).

Each is a CTA-wide step done by one thread, the leader (thread 0, or the first thread of the
warpgroup role it runs in), with a barrier on the right side of it:

- signal_wait: the leader spins on `ld.acquire.<scope>` until the compare holds, then a
  barrier lets the other threads go on. Acquire in the leader plus the barrier orders every
  thread's later loads after the signalling program's earlier stores (PTX memory model:
  causality order runs through the barrier). On sm_90a a `fence.proxy.async.global` follows,
  so TMA loads issued after the wait are ordered too.
- signal_set / signal_add: a barrier first (every thread's earlier stores, to peers too,
  are done in program order before it), then the leader's `st.release.<scope>` /
  `red.release.<scope>.add`: release is cumulative, so it publishes what the barrier made
  the leader observe. In a kernel with TMA stores the leader (who issued them) first waits
  for them to complete (`cp.async.bulk.wait_group 0`) and fences the async proxy.
"""

from __future__ import annotations

from kitjit.ir.core import Op, walk_block
from kitjit.ir.registry import lowering

from ..nvvm import VOID, asm
from .base import LoweringBase


class SignalLowering(LoweringBase):
    """Signals in global memory, one leader thread per program (or per role)."""

    def leader(self):
        return self.thread0()  # tid is relative to the role inside warpgroup roles

    def _signal_args(self, op: Op):
        (p,) = self.get(op.operands[0])
        (v,) = self.get(op.operands[1])
        dt = op.operands[0].dtype.element_ty
        return p, v, dt.bits, ("s" if dt.is_int_signed() else "u"), \
            ("r" if dt.bits == 32 else "l")

    @lowering("signal_wait")
    def op_signal_wait(self, op: Op) -> None:
        p, v, w, sign, reg = self._signal_args(op)
        sem, scope, cmp = op.attrs["sem"], op.attrs["scope"], op.attrs["cmp"]
        with self.b.if_then(self.leader()):
            asm(self.b, VOID,
                f"{{ .reg .pred P1; .reg .b{w} V1; \nKITSIG${{:uid}}: \n"
                f"ld.{sem}.{scope}.global.b{w} V1, [$0]; \n"
                f"setp.{cmp}.{sign}{w} P1, V1, $1; \n"
                "@!P1 bra KITSIG${:uid}; }",
                f"l,{reg},~{{memory}}", [p, v])
        self.sync()
        if sem == "acquire" and self.fn.attrs.get("_tma_target"):
            # what the wait publishes may be read next by TMA (the async proxy), e.g. rows a
            # copy engine delivered: order those reads after the acquire
            asm(self.b, VOID, "fence.proxy.async.global;", "~{memory}", [])

    def _bulk_stores_done(self) -> None:
        """In a kernel with TMA stores (issued by the same leader thread), wait for them to
        complete and fence the async proxy before the release: a release orders the
        generic proxy's writes only, and a bulk store may still be in flight."""
        has = self.__dict__.get("_has_tma_store")
        if has is None:
            has = self._has_tma_store = bool(self.fn.attrs.get("_tma_target")) and any(
                o.name == "tma_store" for o in walk_block(self.fn.body))
        if has:
            asm(self.b, VOID, "cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;",
                "~{memory}", [])

    @lowering("signal_set")
    def op_signal_set(self, op: Op) -> None:
        p, v, w, _, reg = self._signal_args(op)
        self.sync()
        with self.b.if_then(self.leader()):
            self._bulk_stores_done()
            asm(self.b, VOID, f"st.{op.attrs['sem']}.{op.attrs['scope']}.global.b{w} "
                "[$0], $1;", f"l,{reg},~{{memory}}", [p, v])

    @lowering("signal_add")
    def op_signal_add(self, op: Op) -> None:
        p, v, w, _, reg = self._signal_args(op)
        sem, scope = op.attrs["sem"], op.attrs["scope"]
        self.sync()
        with self.b.if_then(self.leader()):
            self._bulk_stores_done()
            if sem == "acq_rel":  # red has no acq_rel form: an atom whose result is dropped
                asm(self.b, VOID, f"{{ .reg .b{w} O1; atom.acq_rel.{scope}.global.add.u{w} "
                    "O1, [$0], $1; }", f"l,{reg},~{{memory}}", [p, v])
            else:
                asm(self.b, VOID, f"red.{sem}.{scope}.global.add.u{w} [$0], $1;",
                    f"l,{reg},~{{memory}}", [p, v])
