"""Thread-block clusters (Hopper, sm_90+): a kernel launched with `cluster=(x, y, z)` runs
its programs in groups of x*y*z CTAs that the GPU schedules together on one GPC. These
names say where a CTA is in its cluster and synchronize the cluster's CTAs (CuTe calls
them cluster_id_in_grid, block_id_in_cluster, block_rank_in_cluster, cluster_sync)."""

from __future__ import annotations

from .base import builtin


@builtin
def cluster_id(axis):
    """The index of this CTA's cluster in the grid along axis 0, 1 or 2
    (`program_id(axis) // cluster[axis]`; PTX %clusterid)."""


@builtin
def cluster_ctaid(axis):
    """The index of this CTA within its cluster along axis 0, 1 or 2
    (`program_id(axis) % cluster[axis]`; PTX %cluster_ctaid)."""


@builtin
def cluster_ctarank():
    """This CTA's rank in its cluster, 0 .. num_cluster_ctas() - 1, x fastest
    (PTX %cluster_ctarank)."""


@builtin
def num_cluster_ctas():
    """The number of CTAs in a cluster, x*y*z of the `cluster=` launch option."""


@builtin
def cluster_barrier():
    """Waits until every thread of every CTA of the cluster has arrived; the shared and
    global memory writes before it are visible to the cluster after it
    (barrier.cluster.arrive.release + barrier.cluster.wait.acquire). Every CTA must call it
    the same number of times, outside warpgroup roles."""


@builtin
def cluster_load(src, rank):
    """Distributed shared memory: CTA `rank`'s copy of shared tile `src` (a stage a[s] of a
    kit.shared allocation, which every CTA of the cluster makes alike) into registers
    (mapa + ld.shared::cluster). Order it after the owner's writes with kit.cluster_barrier."""


@builtin
def cluster_store(dst, rank, value):
    """Distributed shared memory: register tile `value` into CTA `rank`'s copy of shared
    tile `dst` (mapa + st.shared::cluster); visible to that CTA after the next
    kit.cluster_barrier."""
