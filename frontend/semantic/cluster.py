"""Typing of the `cluster` family: a CTA's place in its thread-block cluster and the
cluster barrier (kit.cluster_id, kit.cluster_ctaid, kit.cluster_ctarank,
kit.num_cluster_ctas, kit.cluster_barrier).

The cluster's shape is a launch option (`cluster=(x, y, z)`), not part of the kernel's
source, so whether a kernel that uses these ops is launched in clusters is checked once the
IR is built (`check_cluster_ops`), at the op's own line."""

from __future__ import annotations

from typing import Any

from kitjit.frontend.errors import CompileError

from kitjit.ir.core import Function, Value, walk_block
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import TileType, int32, mbarrier

from .base import BuilderBase, describe
from .call_rules import Call, call_rule

CLUSTER_OPS = ("cluster_id", "cluster_ctaid", "cluster_ctarank", "num_cluster_ctas",
               "cluster_barrier", "cluster_load", "cluster_store", "cluster_arrive")


class ClusterOps(BuilderBase):
    @typing_rule("cluster_id", "cluster_ctaid")
    def cluster_index(self, name: str, axis: int) -> Value:
        """kit.cluster_id (the cluster's index in the grid) or kit.cluster_ctaid (the CTA's
        index in its cluster) along axis 0, 1 or 2."""
        return self.emit1(name, [], TileType(int32), {"axis": axis})

    @typing_rule("cluster_ctarank", "num_cluster_ctas")
    def cluster_rank(self, name: str) -> Value:
        return self.emit1(name, [], TileType(int32))

    @typing_rule("cluster_barrier")
    def cluster_barrier(self) -> None:
        self.emit("cluster_barrier", [], [])

    def _peer(self, tile: Any, rank: Any, what: str) -> Value:
        if not isinstance(tile, Value) or not tile.type.is_shared or len(tile.shape) != 2:
            raise self.error(f"kit.{what} takes a 2-d shared tile (a stage a[s]), got "
                             f"{describe(tile)}")
        if tile.dtype.itemsize not in (2, 4, 8):
            raise self.error(f"kit.{what} of {tile.dtype.name} tiles is not supported yet "
                             "(16-, 32- and 64-bit elements are)")
        if isinstance(rank, Value) and not (rank.type.is_scalar and rank.dtype.is_int()):
            raise self.error(f"kit.{what}: the CTA rank must be an int scalar, got "
                             f"{describe(rank)}")
        return self.cast(rank, int32) if isinstance(rank, Value) else \
            self.constant(int(rank), int32)

    @typing_rule("cluster_arrive")
    def cluster_arrive(self, bar: Any, rank: Any) -> None:
        """kit.mbarrier_arrive(bar, cta=rank): one arrival (per warpgroup, as the local
        arrive) on CTA `rank`'s copy of mbarrier `bar`, releasing at cluster scope where
        a peer may read this CTA's plain writes (frontend/cluster_scope.py)."""
        if not isinstance(bar, Value) or bar.dtype is not mbarrier or bar.shape != ():
            raise self.error(f"kit.mbarrier_arrive needs one mbarrier (bars[s]), got "
                             f"{describe(bar)}")
        if isinstance(rank, Value) and not (rank.type.is_scalar and rank.dtype.is_int()):
            raise self.error(f"kit.mbarrier_arrive: cta= takes an int scalar (a CTA rank in "
                             f"the cluster), got {describe(rank)}")
        r = self.cast(rank, int32) if isinstance(rank, Value) else \
            self.constant(int(rank), int32)
        self.emit("cluster_arrive", [bar, r], [])

    @typing_rule("cluster_load")
    def cluster_load(self, src: Any, rank: Any) -> Value:
        """kit.cluster_load(a[s], rank): CTA `rank`'s copy of shared tile a[s] into
        registers (distributed shared memory)."""
        r = self._peer(src, rank, "cluster_load")
        self._pow2_smem(src, "kit.cluster_load from")
        return self.emit1("cluster_load", [src, r], TileType(src.dtype, src.shape))

    @typing_rule("cluster_store")
    def cluster_store(self, dst: Any, rank: Any, value: Any) -> None:
        """kit.cluster_store(a[s], rank, x): register tile x into CTA `rank`'s copy of
        shared tile a[s]."""
        r = self._peer(dst, rank, "cluster_store")
        self._pow2_smem(dst, "kit.cluster_store into")
        if not isinstance(value, Value):
            value = self.full(dst.shape, value, dst.dtype)
        if value.type.is_shared:
            raise self.error("kit.cluster_store takes a register tile, got a shared tile",
                             "kit.load it first")
        if value.type.is_scalar:
            value = self.broadcast_to(value, dst.shape)
        if value.shape != dst.shape:
            raise self.error(f"kit.cluster_store: a tile of shape {list(value.shape)} does "
                             f"not fit the shared tile of shape {list(dst.shape)}")
        if value.dtype is not dst.dtype:
            value = self.cast(value, dst.dtype)
        self.emit("cluster_store", [dst, r, value], [])


@call_rule(("cluster_id", "cluster_ctaid"), lambda axis=0: None)
def _cluster_index(c: Call) -> Any:
    axis = c.const("axis")
    if axis not in (0, 1, 2):
        raise c.err(f"kit.{c.name}: axis must be 0, 1 or 2, got {axis!r}")
    return c.b.cluster_index(c.name, axis)


@call_rule(("cluster_ctarank", "num_cluster_ctas"), lambda: None)
def _cluster_rank(c: Call) -> Any:
    return c.b.cluster_rank(c.name)


@call_rule("cluster_barrier", lambda: None)
def _cluster_barrier(c: Call) -> Any:
    return c.b.cluster_barrier()


@call_rule("cluster_load", lambda src, rank: None)
def _cluster_load(c: Call) -> Any:
    return c.b.cluster_load(c["src"], c["rank"])


@call_rule("cluster_store", lambda dst, rank, value: None)
def _cluster_store(c: Call) -> Any:
    c.b.cluster_store(c["dst"], c["rank"], c["value"])
    return None


def check_cluster_ops(fn: Function, cluster: tuple | None, arch: str | None) -> None:
    """Cluster ops need a `cluster=` launch and a Hopper (sm_90+) target: raised at the
    first such op's line. `cluster_barrier` inside a warpgroup role would wait for threads
    that never arrive (every thread of the cluster arrives), so it is refused there."""
    ops = [op for op in fn.walk() if op.name in CLUSTER_OPS or
           op.name == "tma_load" and "multicast" in op.attrs]
    if not ops:
        return
    op = ops[0]
    if cluster is None:
        raise CompileError(f"kit.{op.name}{' (multicast)' if op.name == 'tma_load' else ''} "
                           "needs a launch in thread-block clusters, and "
                           f"kernel '{fn.name}' is launched without one",
                           op.loc, hint="launch with cluster=(2, 1, 1) (or another shape): "
                           "kernel[grid](..., cluster=(2, 1, 1))")
    if arch is not None and not arch.startswith(("sm_9", "sm_1")):
        raise CompileError(f"kit.{op.name}: thread-block clusters need sm_90 or newer; the "
                           f"target is {arch}", op.loc)
    for role in (o for o in fn.walk() if o.name == "if" and o.attrs.get("roles")):
        for g in role.regions:
            for inner in walk_block(g):
                if inner.name == "cluster_barrier":
                    raise CompileError("kit.cluster_barrier inside a warpgroup role is not "
                                       "supported yet: every thread of every CTA of the "
                                       "cluster must arrive", inner.loc,
                                       hint="call it outside `if kit.warpgroup_id() ...`")
