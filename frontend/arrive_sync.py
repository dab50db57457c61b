"""Mark the mbarrier arrivals that must first sync their warpgroup.

On Hopper, `kit.mbarrier_arrive` is one arrival per warpgroup: its first thread arrives. The
arrival (a release) orders only that thread's own earlier memory accesses, so if the other
127 threads have just written (or read) a shared tile with plain loads and stores, the
waiting side could see the tile before their writes land, or overwrite it while they still
read. The interpreter runs each tile op for the whole program at once, so there the
arrival always comes after every thread's access; this pass makes the GPU agree.

A forward walk over the IR tracks whether a generic shared-memory access (a tile load or
store, a DSMEM load or store) may have happened since the last barrier of the role; an
arrival reached in that state gets `sync_first`, and the backend syncs the role (bar.sync)
before it. Kernels that already write `kit.barrier()` before the arrival (the attention and
GEMM kernels do) are unchanged. Loops are walked twice, so an access late in the body
reaches an arrival early in the next iteration.
"""

from __future__ import annotations

from kitjit.ir.core import Block, Function

_ACCESS = frozenset({"smem_load", "smem_store", "cluster_load", "cluster_store"})
_SYNC = frozenset({"barrier", "named_bar", "cluster_barrier"})
_ARRIVE = frozenset({"mbar_arrive", "cluster_arrive"})


def mark_arrive_syncs(fn: Function) -> Function:
    _walk(fn.body, False)
    return fn


def _walk(block: Block, dirty: bool) -> bool:
    """Walk `block` entered in state `dirty`; return the state at its end."""
    for op in block.ops:
        if op.name in _ACCESS:
            dirty = True
        elif op.name in _SYNC:
            dirty = False
        elif op.name in _ARRIVE:
            if dirty:
                op.attrs["sync_first"] = True
        elif op.name in ("for", "while"):
            state = dirty
            for _ in range(2):   # the body's end flows into its next iteration
                state = dirty or any([_walk(r, state) for r in op.regions])
            dirty = state
        elif op.regions:         # if / else: either branch may have run
            dirty = any([_walk(r, dirty) for r in op.regions]) or dirty
    return dirty
