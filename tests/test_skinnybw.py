"""The weights' L2 promotion in the skinny GEMMs (helper "skinnybw", issues 14/15): a switch
of the TMA descriptor only. The interpreter's values are the same with and without it, and
the compiled kernel's TMA metadata (what the launcher encodes the descriptor from, and keys
its cache by) carries the promotion of the weights alone."""

from __future__ import annotations

import pathlib
import sys
import tempfile

import pytest
import torch
from hopper_helpers import needs_sass, poison
from test_graph_rmsfuse import build, fused_groups, load, smem

import kitjit as kit
from kitjit.graph import codegen_wgmma
from kitjit.graph.module import module_source

__all__ = ["poison"]  # the fixture, imported for the tests here

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


def _randn(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    return (x + torch.sign(x) * 0.25).to(torch.bfloat16)      # no near-zeros


# ---------------------------------------------------------------- examples/matmul.py
@pytest.mark.parametrize("M,N,K,cfg", [
    (16, 136, 128, {}),                                    # autotuned, no split
    (16, 128, 2048, {}),                                   # split 2, added in the kernel
    (72, 136, 200, dict(BM=128, BN=128, BK=64, STAGES=4, num_warps=8, SPLIT_K=2,
                        SLABS=True)),                      # slabs, ragged
    # 11 parts (benchmarks/skinnybw_bench.py's "fill" split: 48 x 11 = 4 x 132 programs),
    # the last part's k-steps partly past K
    (16, 136, 1304, dict(BM=64, BN=128, BK=64, STAGES=4, num_warps=4, SPLIT_K=11)),
])
def test_example_l2_b_changes_no_value(monkeypatch, poison, M, N, K, cfg):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    import matmul as ex

    a, w = _randn(M, K), _randn(N, K, seed=1)                # weights [N, K] (Llama)
    outs = {l2: ex.matmul(a, w, trans_b=True, l2_b=l2, **cfg) for l2 in (256, 0)}
    assert poison and torch.equal(outs[0], outs[256])     # (outputs started as NaN)
    ref = a.double() @ w.double().T
    err = (outs[0].double() - ref).abs().max() / ref.abs().max()
    assert err < 1e-2 and not outs[0].isnan().any()


@needs_sass
@pytest.mark.parametrize("l2", [0, 128, 256])
def test_example_descriptor_carries_l2_b(l2):
    """B's descriptor (argument 1) has the promotion asked for, A's (argument 0) the default
    (absent from the metadata); the launcher builds and caches descriptors by this entry."""
    import matmul as ex

    ck = ex.matmul_kernel.compile(
        [("*bf16", 16)] * 3 + [("*fp32", 16), ("*i32", 16)] + [("i32", 16)] * 3,
        (64, 128, 64, 4, 8, True, 2, 0, False, l2), 4, "sm_90a")
    tma = {e["param"]: e for e in ck.metadata["tma"]}
    assert set(tma) == {0, 1} and "l2" not in tma[0]
    assert tma[1].get("l2", 256) == l2
    assert ck.metadata["spills"] == 0


# ---------------------------------------------------------------- kit.graph
def _source(params: dict, m=5, k=440, n=72) -> str:
    g = build(m, k, n)
    return g, module_source(g, fused_groups(g, params), "l2w")


def test_graph_l2w_only_on_the_weights():
    _, src = _source(dict(smem(M=5), L2W=0))
    loads = [ln.strip() for ln in src.splitlines() if "kit.tma_load(" in ln]
    assert loads and all(("l2_promotion=0" in ln) == ln.startswith("kit.tma_load(w0s")
                         for ln in loads), loads
    epi = dict(smem(M=5), BM=64, NORM="epi", L2W=0)       # x * w as the register A operand
    _, src = _source(epi)
    loads = [ln.strip() for ln in src.splitlines() if "kit.tma_load(" in ln]
    assert len(loads) == 2 and all("ws0" in ln and "l2_promotion=0" in ln for ln in loads)
    _, src = _source(smem(M=5))
    assert "l2_promotion" not in src
    assert codegen_wgmma.l2_option({}) == "" and codegen_wgmma.l2_option({"L2W": 0}) != ""


def test_graph_l2w_changes_no_value():
    """The same values with and without the weights' promotion (split, fused combine), and
    right against float64 on fresh inputs."""
    from kitjit.graph import search

    outs = []
    for l2w in (256, 0):
        g, src = _source(dict(smem(M=5, BN=128, SPLIT=3, STAGES=4, FUSE=True), L2W=l2w))
        mod = load(src, f"l2w_{l2w}")
        assert search.verify(g, mod, search.Trials(g, "cpu", 1)) is None
        torch.manual_seed(0)
        outs.append(mod.run(*search.random_inputs(g, "cpu"))[0])
    assert torch.equal(outs[0], outs[1])


@needs_sass
def test_graph_descriptor_carries_l2w():
    g, src = _source(dict(smem(SPLIT=4, FUSE=True), L2W=0), 16, 4096, 6144)
    path = pathlib.Path(tempfile.mkdtemp()) / "l2w_sass.py"
    path.write_text(src)
    ck = kit.compile_aot(str(path), "k0_matmul",
                         ["*fp16:16"] * 4 + ["*fp32:16", "*fp32:16", "*i32:16"], {}, 4,
                         arch="sm_90a")
    l2 = sorted(e.get("l2", 256) for e in ck.metadata["tma"])
    assert l2 == [0, 256]                     # W without promotion, x (re-read) with it
    assert ck.metadata["spills"] == 0


# ---------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("M,N,K", [(16, 6144, 4096), (128, 4096, 4096), (77, 1000, 2056)])
def test_example_l2_b_gpu(poison, M, N, K):
    """The example's split-K paths (in-kernel at M <= 64, slabs above) and the cluster
    split-K with unpromoted weight copies, against float64; the same bits as promoted."""
    import matmul as ex

    from kitjit.nn.matmul_splitk import matmul_splitk_cluster

    a, w = _randn(M, K).cuda(), _randn(N, K, seed=1).cuda()
    ref = a.double() @ w.double().T
    for fn in (lambda l2: ex.matmul(a, w, trans_b=True, l2_b=l2),
               lambda l2: matmul_splitk_cluster(a, w, True, share_a=True, L2_B=l2)):
        outs = [fn(l2) for l2 in (256, 0)]
        assert torch.equal(outs[0], outs[1])
        err = (outs[1].double() - ref).abs().max() / ref.abs().max()
        assert err < 1e-2 and not outs[1].isnan().any()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("params", [dict(smem(SPLIT=4, STAGES=4, FUSE=True), L2W=0),
                                    dict(smem(BN=128, SPLIT=8, FUSE=True), L2W=0)])
def test_graph_l2w_gpu(params):
    from kitjit.graph import search

    g, src = _source(params, 16, 4096, 6144)
    mod = load(src, "l2w_gpu")
    assert search.verify(g, mod, search.Trials(g, "cuda", 3)) is None
