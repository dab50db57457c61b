"""Split-K with the parts added in distributed shared memory (kitjit/nn/matmul_splitk.py,
examples/matmul.py's split_mode="cluster" / "cluster-a"): interpreter runs at ragged sizes
(a cluster's CTAs co-scheduled, races reported, outputs poisoned with NaN, float64
references), sm_90a SASS (HGMMA, UTMALDG multicast where A is shared, no spills) and GPU
runs against float64 (`-m gpu`)."""

from __future__ import annotations

import pytest
import torch
from hopper_helpers import SMEM_MAX, needs_sass, poison
from test_gemm_cluster import SMALL
from test_gemm_cluster import _run as run_gemm

from kitjit.nn.matmul_splitk import (
    matmul_splitk_cluster,
    matmul_splitk_cluster_kernel,
    splitk_plan,
    stages_that_fit,
)
from kitjit.testing import has_gpu

__all__ = ["poison"]  # the fixture, imported for the tests here

def _run(M, N, K, trans_b, poison, device="cpu", fn=matmul_splitk_cluster, **kw):
    run_gemm(M, N, K, trans_b, poison, device, fn, **kw)


@pytest.mark.parametrize("M,N,K,trans_b,kw", [
    # two parts, N and K ragged (the last part's last k-step partly past K)
    (40, 72, 200, True, dict(BN=32, P=2, CN=1)),
    # 128-row tiles (two warpgroups, 4 arrivals on `empty`), 2 row blocks, A shared by 2
    (130, 200, 96, False, dict(BM=128, P=2, CN=2, STAGES=2, num_warps=8)),
    # 4 parts x 4 sharers: the 4th column block lies past N; parts past K (zeros)
    (16, 136, 64, False, dict(BK=16, P=4, CN=4)),
    # 8 parts of 8 columns each, four of them wholly past K
    (16, 72, 64, True, dict(BK=16, P=8, CN=1)),
    # refills one step later (LAG 2), A shared by 2
    (70, 200, 520, True, dict(P=2, CN=2, STAGES=4, LAG=2)),
    # no split (no chunks traded), A shared by 2
    (40, 72, 200, False, dict(BN=32, P=1, CN=2)),
])
def test_splitk_cluster_interpreter(monkeypatch, poison, M, N, K, trans_b, kw):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    _run(M, N, K, trans_b, poison, **dict(SMALL, **kw))


def test_splitk_cluster_example_switch_interpreter(monkeypatch, poison):
    """examples/matmul.py routes the shapes it splits to the cluster kernel when asked."""
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    import matmul as ex

    assert ex.splitk_for(16, 128, 2048, ex.num_sms(torch.device("cpu"))) == 2
    _run(16, 128, 2048, True, poison, fn=ex.matmul, split_mode="cluster-a")
    with pytest.raises(ValueError, match="split_mode"):
        ex.matmul(torch.ones(8, 8), torch.ones(8, 8), split_mode="slabs")


def test_splitk_plan():
    """Parts fill the SMs (H100/H200: 132) without a second wave; A sharers divide the
    column blocks; a bad part count is refused before any launch."""
    assert splitk_plan(128, 6144, 4096, 132)["P"] == 2          # 48 blocks -> 96 CTAs
    assert splitk_plan(128, 4096, 4096, 132)["P"] == 4          # 32 -> 128
    assert splitk_plan(16, 8192, 28672, 132)["BM"] == 64
    p = splitk_plan(128, 4096, 4096, 132, share_a=True)
    assert (p["P"], p["CN"]) == (4, 2)
    assert splitk_plan(128, 10240, 8192, 132)["P"] == 1         # 80 blocks: no split
    # the ring takes what the P - 1 fp32 chunks a CTA is sent leave of 227 KB
    assert [stages_that_fit(128, 128, 64, p) for p in (1, 2, 4, 8)] == [6, 6, 5, 5]
    assert splitk_plan(128, 4096, 4096, 132)["STAGES"] == 5                  # P 4
    with pytest.raises(ValueError, match="P=3"):
        matmul_splitk_cluster(torch.ones(16, 64), torch.ones(64, 64), P=3, CN=1)


def _sass(BM, BN, BK, STAGES, P, CN, trans_b, num_warps):
    from kitjit.tools import disassemble, sass_opcodes

    amask = sum(1 << (P * j) for j in range(CN))
    ck = matmul_splitk_cluster_kernel.compile(
        [("*bf16", 16)] * 3 + [("i32", 16)] * 3,
        (BM, BN, BK, STAGES, P, CN, amask, num_warps // 4, trans_b, 256, 1), num_warps,
        "sm_90a", cluster=(P * CN, 1, 1))
    text = disassemble(ck.asm["cubin"])
    return ck, text, sass_opcodes(text)


@needs_sass
@pytest.mark.parametrize("BM,STAGES,P,CN,trans_b,num_warps", [
    (128, 4, 2, 1, True, 8), (128, 4, 4, 2, True, 8), (64, 6, 4, 2, False, 4),
    (128, 6, 2, 4, True, 8), (128, 5, 8, 1, True, 8)])   # the plan's stages fit
def test_splitk_cluster_sass(BM, STAGES, P, CN, trans_b, num_warps):
    ck, text, ops = _sass(BM, 128, 64, STAGES, P, CN, trans_b, num_warps)
    assert ck.metadata["spills"] == 0 and ck.metadata["shared"] <= SMEM_MAX
    assert f".reqnctapercluster {P * CN}, 1, 1" in ck.asm["ptx"]
    assert text.count("HGMMA.64x128x16.F32.BF16") == 4       # one k-step of 64
    assert text.count("WARPGROUP.ARRIVE") == 1               # the four HGMMAs async
    assert ("UTMALDG.2D.MULTICAST" in ops) == (CN > 1)       # A shared by multicast
    assert ("SYNCS.ARRIVE.TRANS64.RED.A1T0" in ops) == (CN > 1)   # remote releases
    assert "st.shared::cluster" in ck.asm["ptx"]             # the parts pushed to peers
    assert "UCGABAR_ARV" in ops and "UCGABAR_WAIT" in ops


# ---------------------------------------------------------------- GPU
gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("share_a", [False, True])
@pytest.mark.parametrize("M,N,K,trans_b", [
    (16, 4096, 4096, True), (128, 6144, 4096, True), (128, 4096, 14336, True),
    (100, 1000, 1000, False), (77, 1000, 2056, True), (200, 520, 4104, False)])
def test_splitk_cluster_gpu(poison, share_a, M, N, K, trans_b):
    _run(M, N, K, trans_b, poison, device="cuda", share_a=share_a)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kw", [dict(P=8, CN=1), dict(P=2, CN=4), dict(P=4, CN=2, L2_B=0),
                                dict(P=1, CN=2), dict(P=2, CN=2, LAG=2, STAGES=5)])
def test_splitk_cluster_gpu_configs(poison, kw):
    _run(128, 4096, 4096, True, poison, device="cuda", **kw)
    _run(16, 1104, 3000, False, poison, device="cuda", **kw)   # 9 column blocks


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", ["cluster", "cluster-a"])
def test_splitk_cluster_example_gpu(poison, mode):
    import matmul as ex

    _run(128, 4096, 4096, True, poison, device="cuda", fn=ex.matmul, split_mode=mode)
    _run(16, 6144, 4096, True, poison, device="cuda", fn=ex.matmul, split_mode=mode)
