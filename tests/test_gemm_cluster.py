"""The persistent GEMM on 2-CTA clusters with TMA multicast of B (kitjit/nn/matmul_cluster.py):
interpreter runs at ragged sizes (a cluster's CTAs co-scheduled, races and hangs reported,
outputs poisoned with NaN, float64 references), sm_90a SASS (HGMMA, UTMALDG with MULTICAST,
remote mbarrier arrivals, no spills) and GPU runs against float64 (`-m gpu`)."""

from __future__ import annotations

import pytest
import torch
from hopper_helpers import SMEM_MAX, assert_rows_close, is_poisoned, needs_sass, poison

from kitjit.nn.matmul_cluster import matmul_cluster, matmul_cluster_kernel
from kitjit.testing import has_gpu

__all__ = ["poison"]  # the fixture, imported for the tests here

SMALL = dict(BM=64, BN=64, BK=32, STAGES=3, num_warps=4)


def _randn(*shape, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    return torch.where(x.abs() < 1e-3, 0.5, x).to(torch.bfloat16).to(device)


def _run(M, N, K, trans_b, poison, device="cpu", fn=matmul_cluster, **kw):
    """fn(a, b, trans_b, **kw) against float64 on fresh bf16 inputs (no near-zeros), the
    output poisoned before (test_gemm_splitk.py runs its GEMMs through this too)."""
    a, b = _randn(M, K, device=device), _randn(K, N, seed=1, device=device)
    out = fn(a, b.t().contiguous() if trans_b else b, trans_b, **kw)
    assert is_poisoned(out, poison)          # the output started as NaN
    assert_rows_close(out, a.double() @ b.double(), 1e-2, f"{M}x{N}x{K} trans_b={trans_b}")


@pytest.mark.parametrize("M,N,K,trans_b,kw", [
    # an odd number of row blocks: the last pair's second tile lies past M (zero A,
    # clipped stores); N and K ragged; 2 clusters walk 6 pairs, the ring across pairs
    (200, 136, 96, False, {}),
    (200, 136, 96, True, dict(LAG=2)),
    (200, 136, 96, False, dict(TMA_STORE=False)),
    # K shorter than the ring (one k-step per pair): the prologue spans pairs
    (130, 200, 32, True, dict(clusters=1)),
    (72, 264, 40, False, dict(clusters=3, LAG=2)),
    # 128 columns of B: each CTA multicasts one of its two 128-byte column chunks (64
    # columns fewer rows split instead); B in two half tiles and two MMAs (SPLIT_B=False)
    (200, 264, 96, False, dict(BN=128)),
    (200, 264, 96, True, dict(BN=128, SPLIT_B=False)),
    (200, 136, 96, False, dict(SPLIT_B=False, TMA_STORE=False)),
    # whole groups of pair-rows: the origin of the pair after the last has no rows left
    (256, 128, 64, False, dict(clusters=1, GROUP=2)),
])
def test_cluster_gemm_persistent_interpreter(monkeypatch, poison, M, N, K, trans_b, kw):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    _run(M, N, K, trans_b, poison, **dict(SMALL, **kw))


def test_cluster_gemm_persistent_two_warpgroups_interpreter(monkeypatch, poison):
    """8 warps (two warpgroups per CTA, 4 arrivals per empty barrier), 128-row tiles."""
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    _run(300, 136, 96, False, poison, clusters=1, **dict(SMALL, BM=128, num_warps=8))


WS = dict(SMALL, BM=128, num_warps=12)


@pytest.mark.parametrize("M,N,K,trans_b,kw", [
    (520, 136, 96, False, {}),                       # 2 clusters, 3 pairs, the last ragged
    (300, 264, 96, True, dict(BN=128, clusters=1)),   # B's column chunks split
    (130, 200, 32, False, dict(clusters=1)),          # K shorter than the ring
])
def test_cluster_gemm_ws_interpreter(monkeypatch, poison, M, N, K, trans_b, kw):
    """The warp-specialized kernel: the producer role waits for both CTAs' releases, the
    consumer roles only for data (roles and clusters co-scheduled in the interpreter)."""
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    _run(M, N, K, trans_b, poison, ws=True, **dict(WS, **kw))


def _sass_ops(trans_b, lag, split_b):
    from kitjit.tools import disassemble, sass_opcodes

    ck = matmul_cluster_kernel.compile(
        [("*bf16", 16)] * 3 + [("i32", 16)] * 3,
        (128, 256, 64, 4, 8, 2, trans_b, True, lag, split_b), 8, "sm_90a", cluster=(2, 1, 1))
    return ck, disassemble(ck.asm["cubin"]), sass_opcodes(disassemble(ck.asm["cubin"]))


@needs_sass
@pytest.mark.parametrize("trans_b,lag,split_b", [(False, 1, True), (True, 2, True),
                                                 (False, 1, False)])
def test_cluster_gemm_persistent_sass(trans_b, lag, split_b):
    ck, text, ops = _sass_ops(trans_b, lag, split_b)
    assert ck.metadata["spills"] == 0 and ck.metadata["shared"] <= SMEM_MAX
    ptx = ck.asm["ptx"]
    assert ".reqnctapercluster 2, 1, 1" in ptx
    if split_b:  # one 64x256 warpgroup MMA per 16 of K over the whole B tile, as the example
        assert text.count("HGMMA.64x256x16.F32.BF16") == 4, text.count("HGMMA")
        # each CTA copies its half of B: 2 of the 4 column chunks, or 128 of the 256 rows
        # of B [N, K]; the stage expects A (16 KB) and both halves of B (32 KB)
        fills = 4 - lag + 3                  # the prologue's and refill's three sites
        assert ptx.count("multicast::cluster [") == fills * (1 if trans_b else 2)
        assert "popc.b32" in ptx and "49152;" in ptx
    else:        # B's two column halves: two 64x128 MMAs per 16 of K
        assert text.count("HGMMA.64x128x16.F32.BF16") == 8, text.count("HGMMA")
    assert "UTMALDG.2D.MULTICAST" in ops and "UTMALDG.2D" in ops   # B multicast, A own
    assert "SYNCS.ARRIVE.TRANS64.RED.A1T0" in ops                  # remote empty arrivals
    assert "UCGABAR_ARV" in ops and "UCGABAR_WAIT" in ops
    assert "UTMASTG.2D" in ops
    loop = ptx[ptx.index("wgmma.wait_group.sync.aligned " + ("1" if split_b else "3")):]
    # no CTA-wide bar.sync between the MMAs and the next refill: the empty barrier orders it
    assert loop.index("mbarrier.arrive.shared::cluster") < loop.index("multicast::cluster")
    assert "bar.sync" not in loop[:loop.index("multicast::cluster")]
    assert_no_fences_per_step(ptx, text)


def assert_no_fences_per_step(ptx: str, sass: str) -> None:
    """The CTAs share data through TMA only: remote arrivals release and waits acquire at
    CTA scope (frontend/cluster_scope.py), so the k-loop has no MEMBAR.ALL.GPU / ERRBAR
    before each arrival nor CCTL.IVALL after each wait (H200, session 9: 0.65x cuBLAS
    with them); the only fences left are the two cluster barriers'."""
    assert ".release.cluster.shared::cluster" not in ptx
    assert "try_wait.parity.acquire.cluster" not in ptx
    barriers = sass.count("UCGABAR_ARV")
    assert barriers == 2, barriers
    assert sass.count("MEMBAR.ALL.GPU") == barriers and sass.count("CCTL.IVALL") == barriers
    assert sass.count("CGAERRBAR") == barriers


@needs_sass
@pytest.mark.parametrize("trans_b", [False, True])
def test_cluster_gemm_ws_sass(trans_b):
    from kitjit.nn.matmul_cluster import matmul_cluster_ws_kernel
    from kitjit.tools import disassemble, sass_opcodes

    ck = matmul_cluster_ws_kernel.compile(
        [("*bf16", 16)] * 3 + [("i32", 16)] * 3, (128, 256, 64, 4, 8, trans_b, True), 12,
        "sm_90a", cluster=(2, 1, 1))
    text = disassemble(ck.asm["cubin"])
    ops = sass_opcodes(text)
    assert ck.metadata["spills"] == 0 and ck.metadata["shared"] <= SMEM_MAX
    assert text.count("HGMMA.64x256x16.F32.BF16") == 4
    assert text.count("WARPGROUP.ARRIVE") == 1          # the four HGMMAs of a k-step async
    assert {"UTMALDG.2D.MULTICAST", "UTMALDG.2D", "SYNCS.ARRIVE.TRANS64.RED.A1T0",
            "USETMAXREG.DEALLOC.CTAPOOL", "USETMAXREG.TRY_ALLOC.CTAPOOL", "UTMASTG.2D"} <= \
        set(ops), sorted(ops)
    assert_no_fences_per_step(ck.asm["ptx"], text)


# ---------------------------------------------------------------- GPU
gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("lag", [1, 2])
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (4096, 4096, 512), (300, 520, 4096),
                                   (8192, 2048, 64), (2176, 4352, 1032)])
def test_cluster_gemm_persistent_gpu(poison, trans_b, lag, M, N, K):
    _run(M, N, K, trans_b, poison, device="cuda", LAG=lag)


@pytest.mark.gpu
@gpu
def test_cluster_gemm_persistent_gpu_variants(poison):
    """Direct stores, few clusters (many pairs each), B in two half tiles, GROUP 4."""
    _run(1000, 1000, 1000, False, poison, device="cuda", TMA_STORE=False)
    _run(3000, 1000, 1000, True, poison, device="cuda", clusters=3)
    _run(1000, 1000, 1000, False, poison, device="cuda", SPLIT_B=False)
    _run(1000, 1000, 1000, True, poison, device="cuda", SPLIT_B=False, LAG=2)
    _run(2000, 3000, 520, False, poison, device="cuda", GROUP=4)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (4096, 4096, 512), (300, 520, 4096),
                                   (8192, 2048, 64)])
def test_cluster_gemm_ws_gpu(poison, trans_b, M, N, K):
    _run(M, N, K, trans_b, poison, device="cuda", ws=True)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("ws", [False, True])
def test_cluster_gemm_repeatable_gpu(ws):
    """The refill's write-after-read order rests on CTA-scope arrivals (no fence per
    k-step, frontend/cluster_scope.py): a multicast landing in a stage a peer still reads
    would change the sum, so repeated runs (many k-steps, every SM) must agree bit for
    bit, and with float64."""
    a, b = _randn(4096, 4096, device="cuda"), _randn(4096, 2048, seed=1, device="cuda")
    first = matmul_cluster(a, b, ws=ws)
    assert_rows_close(first, a.double() @ b.double(), 1e-2, f"ws={ws}")
    for _ in range(20):
        assert torch.equal(matmul_cluster(a, b, ws=ws), first)
