"""Thread-block clusters (`cluster=(x, y, z)`): the cluster ops in the interpreter (a
cluster's CTAs co-scheduled, distributed shared memory, races and deadlocks of the cluster
barrier), compile errors for misuse, sm_90a PTX/SASS checks, and GPU runs (`-m gpu`)
against float64 references."""

from __future__ import annotations

import pytest
import torch
from kitjit.frontend.errors import CompileError

import kitjit as kit
from kitjit.interpreter import DeadlockError, RaceError
from kitjit.testing import has_gpu


@kit.jit
def where_am_i(Out, BLOCK: kit.constexpr):
    """Each program writes its cluster coordinates, packed in one int per lane."""
    offs = kit.arange(0, BLOCK)
    v = (kit.cluster_ctarank() * 100000 + kit.cluster_id(0) * 10000 + kit.cluster_id(1) * 1000
         + kit.cluster_ctaid(0) * 100 + kit.cluster_ctaid(1) * 10 + kit.num_cluster_ctas())
    kit.cluster_barrier()
    pid = kit.program_id(1) * kit.num_programs(0) + kit.program_id(0)
    kit.store(Out + pid * BLOCK + offs, v + offs * 0)


def where_ref(grid, cluster):
    gx, gy = grid
    cx, cy = cluster
    out = torch.empty(gy, gx, dtype=torch.int32)
    for y in range(gy):
        for x in range(gx):
            rank = x % cx + (y % cy) * cx
            out[y, x] = (rank * 100000 + x // cx * 10000 + y // cy * 1000 + x % cx * 100
                         + y % cy * 10 + cx * cy)
    return out.reshape(-1)


@kit.jit
def ring(X, Out, M, N, BM: kit.constexpr, BN: kit.constexpr, PUSH: kit.constexpr):
    """Each CTA's rows go to the next CTA of its cluster through distributed shared memory:
    read from the peer (PUSH=False) or written into the peer's tile (PUSH=True)."""
    pid = kit.program_id(0)
    rows = pid * BM + kit.arange(0, BM)[:, None]
    cols = kit.arange(0, BN)[None, :]
    mask = (rows < M) & (cols < N)
    t = kit.shared((BM, BN), X.dtype.element_ty)
    x = kit.load(X + rows * N + cols, mask=mask, other=0.0)
    n = kit.num_cluster_ctas()
    r = kit.cluster_ctarank()
    if PUSH:
        kit.cluster_barrier()  # every peer's tile exists before anyone writes into it
        kit.cluster_store(t, (r + 1) % n, x)
        kit.cluster_barrier()
        y = kit.load(t)
    else:
        kit.store(t, x)
        kit.cluster_barrier()
        y = kit.cluster_load(t, (r + n - 1) % n)
        kit.cluster_barrier()  # no CTA leaves while a peer may still read its tile
    # CTA r now holds the rows of CTA r - 1 of its cluster: write them where they came from
    src = pid - r + (r + n - 1) % n
    srows = src * BM + kit.arange(0, BM)[:, None]
    kit.store(Out + srows * N + cols, (y * 2).to(Out.dtype.element_ty),
              mask=(srows < M) & (cols < N))


@kit.jit
def racy(X, Out, BM: kit.constexpr, BN: kit.constexpr, WHICH: kit.constexpr):
    pid = kit.program_id(0)
    rows = kit.arange(0, BM)[:, None]
    cols = kit.arange(0, BN)[None, :]
    t = kit.shared((BM, BN), kit.float32)
    kit.cluster_barrier()
    r = kit.cluster_ctarank()
    if WHICH == 0:  # rank 0 writes its tile, rank 1 reads it: no barrier in between
        kit.store(t, kit.load(X + (pid * BM + rows) * BN + cols))
        y = kit.cluster_load(t, 0)
    else:  # both CTAs write into rank 0's tile
        y = kit.load(X + (pid * BM + rows) * BN + cols)
        kit.cluster_store(t, 0, y)
    kit.cluster_barrier()
    kit.store(Out + (pid * BM + rows) * BN + cols, y + r)


@kit.jit
def handoff(X, Out, BM: kit.constexpr, BN: kit.constexpr, WAIT: kit.constexpr):
    """Each CTA writes its rows into the next CTA's tile and arrives on that CTA's mbarrier
    (cluster scope); each waits on its own barrier, then reads what it was handed."""
    pid = kit.program_id(0)
    rows = kit.arange(0, BM)[:, None]
    cols = kit.arange(0, BN)[None, :]
    t = kit.shared((BM, BN), kit.float32)
    ready = kit.mbarriers(1)
    kit.cluster_barrier()  # every CTA's tile and barrier exist
    n = kit.num_cluster_ctas()
    r = kit.cluster_ctarank()
    kit.cluster_store(t, (r + 1) % n, kit.load(X + (pid * BM + rows) * BN + cols))
    kit.mbarrier_arrive(ready[0], cta=(r + 1) % n)
    if WAIT:
        kit.mbarrier_wait(ready[0], 0)
    y = kit.load(t)
    src = pid - r + (r + n - 1) % n
    kit.store(Out + (src * BM + rows) * BN + cols, y + 1.0)
    kit.cluster_barrier()


@kit.jit
def mcast(X, Out, H: kit.constexpr, BN: kit.constexpr, NC: kit.constexpr):
    """Each CTA of a cluster of NC loads its H-row slice of the cluster's rows by TMA and
    multicasts it to every CTA of the cluster; each then writes the cluster's NC*H rows."""
    pid = kit.program_id(0)
    r = kit.cluster_ctarank()
    t = kit.shared((NC, H, BN), X.dtype.element_ty)
    ready = kit.mbarriers(1)
    kit.cluster_barrier()  # every CTA's tiles and barrier exist before copies land in them
    row0 = kit.cluster_id(0) * (NC * H)
    kit.tma_load(t[r], X, (row0 + r * H, 0), ready[0], multicast=(1 << NC) - 1)
    kit.mbarrier_wait(ready[0], 0)
    rows = kit.arange(0, H)[:, None]
    cols = kit.arange(0, BN)[None, :]
    for i in kit.static_range(NC):
        kit.store(Out + (pid * NC * H + i * H + rows) * BN + cols, kit.load(t[i]))
    kit.cluster_barrier()  # no CTA leaves while its copies may still land in a peer


@kit.jit
def mcast_split(X, Out, R: kit.constexpr, C: kit.constexpr, NC: kit.constexpr,
                SKIP: kit.constexpr):
    """Every CTA of a cluster of NC needs the cluster's R x C tile of X: each copies its
    part of it (split=True), multicast to all; each then writes the whole tile. SKIP: rank
    1 never copies its part (the others wait for its bytes forever)."""
    t = kit.shared((R, C), X.dtype.element_ty)
    ready = kit.mbarriers(1)
    kit.cluster_barrier()
    if SKIP:
        if kit.cluster_ctarank() != 1:
            kit.tma_load(t, X, (kit.cluster_id(0) * R, 0), ready[0], multicast=(1 << NC) - 1,
                         split=True)
    else:
        kit.tma_load(t, X, (kit.cluster_id(0) * R, 0), ready[0], multicast=(1 << NC) - 1,
                     split=True)
    kit.mbarrier_wait(ready[0], 0)
    rows = kit.program_id(0) * R + kit.arange(0, R)[:, None]
    kit.store(Out + rows * C + kit.arange(0, C)[None, :], kit.load(t))
    kit.cluster_barrier()


@kit.jit
def split_alone(X):
    t = kit.shared((16, 64), X.dtype.element_ty)
    ready = kit.mbarriers(1)
    kit.tma_load(t, X, (0, 0), ready[0], split=True)
    kit.mbarrier_wait(ready[0], 0)


def _split_ref(x, grid, nc, r):
    rows = torch.zeros(grid // nc * r, x.shape[1], dtype=torch.float64)
    n = min(x.shape[0], rows.shape[0])
    rows[:n] = x.double()[:n]
    return rows.view(grid // nc, r, -1).repeat_interleave(nc, dim=0).reshape(grid * r, -1)


# (rows, cols, CTAs): 128-byte rows cut along rows; 256/512-byte rows along 128-byte chunks
SPLITS = [(32, 64, 2), (16, 128, 2), (16, 256, 4), (64, 32, 4)]


@pytest.mark.parametrize("R,C,nc", SPLITS)
def test_tma_multicast_split_interpreter(monkeypatch, R, C, nc):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    M = 3 * R + 5   # the last cluster's tile runs past the end: zeros
    x = _randn(M, C, dtype=torch.bfloat16)
    grid = 4 * nc
    out = torch.full((grid * R, C), float("nan"), dtype=torch.bfloat16)
    mcast_split[(grid,)](x, out, R=R, C=C, NC=nc, SKIP=False, cluster=(nc,))
    torch.testing.assert_close(out.double(), _split_ref(x, grid, nc, R), rtol=0, atol=0)


def test_tma_multicast_split_errors(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    x = torch.zeros(64, 64, dtype=torch.bfloat16)
    out = torch.zeros(64 * 8, 64, dtype=torch.bfloat16)
    with pytest.raises(DeadlockError, match="ready"):    # rank 1's part never comes
        mcast_split[(4,)](x, out, R=32, C=64, NC=2, SKIP=True, cluster=(2,))
    with pytest.raises(CompileError, match="split=True cuts the tile among the CTAs of a "
                                           "multicast mask, and this load has none"):
        split_alone[(2,)](x, cluster=(2,))
    with pytest.raises(CompileError, match=r"cannot cut a \[8, 64\] tile \(bf16\) into 2"):
        mcast_split[(2,)](x, out, R=8, C=64, NC=2, SKIP=False, cluster=(2,))


@kit.jit
def mcast_only(X):
    t = kit.shared((16, 32), X.dtype.element_ty)
    ready = kit.mbarriers(1)
    kit.tma_load(t, X, (0, 0), ready[0], multicast=3)
    kit.mbarrier_wait(ready[0], 0)


@kit.jit
def extra_barrier(Out):
    if kit.cluster_ctarank() == 0:
        kit.cluster_barrier()
    kit.store(Out + kit.program_id(0), 1.0)


@kit.jit
def no_cluster(Out):
    kit.store(Out + kit.program_id(0), kit.cluster_ctarank())


def _randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    return torch.where(x.abs() < 1e-3, 0.5, x).to(dtype)


def _ring_ref(x, m_blocks, bm, cluster_n):
    """float64 reference: CTA r's rows come back from CTA r - 1 of the cluster, doubled."""
    return x.double() * 2


# ---------------------------------------------------------------- interpreter
@pytest.mark.parametrize("grid,cluster", [((4, 2), (2, 2)), ((6, 2), (1, 2)), ((4, 1), (4, 1))])
def test_cluster_ids_interpreter(monkeypatch, grid, cluster):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    out = torch.full((grid[0] * grid[1] * 16,), -1, dtype=torch.int32)
    where_am_i[grid](out, BLOCK=16, cluster=(*cluster, 1))
    assert torch.equal(out.view(-1, 16)[:, 0], where_ref(grid, cluster))
    assert torch.equal(out.view(-1, 16), out.view(-1, 16)[:, :1].expand(-1, 16))


@pytest.mark.parametrize("push", [False, True])
@pytest.mark.parametrize("cluster,M,N", [(2, 50, 24), (4, 100, 32)])
def test_dsmem_ring_interpreter(monkeypatch, push, cluster, M, N):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    BM, BN = 16, 32
    x = _randn(M, N, dtype=torch.bfloat16)
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    grid = -(-M // BM)
    grid = -(-grid // cluster) * cluster  # whole clusters (the last rows masked off)
    ring[(grid,)](x, out, M, N, BM=BM, BN=BN, PUSH=push, cluster=(cluster,))
    torch.testing.assert_close(out.double(), _ring_ref(x, grid, BM, cluster), rtol=0, atol=0)


@pytest.mark.parametrize("which,what", [(0, "CTA rank 0's shared tile.*reads"),
                                        (1, "writes CTA rank 0's shared tile.*writes")])
def test_missing_cluster_barrier_is_a_race(monkeypatch, which, what):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    x = _randn(2 * 16, 16)
    out = torch.full_like(x, float("nan"))
    with pytest.raises(RaceError, match=f"(?s){what}.*no kit.cluster_barrier in between"):
        racy[(2,)](x, out, BM=16, BN=16, WHICH=which, cluster=(2,))


@pytest.mark.parametrize("cluster", [2, 4])
def test_remote_mbarrier_arrive_interpreter(monkeypatch, cluster):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    x = _randn(2 * cluster * 16, 32)
    out = torch.full_like(x, float("nan"))
    handoff[(2 * cluster,)](x, out, BM=16, BN=32, WAIT=True, cluster=(cluster,))
    torch.testing.assert_close(out.double(), (x + 1).double(), rtol=0, atol=0)
    # without the wait: rank 1 (first to run on after the barrier) reads its tile before
    # rank 0 has written it
    with pytest.raises(RaceError, match="uninitialized shared memory|no kit.cluster_barrier"):
        handoff[(2 * cluster,)](x, out, BM=16, BN=32, WAIT=False, cluster=(cluster,))


def _mcast_ref(x, grid, nc, h):
    rows = torch.zeros(grid * h, x.shape[1], dtype=torch.float64)
    rows[:x.shape[0]] = x.double()[:grid * h]
    per_cluster = rows.view(grid // nc, nc * h, -1)
    return per_cluster.repeat_interleave(nc, dim=0).reshape(grid * nc * h, -1)


@pytest.mark.parametrize("nc,M", [(2, 50), (4, 100)])
def test_tma_multicast_interpreter(monkeypatch, nc, M):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    H, BN = 16, 32
    x = _randn(M, BN, dtype=torch.bfloat16)
    grid = -(-M // (nc * H)) * nc
    out = torch.full((grid * nc * H, BN), float("nan"), dtype=torch.bfloat16)
    mcast[(grid,)](x, out, H=H, BN=BN, NC=nc, cluster=(nc,))
    torch.testing.assert_close(out.double(), _mcast_ref(x, grid, nc, H), rtol=0, atol=0)


@kit.jit
def arrive_and_leave(Out, LAST_BARRIER: kit.constexpr):
    """Each CTA arrives on the next one's mbarrier and leaves (no wait for the arrivals)."""
    bar = kit.mbarriers(1)
    kit.cluster_barrier()  # every CTA's barrier exists
    kit.mbarrier_arrive(bar[0], cta=(kit.cluster_ctarank() + 1) % kit.num_cluster_ctas())
    kit.store(Out + kit.program_id(0), 1.0)
    if LAST_BARRIER:
        kit.cluster_barrier()


def test_remote_access_after_peer_ends(monkeypatch):
    """A CTA may end while a peer's arrival on its mbarrier is not ordered before its end
    (undefined on the GPU): a RaceError, whatever the schedule; a last cluster barrier
    orders it."""
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    out = torch.full((4,), float("nan"))
    with pytest.raises(RaceError, match=r"(?s)kit.mbarrier_arrive on CTA rank \d .*(is not "
                                        r"ordered before CTA rank \d ends|has already ended)"
                                        r".*end the kernel with kit.cluster_barrier"):
        arrive_and_leave[(4,)](out, LAST_BARRIER=False, cluster=(2,))
    arrive_and_leave[(4,)](out, LAST_BARRIER=True, cluster=(2,))
    assert torch.equal(out, torch.ones(4))


def test_cluster_barrier_deadlock(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    out = torch.full((4,), float("nan"))
    with pytest.raises(DeadlockError, match="(?s)CTA rank 1 ended.*rank 0 waits at "
                                            "kit.cluster_barrier"):
        extra_barrier[(4,)](out, cluster=(2, 1, 1))


def test_cluster_misuse_errors(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    out = torch.zeros(8, dtype=torch.int32)
    with pytest.raises(CompileError, match="kit.cluster_ctarank needs a launch in thread-block "
                                           "clusters") as e:
        no_cluster[(8,)](out)
    assert "test_clusters.py" in str(e.value)
    with pytest.raises(ValueError, match=r"grid \(3, 1, 1\) is not a whole number of clusters"):
        no_cluster[(3,)](out, cluster=(2,))
    for bad, msg in [((0, 1), "positive ints"), ([2, 1], "tuple"), ((4, 4, 2), "32 CTAs"),
                     ((1, 1, 1, 1), "1 to 3")]:
        with pytest.raises(ValueError, match=msg):
            no_cluster[(8,)](out, cluster=bad)
    with pytest.raises(ValueError, match="num_ctas=2 .*use cluster="):
        no_cluster[(8,)](out, num_ctas=2)
    x = torch.zeros(64, 32, dtype=torch.bfloat16)
    with pytest.raises(CompileError, match=r"kit.tma_load \(multicast\) needs a launch in "
                                           "thread-block clusters"):
        mcast_only[(2,)](x)


def test_cluster_needs_hopper_target():
    with pytest.raises(CompileError, match="thread-block clusters need sm_90 or newer; the "
                                           "target is sm_80"):
        no_cluster.compile([("*int32", 16)], (), 4, "sm_80", cluster=(2,))


# ---------------------------------------------------------------- sm_90a PTX / SASS
def _sass(ck):
    from kitjit.tools import disassemble, find_tool, sass_opcodes

    if find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not installed")
    return sass_opcodes(disassemble(ck.asm["cubin"]))


def test_cluster_entry_and_sass():
    ck = where_am_i.compile([("*int32", 16)], (16,), 4, "sm_90a", cluster=(2, 2, 1))
    ptx = ck.asm["ptx"]
    assert ".reqnctapercluster 2, 2, 1" in ptx and ".explicitcluster" in ptx
    for reg in ("%cluster_ctarank", "%clusterid.x", "%cluster_ctaid.y"):
        assert reg in ptx
    assert ck.metadata["cluster"] == [2, 2, 1] and ck.metadata["spills"] == 0
    ops = _sass(ck)
    assert "UCGABAR_ARV" in ops and "UCGABAR_WAIT" in ops
    other = where_am_i.compile([("*int32", 16)], (16,), 4, "sm_90a", cluster=(2, 1, 1))
    assert ".reqnctapercluster 2, 1, 1" in other.asm["ptx"]  # the cluster is in the key


def test_tma_multicast_sass():
    ck = mcast.compile([("*bf16", 16), ("*bf16", 16)], (16, 32, 2), 4, "sm_90a", cluster=(2,))
    ptx = ck.asm["ptx"]
    assert "multicast::cluster" in ptx and "fence.mbarrier_init.release.cluster" in ptx
    assert ck.metadata["spills"] == 0
    ops = _sass(ck)
    assert any(o.startswith("UTMALDG") and "MULTICAST" in o for o in ops), sorted(ops)


def test_remote_arrive_sass():
    ck = handoff.compile([("*fp32", 16), ("*fp32", 16)], (16, 32, True), 4, "sm_90a",
                         cluster=(2,))
    ptx = ck.asm["ptx"]
    assert "mbarrier.arrive.release.cluster.shared::cluster.b64" in ptx
    assert "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64" in ptx
    assert ck.metadata["spills"] == 0
    ops = _sass(ck)
    assert "SYNCS.ARRIVE.TRANS64.RED.A1T0" in ops  # the remote arrive (a reduction)
    assert "SYNCS.PHASECHK.TRANS64.TRYWAIT" in ops
    # one thread arrives for the warpgroup: every thread's DSMEM stores are ordered before
    # it by a bar.sync (frontend/arrive_sync.py); without it the peer read stale rows (H200,
    # clusters of 4 and 8, 2026-11-29)
    body = ptx[ptx.index("st.shared::cluster"):]
    assert body.index("bar.sync") < body.index("mbarrier.arrive.release.cluster")


@kit.jit
def arrive_after_barrier(X, Out, BN: kit.constexpr):
    t = kit.shared((16, BN), kit.float32)
    full = kit.mbarriers(1)
    kit.store(t, kit.load(X + kit.arange(0, 16)[:, None] * BN + kit.arange(0, BN)[None, :]))
    kit.barrier()
    kit.mbarrier_arrive(full[0])
    kit.mbarrier_wait(full[0], 0)
    kit.store(Out + kit.arange(0, 16)[:, None] * BN + kit.arange(0, BN)[None, :], kit.load(t))


def test_arrival_syncs_only_after_unsynced_smem_access():
    """A kit.barrier() before the arrival already orders the stores: no second bar.sync."""
    fn = arrive_after_barrier.build_ir([("*fp32", 16), ("*fp32", 16)], (32,), 4, tma=True)
    arrives = [op for op in fn.body.ops if op.name == "mbar_arrive"]
    assert arrives and not any(op.attrs.get("sync_first") for op in arrives)
    fn = handoff.build_ir([("*fp32", 16), ("*fp32", 16)], (16, 32, True), 4, tma=True,
                          cluster=(2,))
    assert [op.attrs.get("sync_first") for op in fn.body.ops if op.name == "cluster_arrive"] \
        == [True]


@kit.jit
def arrive_then_read(X, Out):
    """A remote arrival, then a plain global load: the peer's writes must be visible."""
    bar = kit.mbarriers(1)
    kit.cluster_barrier()
    kit.mbarrier_arrive(bar[0], cta=(kit.cluster_ctarank() + 1) % kit.num_cluster_ctas())
    kit.mbarrier_wait(bar[0], 0)
    kit.store(Out + kit.program_id(0), kit.load(X + kit.program_id(0)))
    kit.cluster_barrier()


def test_mbarrier_scope_follows_plain_peer_reads():
    """Cluster-scope arrivals and waits (a GPU-wide fence per arrival, an L1 invalidate per
    wait) only where a CTA may read a peer's plain writes: DSMEM, global loads
    (frontend/cluster_scope.py); TMA-only kernels and plain stores get CTA scope."""
    def scope(kernel, specs, consts):
        fn = kernel.build_ir(specs, consts, 4, tma=True, arch="sm_90a", cluster=(2,))
        return fn.attrs["mbar_scope"]

    f32 = ("*fp32", 16)
    assert scope(handoff, [f32, f32], (16, 32, True)) == "cluster"          # DSMEM
    assert scope(arrive_then_read, [f32, f32], ()) == "cluster"              # global load
    assert scope(arrive_and_leave, [f32], (True,)) == "cta"                  # stores only
    assert scope(mcast, [("*bf16", 16)] * 2, (16, 32, 2)) == "cta"           # TMA only
    assert "mbar_scope" not in arrive_after_barrier.build_ir([f32, f32], (32,), 4,
                                                             tma=True).attrs
    ck = arrive_and_leave.compile([f32], (True,), 4, "sm_90a", cluster=(2,))
    assert "mbarrier.arrive.shared::cluster.b64" in ck.asm["ptx"]


@pytest.mark.parametrize("push", [False, True])
def test_dsmem_sass(push):
    ck = ring.compile([("*bf16", 16), ("*bf16", 16), ("i32", 1), ("i32", 1)],
                      (16, 32, push), 4, "sm_90a", cluster=(2,))
    ptx = ck.asm["ptx"]
    assert "mapa.shared::cluster.u32" in ptx
    # stores: runs of 8 or 16 bytes side by side go as one vector of 32-bit words
    assert ("st.shared::cluster.v" if push else "ld.shared::cluster.b16") in ptx
    assert ck.metadata["spills"] == 0
    ops = _sass(ck)
    assert "UCGABAR_WAIT" in ops
    assert any(o.startswith("ST.E" if push else "LD.E") for o in ops), sorted(ops)


# ---------------------------------------------------------------- GPU
gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("grid,cluster", [((4, 2), (2, 2)), ((6, 2), (1, 2)), ((8, 1), (8, 1)),
                                          ((16, 1), (16, 1))])
def test_cluster_ids_gpu(grid, cluster):
    out = torch.full((grid[0] * grid[1] * 16,), -1, dtype=torch.int32, device="cuda")
    where_am_i[grid](out, BLOCK=16, cluster=(*cluster, 1))
    torch.cuda.synchronize()
    assert torch.equal(out.cpu().view(-1, 16)[:, 0], where_ref(grid, cluster))


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("push", [False, True])
@pytest.mark.parametrize("cluster,M,N", [(2, 50, 24), (4, 1000, 32), (8, 4000, 32)])
def test_dsmem_ring_gpu(push, cluster, M, N):
    BM, BN = 16, 32
    x = _randn(M, N, dtype=torch.bfloat16).cuda()
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    grid = -(-M // BM)
    grid = -(-grid // cluster) * cluster
    ring[(grid,)](x, out, M, N, BM=BM, BN=BN, PUSH=push, cluster=(cluster,))
    torch.testing.assert_close(out.double().cpu(), _ring_ref(x.cpu(), grid, BM, cluster),
                               rtol=0, atol=0)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("cluster", [2, 4, 8])
def test_remote_mbarrier_arrive_gpu(cluster):
    x = _randn(64 * cluster * 16, 32).cuda()
    out = torch.full_like(x, float("nan"))
    handoff[(64 * cluster,)](x, out, BM=16, BN=32, WAIT=True, cluster=(cluster,))
    torch.testing.assert_close(out.double().cpu(), (x + 1).double().cpu(), rtol=0, atol=0)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("nc,M", [(2, 50), (2, 5000), (4, 3000), (8, 4000)])
def test_tma_multicast_gpu(nc, M):
    H, BN = 16, 32
    x = _randn(M, BN, dtype=torch.bfloat16).cuda()
    grid = -(-M // (nc * H)) * nc
    out = torch.full((grid * nc * H, BN), float("nan"), dtype=torch.bfloat16, device="cuda")
    mcast[(grid,)](x, out, H=H, BN=BN, NC=nc, cluster=(nc,))
    torch.testing.assert_close(out.double().cpu(), _mcast_ref(x.cpu(), grid, nc, H), rtol=0,
                               atol=0)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("R,C,nc", SPLITS)
def test_tma_multicast_split_gpu(R, C, nc):
    M = 300 * R + 5
    x = _randn(M, C, dtype=torch.bfloat16).cuda()
    grid = 301 * nc
    out = torch.full((grid * R, C), float("nan"), dtype=torch.bfloat16, device="cuda")
    mcast_split[(grid,)](x, out, R=R, C=C, NC=nc, SKIP=False, cluster=(nc,))
    torch.testing.assert_close(out.double().cpu(), _split_ref(x.cpu(), grid, nc, R), rtol=0,
                               atol=0)


@pytest.mark.gpu
@gpu
def test_cluster_grid_checked_before_launch_gpu():
    out = torch.zeros(8, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"grid \(3, 1, 1\) is not a whole number"):
        no_cluster[(3,)](out, cluster=(2,))
    no_cluster[(8,)](out, cluster=(2,))
    torch.cuda.synchronize()
    assert out.cpu().tolist() == [0, 1] * 4


def test_cluster_launch_path_fake_driver():
    """On the GPU path (a fake driver): the cluster is part of the key, the launch goes
    through the cluster launch (cuLaunchKernelEx) with the grid checked first, and plain
    launches of the same kernel stay on cuLaunchKernel."""
    from kitjit.testing import FakeDriver

    out = torch.zeros(8, dtype=torch.int32)
    with FakeDriver(allow_cpu=True) as fake:
        no_cluster[(8,)](out, cluster=(2, 1, 1))
        no_cluster[(8,)](out, cluster=(4, 1, 1), launch_pdl=True)
        with pytest.raises(ValueError, match=r"grid \(6, 1, 1\) is not a whole number"):
            no_cluster[(6,)](out, cluster=(4,))
    assert [la["cluster"] for la in fake.launches] == [(2, 1, 1), (4, 1, 1)]
    assert [la["pdl"] for la in fake.launches] == [False, True]
    assert len(fake.compiles) == 3  # one per key: the cluster is part of it


# ---------------------------------------------------------------- the cluster GEMM
def _cluster_gemm():
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    import cluster_gemm

    return cluster_gemm


@pytest.mark.parametrize("share_b", [True, False])
def test_cluster_gemm_interpreter(monkeypatch, share_b):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    cg = _cluster_gemm()
    M, N, K = 100, 72, 80  # ragged in every dimension, several k-steps
    a, b = _randn(M, K, dtype=torch.bfloat16), _randn(K, N, dtype=torch.bfloat16, seed=1)
    c = cg.matmul_cluster(a, b, share_b, BM=64 if share_b else 128, BN=64, BK=32, STAGES=2,
                          num_warps=4)
    ref = a.double() @ b.double()
    assert ((c.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2


@pytest.mark.parametrize("share_b", [True, False])
def test_cluster_gemm_sass(share_b):
    cg = _cluster_gemm()
    ck = cg.cluster_matmul.compile(
        [("*bf16", 16)] * 3 + [("i32", 16)] * 3,
        (128, 256, 64, 4, share_b, 2) if share_b else (256, 128, 64, 4, share_b, 2), 8, "sm_90a",
        cluster=(2, 1, 1) if share_b else (1, 2, 1))
    assert ck.metadata["spills"] == 0
    ops = _sass(ck)
    assert any(o.startswith("UTMALDG") and "MULTICAST" in o for o in ops), sorted(ops)
    assert any(o.startswith("HGMMA") for o in ops)
    assert "SYNCS.ARRIVE.TRANS64.RED.A1T0" in ops


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("share_b", [True, False])
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (4096, 4096, 512), (300, 520, 4096)])
def test_cluster_gemm_gpu(share_b, M, N, K):
    cg = _cluster_gemm()
    a = _randn(M, K, dtype=torch.bfloat16).cuda()
    b = _randn(K, N, dtype=torch.bfloat16, seed=1).cuda()
    c = cg.matmul_cluster(a, b, share_b)
    ref = a.double() @ b.double()
    assert ((c.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2


def test_autotune_config_takes_a_cluster(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    c = kit.Config({"BLOCK": 16}, num_warps=4, cluster=(2, 1, 1))
    assert "cluster=(2, 1, 1)" in str(c) and c.all_kwargs()["cluster"] == (2, 1, 1)
    with pytest.raises(ValueError, match="Config: cluster="):
        kit.Config({"BLOCK": 16}, cluster=(32,))
    tuned = kit.autotune(configs=[kit.Config({"BLOCK": 16}, cluster=(2, 1, 1))],
                         key=[])(kit.jit(where_am_i.fn))
    out = torch.full((4 * 16,), -1, dtype=torch.int32)
    tuned[(4,)](out)
    assert torch.equal(out.view(-1, 16)[:, 0], where_ref((4, 1), (2, 1)))
