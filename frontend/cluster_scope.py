"""Pick the memory scope of a cluster kernel's mbarrier waits and remote arrivals.

A remote arrival `kit.mbarrier_arrive(bar, cta=r)` at `.release.cluster`, and a wait that
acquires at `.acquire.cluster`, let a peer CTA read what this CTA wrote with plain stores
before arriving (DSMEM, global memory). That costs: ptxas puts MEMBAR.ALL.CTA,
MEMBAR.ALL.GPU, ERRBAR and CGAERRBAR before every such arrival, and CCTL.IVALL (an L1
invalidate) after every such wait. A 2-CTA multicast GEMM arrives twice per k-step and
warpgroup, so the GPU-wide fences sat on its critical path (H200, session 9: 0.65x cuBLAS,
about 1000 cycles more per k-step than the non-cluster kernel).

The cluster scope buys something only where a CTA reads, with a generic (non-TMA) access,
memory a peer may have written: a DSMEM load or store (`kit.cluster_load` /
`kit.cluster_store`), a global load, an atomic, a signal, or inline asm (unknown). A kernel
with none of these exchanges data between its CTAs through TMA copies alone (multicast):
their bytes become visible through the destination CTA's own barrier (complete_tx), and
the write-after-read order of a refill (the MMAs that read a stage retired, then the
arrival, then the peer's copy) is a chain of causality, which `.release.cta` arrivals and
`.acquire.cta` waits keep (the forms CUTLASS's and Triton's Hopper multicast GEMMs use).
Such a kernel gets those. Plain global stores alone do not need cluster scope: a peer could
read them only with a plain load (which keeps the cluster scope) or through TMA, an async
proxy read that the memory model orders after generic writes only with a proxy fence,
which kitjit emits in neither case.

The result is `fn.attrs["mbar_scope"]`: "cluster" or "cta" (kernels without a cluster
launch get no entry; their waits and arrivals are CTA-scope anyway).
"""

from __future__ import annotations

from kitjit.ir.core import Function

# ops through which a CTA may read memory that a peer wrote with generic accesses
PEER_DATA_OPS = frozenset({"cluster_load", "cluster_store", "load", "atomic_rmw",
                           "atomic_cas", "signal_wait", "signal_set", "signal_add",
                           "inline_asm"})


def pick_mbar_scope(fn: Function) -> Function:
    if fn.attrs.get("cluster"):
        needs = any(op.name in PEER_DATA_OPS for op in fn.walk())
        fn.attrs["mbar_scope"] = "cluster" if needs else "cta"
    return fn
