"""Lowering of the `cluster` family: the special registers of a CTA's place in its
thread-block cluster, and the cluster barrier (sm_90+; the kernel's entry carries
`.reqnctapercluster`, see kitjit/jit.py `cluster_entry`)."""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir.core import Op
from kitjit.ir.registry import lowering

from ..nvvm import I32, VOID, asm, mem_type
from .base import LoweringBase, _lin

_REG = {2: ("b16", "h"), 4: ("b32", "r"), 8: ("b64", "l")}  # element bytes: PTX type, reg


class ClusterLowering(LoweringBase):
    """cluster_id, cluster_ctaid, cluster_ctarank, num_cluster_ctas, cluster_barrier,
    cluster_load, cluster_store."""

    def _sreg(self, name: str) -> ir.Value:
        # inline PTX: llvmlite's LLVM predates the NVVM intrinsics of the cluster registers
        return asm(self.b, I32, f"mov.u32 $0, %{name};", "=r", [], side_effect=False)

    @lowering("cluster_id")
    def op_cluster_id(self, op: Op) -> None:
        self.set(op.result, [self._sreg("clusterid." + "xyz"[op.attrs["axis"]])])

    @lowering("cluster_ctaid")
    def op_cluster_ctaid(self, op: Op) -> None:
        self.set(op.result, [self._sreg("cluster_ctaid." + "xyz"[op.attrs["axis"]])])

    @lowering("cluster_ctarank")
    def op_cluster_ctarank(self, op: Op) -> None:
        self.set(op.result, [self._sreg("cluster_ctarank")])

    @lowering("num_cluster_ctas")
    def op_num_cluster_ctas(self, op: Op) -> None:
        x, y, z = self.fn.attrs["cluster"]  # known at compile time (.reqnctapercluster)
        self.set(op.result, [self.c32(x * y * z)])

    @lowering("cluster_barrier")
    def op_cluster_barrier(self, op: Op) -> None:
        # arrive releases this thread's shared (and global) writes to the cluster; the
        # wait acquires every other thread's: DSMEM written before the barrier is readable
        # after it. .aligned: every thread of the CTA runs it (checked: not inside roles).
        # fence.mbarrier_init: this CTA's mbarrier.init are seen by the peers that arrive
        # on its barriers (or multicast into them) after the barrier
        asm(self.b, ir.VoidType(), "fence.mbarrier_init.release.cluster;\n\t"
            "barrier.cluster.arrive.release.aligned;\n\t"
            "barrier.cluster.wait.acquire.aligned;", "~{memory}", [])

    def _peer_base(self, tile, rank) -> ir.Value:
        """The shared::cluster address of CTA `rank`'s copy of `tile` (mapa). The mapping
        is an offset, so the tile's per-register addresses (swizzle included) follow by
        adding to it, as for a local tile."""
        (saddr,) = self.get(tile)
        (r,) = self.get(rank)
        return asm(self.b, I32, "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r", [saddr, r],
                   side_effect=False)

    @lowering("cluster_arrive")
    def op_cluster_arrive(self, op: Op) -> None:
        """One arrival per warpgroup (its first thread, as the local arrive) on the peer's
        mbarrier, releasing this CTA's writes at cluster scope where a peer may read them
        with plain accesses, else at CTA scope (no GPU-wide fence per arrival; see
        frontend/cluster_scope.py)."""
        bar, rank = op.operands
        if op.attrs.get("sync_first"):   # frontend/arrive_sync.py: order every thread's access
            self.sync()
        peer = self._peer_base(bar, rank)
        p = self.b.icmp_unsigned("==", self.b.and_(self.tid, self.c32(127)), self.c32(0))
        sem = ".release.cluster" if self.fn.attrs.get("mbar_scope") == "cluster" else ""
        asm(self.b, VOID, f"@$0 mbarrier.arrive{sem}.shared::cluster.b64 _, [$1];",
            "b,r,~{memory}", [p, peer])

    @lowering("cluster_load")
    def op_cluster_load(self, op: Op) -> None:
        """A peer's shared tile into registers: one ld.shared::cluster per element."""
        src, rank = op.operands
        b = self.b
        e = src.dtype.itemsize
        ptx, reg = _REG[e]
        ity = ir.IntType(8 * e)
        mt = mem_type(src.dtype)
        lin = _lin(op.result.type)
        out = [None] * lin.nregs
        for run, addr in self.smem_elements(src, lin, self._peer_base(src, rank)):
            for k, i in enumerate(run):
                a = b.add(addr, self.c32(k * e)) if k else addr
                bits = asm(b, ity, f"ld.shared::cluster.{ptx} $0, [$1];", f"={reg},r,~{{memory}}",
                           [a])
                out[i] = self.from_mem(b.bitcast(bits, mt) if mt != ity else bits, src.dtype)
        self.set(op.result, out)

    def _words(self, elems: list, mt, e: int) -> list:
        """Elements of `e` bytes (memory type mt) packed into 32-bit words, in order."""
        b = self.b
        per = 4 // e
        out = []
        for w in range(0, len(elems), per):
            if per == 1:
                v = elems[w]
                out.append(b.bitcast(v, I32) if v.type != I32 else v)
                continue
            vec = ir.Constant(ir.VectorType(mt, per), ir.Undefined)
            for k in range(per):
                vec = b.insert_element(vec, elems[w + k], self.c32(k))
            out.append(b.bitcast(vec, I32))
        return out

    @lowering("cluster_store")
    def op_cluster_store(self, op: Op) -> None:
        """Registers into a peer's shared tile (made visible to the peer by the next
        kit.cluster_barrier): one st.shared::cluster.v2/v4.b32 per run of 8 or 16 bytes
        that sit side by side (whole 32-byte sectors on the cluster's network where the
        layout allows: the WGMMA accumulator's column pairs), else one per element."""
        dst, rank, value = op.operands
        b = self.b
        e = dst.dtype.itemsize
        ptx, reg = _REG[e]
        ity = ir.IntType(8 * e)
        mt = mem_type(dst.dtype)
        vals = self.get(value)
        for run, addr in self.smem_elements(dst, _lin(value.type), self._peer_base(dst, rank)):
            if len(run) * e in (8, 16) and e <= 4:   # runs are aligned to their size
                words = self._words([self.to_mem(vals[i], value.dtype) for i in run], mt, e)
                ops = ", ".join(f"${k + 1}" for k in range(len(words)))
                asm(b, VOID, f"st.shared::cluster.v{len(words)}.b32 [$0], {{{ops}}};",
                    "r," + ",".join("r" * len(words)) + ",~{memory}", [addr, *words])
                continue
            for k, i in enumerate(run):
                a = b.add(addr, self.c32(k * e)) if k else addr
                v = self.to_mem(vals[i], value.dtype)
                v = b.bitcast(v, ity) if mt != ity else v
                asm(b, VOID, f"st.shared::cluster.{ptx} [$0], $1;", f"r,{reg},~{{memory}}",
                    [a, v])
